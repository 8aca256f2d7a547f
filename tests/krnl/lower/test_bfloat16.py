"""bfloat16 arithmetic: each op computed in float32 and rounded to bfloat16 at its output
(:mod:`polyonnx.graph.passes.bfloat16`), Softmax, LogSoftmax and Attention rounding their
steps as their function bodies do, compared with the ONNX reference (ml_dtypes)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.bfloat16 import compute_bfloat16
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import const, model, tensor

BF = TensorProto.BFLOAT16
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Each test draws the same values whichever tests ran before it (xdist splits them)."""
    global RNG
    RNG = np.random.default_rng(11)


def _bf16(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(BF16)


def _run_both(m, feeds):
    got = polyonnx.InferenceSession(m).run(None, feeds)
    return got, onnx_reference_outputs(m, feeds)


def _bits(a: np.ndarray) -> np.ndarray:
    assert a.dtype == BF16
    return a.view(np.uint16)


def _ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """How many bfloat16 values apart (finite values of one sign; 0 where both are NaN)."""
    assert got.dtype == ref.dtype == BF16
    key = lambda a: np.where(  # noqa: E731 - the codes in the order of the values
        _bits(a) & 0x8000, 0x8000 - (_bits(a) & 0x7FFF).astype(np.int32), _bits(a) + 0x8000
    ).astype(np.int32)
    both_nan = np.isnan(got.astype(np.float32)) & np.isnan(ref.astype(np.float32))
    return np.where(both_nan, 0, np.abs(key(got) - key(ref)))


def _unary(op: str, shape: list[int], **attrs: object):
    return model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        [tensor("x", shape, BF)],
        [tensor("y", shape, BF)],
        opset=21,
    )


def _special(n: int) -> np.ndarray:
    """Random values, and zeros, infinities, NaN and the largest finite bfloat16."""
    values = np.concatenate(
        [
            RNG.standard_normal(n) * 10.0 ** RNG.integers(-3, 4, n),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895e38, -3.3895e38],
        ]
    )
    return values.astype(BF16)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_binary_ops_round_as_the_reference(op: str):
    # One numpy ufunc per op: float32 arithmetic rounded once to bfloat16, overflow to
    # infinity and NaN included, bit for bit.
    m = model(
        [helper.make_node(op, ["a", "b"], ["y"])],
        [tensor("a", [307], BF), tensor("b", [307], BF)],
        [tensor("y", [307], BF)],
        opset=21,
    )
    a, b = _special(300), _special(300)[::-1].copy()
    if op == "Pow":
        a = np.abs(a)
    with np.errstate(all="ignore"):
        got, ref = _run_both(m, {"a": a, "b": b})
    np.testing.assert_array_equal(_ulps(got[0], ref[0]), 0)


def test_ties_round_to_even():
    # 1 + 2**-8 and 1 + 3 * 2**-8 are halfway between bfloat16 neighbours (8 significant bits).
    m = model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [tensor("a", [4], BF), tensor("b", [4], BF)],
        [tensor("y", [4], BF)],
    )
    a = np.array([1.0, 1.0, 256.0, -1.0], BF16)
    b = np.array([2.0**-8, 3 * 2.0**-8, 1.0, -(2.0**-8)], BF16)
    (got,) = polyonnx.InferenceSession(m).run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(got.astype(np.float32), [1.0, 1.0 + 2.0**-6, 256.0, -1.0])
    assert got.dtype == BF16


@pytest.mark.parametrize("op", ["Abs", "Neg", "Relu", "Exp", "Sqrt", "Tanh", "Floor"])
def test_unary_ops_round_as_the_reference(op: str):
    # Exp and Tanh by polyonnx's float32 vector math: a float32 ulp from numpy's, which
    # rounds to the same bfloat16 but for a float32 result next to a bfloat16 tie.
    x = _special(400) if op not in ("Exp", "Tanh") else _bf16(400, scale=4.0)
    if op == "Sqrt":
        x = np.abs(x)
    with np.errstate(all="ignore"):
        got, ref = _run_both(_unary(op, [x.size]), {"x": x})
    assert _ulps(got[0], ref[0]).max() <= (1 if op in ("Exp", "Tanh") else 0)


def test_nan_stays_nan_and_codes_keep_their_sign():
    m = _unary("Neg", [4])
    x = np.array([np.nan, -np.nan, 0.0, -0.0], BF16)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    assert np.isnan(got[:2].astype(np.float32)).all()
    np.testing.assert_array_equal(_bits(got[2:]), [0x8000, 0x0000])


