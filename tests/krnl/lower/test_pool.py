"""MaxPool / AveragePool / global pools vs onnxruntime."""

from __future__ import annotations

import pytest

from tests.krnl.harness import check, check_op, graph_from_model, make_model, node_kernel, rand

WINDOWS = {
    "plain": {"kernel_shape": [2, 2]},
    "strides": {"kernel_shape": [3, 3], "strides": [2, 2]},
    "pads": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    "asym_pads": {"kernel_shape": [3, 2], "pads": [1, 0, 0, 1], "strides": [2, 1]},
    "ceil": {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    "ceil_pads": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "same_upper": {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    "same_lower": {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER"},
    "valid": {"kernel_shape": [3, 3], "auto_pad": "VALID"},
}


@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_max_pool(case: str) -> None:
    check_op("MaxPool", [("x", rand(1, 2, 5, 5))], WINDOWS[case])


def test_max_pool_dilations() -> None:
    check_op(
        "MaxPool",
        [("x", rand(1, 2, 6, 6))],
        {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 0]},
    )


def test_max_pool_1d_and_3d() -> None:
    check_op("MaxPool", [("x", rand(1, 2, 7))], {"kernel_shape": [3], "strides": [2]})
    check_op(
        "MaxPool",
        [("x", rand(1, 1, 3, 4, 4))],
        {"kernel_shape": [2, 2, 2], "pads": [0, 1, 1, 1, 0, 0]},
    )


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_average_pool(case: str, include_pad: int) -> None:
    check_op(
        "AveragePool",
        [("x", rand(1, 2, 5, 5))],
        {**WINDOWS[case], "count_include_pad": include_pad},
    )


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_dilations(include_pad: int) -> None:
    check_op(
        "AveragePool",
        [("x", rand(1, 1, 6, 6))],
        {
            "kernel_shape": [2, 2],
            "dilations": [2, 2],
            "pads": [1, 1, 1, 1],
            "count_include_pad": include_pad,
        },
        opset=19,
    )


def test_average_pool_count_temp() -> None:
    # Windows cut by padding get their tap count from a temp buffer; full windows use a constant.
    model = make_model(
        "AveragePool", [("x", rand(1, 1, 4, 4))], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    )
    graph = graph_from_model(model)
    kernel = node_kernel(graph, graph.nodes[0])
    assert [b.name for b in kernel.buffers if b.kind == "temp"] == ["averagepool_0__count"]
    model = make_model("AveragePool", [("x", rand(1, 1, 4, 4))], {"kernel_shape": [2, 2]})
    graph = graph_from_model(model)
    assert all(b.kind != "temp" for b in node_kernel(graph, graph.nodes[0]).buffers)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 2, 3), (1, 2, 2, 3, 2)])
def test_global_pool(op: str, shape: tuple[int, ...]) -> None:
    check_op(op, [("x", rand(*shape))])


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
        {"kernel_shape": [2, 2], "storage_order": 1},
        {"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
    ],
    ids=str,
)
def test_max_pool_indices(attrs: dict) -> None:
    x = rand(2, 2, 5, 5)
    x[0, 0, 1, :] = 3.0  # ties: the first maximum wins
    model = make_model("MaxPool", [("x", x)], attrs, n_outputs=2, opset=12)
    check(model, {"x": x})


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "p": 1},
        {"kernel_shape": [2, 2], "p": 3, "dilations": [2, 2]},
        {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "p": 2},
    ],
    ids=str,
)
def test_lp_pool(attrs: dict) -> None:
    x = rand(1, 2, 5, 5) if len(attrs["kernel_shape"]) == 2 else rand(1, 2, 6)
    check_op("LpPool", [("x", x)], attrs, opset=18)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p: int) -> None:
    check_op("GlobalLpPool", [("x", rand(1, 3, 4, 2))], {"p": p})