def test_an_elementwise_chain_rounds_every_op():
    # (x * c) * c: the first product is rounded to bfloat16 before the second, as the
    # reference does (the two may be fused into one kernel).
    m = model(
        [helper.make_node("Mul", ["x", "c"], ["t"]), helper.make_node("Mul", ["t", "c"], ["y"])],
        [tensor("x", [512], BF)],
        [tensor("y", [512], BF)],
        [const("c", np.array([1.3], BF16))],
    )
    x = _bf16(512)
    got, ref = _run_both(m, {"x": x})
    np.testing.assert_array_equal(_bits(got[0]), _bits(ref[0]))
    c = np.float32(BF16(1.3))
    unrounded = (x.astype(np.float32) * c * c).astype(BF16)
    assert not np.array_equal(_bits(unrounded), _bits(ref[0]))  # (the test can tell)


def test_reduce_max_and_mean_of_short_rows_match_the_reference():
    m = model(
        [
            helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=0),
            helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0),
        ],
        [tensor("x", [5, 4], BF)],
        [tensor("mx", [5], BF), tensor("mean", [5], BF)],
        [const("axes", np.array([1], np.int64))],
        opset=18,
    )
    x = np.arange(20).reshape(5, 4).astype(BF16)  # (sums exact in bfloat16)
    got, ref = _run_both(m, {"x": x})
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(r))


def test_reduce_sum_accumulates_in_float32():
    # numpy sums a bfloat16 array in bfloat16: 1000 ones make 256 there. polyonnx sums in
    # float32 and rounds once, as MatMul's and Einsum's references do.
    m = model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        [tensor("x", [3, 1000], BF)],
        [tensor("y", [3], BF)],
        [const("axes", np.array([1], np.int64))],
        opset=18,
    )
    x = np.ones((3, 1000), BF16)
    x[1] = _bf16(1000)
    x[2] = np.abs(_bf16(1000))
    got, ref = _run_both(m, {"x": x})
    assert float(ref[0][0]) == 256.0
    want = x.astype(np.float32).sum(axis=1).astype(BF16)
    assert _ulps(got[0], want).max() <= 1
    assert float(got[0][0]) == 1000.0


def test_matmul_and_einsum_sum_in_float32_as_the_reference():
    m = model(
        [
            helper.make_node("MatMul", ["a", "b"], ["y"]),
            helper.make_node("Einsum", ["a", "b"], ["z"], equation="ij,jk->ki"),
        ],
        [tensor("a", [6, 300], BF), tensor("b", [300, 5], BF)],
        [tensor("y", [6, 5], BF), tensor("z", [5, 6], BF)],
    )
    feeds = {"a": _bf16(6, 300), "b": _bf16(300, 5)}
    got, ref = _run_both(m, feeds)
    # float32 sums in another order may round to the neighbouring bfloat16, never further.
    for g, r in zip(got, ref, strict=True):
        assert _ulps(g, r).max() <= 1


def _softmax_model(op: str, shape: list[int], axis: int = -1):
    return _unary(op, shape, axis=axis)


def _function_body_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax's function body on bfloat16 tensors, the sum in float32 (rounded once)."""
    shifted = x - x.max(axis=axis, keepdims=True)  # (ml_dtypes: float32, rounded)
    e = np.exp(shifted)
    total = e.astype(np.float32).sum(axis=axis, keepdims=True).astype(BF16)
    return e / total


@pytest.mark.parametrize(("shape", "axis"), [([4, 8], -1), ([3, 6, 5], 1)])
def test_softmax_rounds_its_steps(shape: list[int], axis: int):
    x = _bf16(*shape, scale=3.0)
    (got,) = polyonnx.InferenceSession(_softmax_model("Softmax", shape, axis)).run(None, {"x": x})
    (ref,) = onnx_reference_outputs(_softmax_model("Softmax", shape, axis), {"x": x})
    # The function body's steps, float32 exp a float32 ulp from numpy's.
    assert _ulps(got, _function_body_softmax(x, axis)).max() <= 1
    # The reference rounds its partial sums too: a few bfloat16 ulps on rows this short.
    assert _ulps(got, ref).max() <= 4


def test_log_softmax_is_the_log_of_the_rounded_softmax():
    x = _bf16(4, 8, scale=3.0)
    got, ref = _run_both(_softmax_model("LogSoftmax", [4, 8]), {"x": x})
    assert _ulps(got[0], np.log(_function_body_softmax(x, -1))).max() <= 1
    # The reference's partial sums move its probabilities by a few ulps, and a log near 0
    # has far smaller ulps than the probability it is the log of: the Runner's tolerance
    # for bfloat16, with an absolute one for those.
    f32 = [a.astype(np.float32) for a in (got[0], ref[0])]
    np.testing.assert_allclose(*f32, rtol=2.0**-6, atol=2.0**-5)


def test_a_long_softmax_row_keeps_its_mass():
    # 4096 terms: numpy's bfloat16 partial sums stall, so the reference's probabilities add
    # up to far more than 1; polyonnx's float32 sum keeps them at 1 (each a few ulps off, as
    # the function body's rounded ``x - max`` leaves them).
    x = _bf16(2, 4096, scale=2.0)
    got, ref = _run_both(_softmax_model("Softmax", [2, 4096]), {"x": x})
    exact = np.exp(x.astype(np.float64) - x.astype(np.float64).max(axis=1, keepdims=True))
    exact /= exact.sum(axis=1, keepdims=True)
    mass = got[0].astype(np.float64).sum(axis=1)
    assert np.abs(mass - 1).max() < 0.01
    assert np.abs(got[0].astype(np.float64) / exact - 1).mean() < 0.02
    assert ref[0].astype(np.float64).sum(axis=1).min() > 1.15


def _function_body_attention(q, k, v, causal: bool, softcap: float) -> np.ndarray:
    """Attention's function body on bfloat16 tensors (4-D, no mask), sums in float32."""
    root = BF16(np.sqrt(1 / np.sqrt(q.shape[-1])))
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    s = (f32(q * root) @ f32(np.swapaxes(k * root, -1, -2))).astype(BF16)
    if softcap:
        s = np.tanh(s / BF16(softcap)) * BF16(softcap)
    if causal:
        s = s + np.where(np.tril(np.ones(s.shape[-2:], bool)), 0, -np.inf).astype(BF16)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / f32(e).sum(axis=-1, keepdims=True).astype(BF16)
    return (f32(p) @ f32(v)).astype(BF16)


@pytest.mark.parametrize(("causal", "softcap"), [(0, 0.0), (1, 0.0), (0, 2.0), (1, 2.0)])
def test_attention_rounds_where_its_function_body_does(causal: int, softcap: float):
    m = model(
        [helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=causal, softcap=softcap)],
        [
            tensor("q", [1, 2, 5, 8], BF),
            tensor("k", [1, 2, 7, 8], BF),
            tensor("v", [1, 2, 7, 8], BF),
        ],
        [tensor("y", [1, 2, 5, 8], BF)],
        opset=24,
    )
    # Positive values as the suite's (a sum of mixed signs near 0 is many ulps from any
    # other order's).
    feeds = {
        n: RNG.uniform(0, 1, s).astype(BF16)
        for n, s in (("q", (1, 2, 5, 8)), ("k", (1, 2, 7, 8)), ("v", (1, 2, 7, 8)))
    }
    got, ref = _run_both(m, feeds)
    body = _function_body_attention(feeds["q"], feeds["k"], feeds["v"], bool(causal), softcap)
    # exp and tanh in float32 vector math a float32 ulp from numpy's; the reference rounds
    # the softmax's partial sums too.
    assert _ulps(got[0], body).max() <= 1
    assert _ulps(got[0], ref[0]).max() <= 2


@pytest.mark.parametrize("op", ["TopK", "Unique"])
def test_orderings_compare_values_not_codes(op: str):
    # A negative bfloat16's code is larger than any positive one's.
    x = np.array([2.0, -1.0, 0.5, -3.0, 2.0, 0.0, -0.5], BF16)
    if op == "TopK":
        nodes = [helper.make_node("TopK", ["x", "k"], ["y", "i"], largest=0)]
        outs = [tensor("y", [4], BF), tensor("i", [4], TensorProto.INT64)]
        inits = [const("k", np.array([4], np.int64))]
    else:
        nodes = [helper.make_node("Unique", ["x"], ["y", "i", "inv", "n"], sorted=1)]
        outs = [
            tensor("y", [None], BF),
            tensor("i", [None], TensorProto.INT64),
            tensor("inv", [None], TensorProto.INT64),
            tensor("n", [None], TensorProto.INT64),
        ]
        inits = []
    m = model(nodes, [tensor("x", [7], BF)], outs, inits, opset=21)
    got, ref = _run_both(m, {"x": x})
    np.testing.assert_array_equal(_bits(got[0]), _bits(ref[0]))
    for g, r in zip(got[1:], ref[1:], strict=True):
        np.testing.assert_array_equal(g, r)


def test_range_and_constant_of_shape_compute_bfloat16():
    # (Range's shape needs its inputs at compile time: it and ConstantOfShape fold.)
    m = model(
        [
            helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
            helper.make_node(
                "ConstantOfShape", ["shape"], ["c"], value=helper.make_tensor("v", BF, [1], [1.5])
            ),
            helper.make_node("Add", ["r", "c"], ["t"]),
            helper.make_node("Mul", ["t", "x"], ["y"]),
        ],
        [tensor("x", [4], BF)],
        [tensor("y", [4], BF)],
        [
            const("start", np.array(1.0, BF16)),
            const("limit", np.array(9.0, BF16)),
            const("delta", np.array(2.0, BF16)),
            const("shape", np.array([4], np.int64)),
        ],
    )
    got, ref = _run_both(m, {"x": _bf16(4)})
    np.testing.assert_array_equal(_bits(got[0]), _bits(ref[0]))


@pytest.mark.parametrize("flag", [True, False])
def test_the_branches_of_an_if_compute_bfloat16(flag: bool):
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"])], "then", [], [tensor("a", [4], BF)]
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["b"])], "else", [], [tensor("b", [4], BF)]
    )
    m = model(
        [
            helper.make_node("If", ["c"], ["t"], then_branch=then, else_branch=other),
            helper.make_node("Sqrt", ["t"], ["y"]),
        ],
        [tensor("c", [], TensorProto.BOOL), tensor("x", [4], BF)],
        [tensor("y", [4], BF)],
    )
    feeds = {"c": np.array(flag), "x": np.array([1.3, 2.7, 0.1, 9.9], BF16)}
    got, ref = _run_both(m, feeds)
    np.testing.assert_array_equal(_bits(got[0]), _bits(ref[0]))


# --------------------------------------------------------------------------- the graph pass


def _values(**dtypes: str) -> dict[str, Value]:
    return {n: Value(n, d, (2,)) for n, d in dtypes.items()}


def test_ops_compute_in_float32_between_conversions():
    v = _values(x="bfloat16", t="bfloat16", s="bfloat16", y="bfloat16", z="bfloat16")
    nodes = (
        Node("exp", "Exp", ("x",), ("t",)),
        Node("view", "Reshape", ("t", "shape"), ("s",)),
        Node("add", "Add", ("t", "s"), ("y",), guard=(("flag", True),)),
        Node("soft", "Softmax", ("x",), ("z",)),
    )
    v["shape"] = Value("shape", "int64", (1,))
    g = Graph("g", (v["x"],), (v["y"], v["z"]), nodes, v, {"shape": np.array([2])})
    out = compute_bfloat16(g)
    print(out)
    lines = [str(n) for n in out.nodes]
    assert lines == [
        "exp__widen_x: x__f32 = Cast[to=1](x)",
        "exp: t__f32 = Exp(x__f32)",
        "exp__round_t: t = Cast[to=16](t__f32)",
        "view: s = Reshape(t, shape)",  # (views move codes)
        "add__widen_t: t__f32_1 = Cast[to=1](t)",  # (the rounded t, not t__f32)
        "add__widen_s: s__f32 = Cast[to=1](s)",
        "add: y__f32 = Add(t__f32_1, s__f32) if flag",
        "add__round_y: y = Cast[to=16](y__f32) if flag",
        "soft: z = Softmax(x)",  # (computes bfloat16 itself)
    ]
    assert out.values["y__f32"].dtype == "float32"


def test_a_graph_without_bfloat16_arithmetic_is_unchanged():
    v = _values(x="bfloat16", y="float32")
    g = Graph("g", (v["x"],), (v["y"],), (Node("c", "Cast", ("x",), ("y",), {"to": 1}),), v)
    assert compute_bfloat16(g) is g


def test_other_domains_and_encoded_types_are_still_refused():
    m = model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [tensor("x", [4], TensorProto.FLOAT8E5M2)],
        [tensor("y", [4], TensorProto.FLOAT8E5M2)],
        opset=21,
    )
    with pytest.raises(UnsupportedOpError, match="does not compute with"):
        polyonnx.InferenceSession(m)
