"""FlexAttention (``ai.onnx.preview``) as MatMul, Softmax and its inlined subgraphs: the
answers of ``onnx.reference`` for plain, scaled, grouped-query, float16 and double attention
with score and probability modifiers; shapes that do not fit are refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.preview import DOMAIN, expand_preview
from polyonnx.testing.reference import onnx_reference_outputs


def _score_bias(elem: int) -> onnx.GraphProto:
    """score_mod: scores + a relative-position bias (q - k) built from the scores' shape."""
    s = helper.make_tensor_value_info("s", elem, None)
    out = helper.make_tensor_value_info("out", elem, None)
    nodes = [
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["l"], axis=0),
        helper.make_node("Gather", ["shape", "three"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "l", "one"], ["qr"]),
        helper.make_node("Range", ["zero", "n", "one"], ["kr"]),
        helper.make_node("Unsqueeze", ["qr", "axis1"], ["qcol"]),
        helper.make_node("Sub", ["qcol", "kr"], ["rel"]),
        helper.make_node("Cast", ["rel"], ["relf"], to=elem),
        helper.make_node("Mul", ["relf", "slope"], ["bias"]),
        helper.make_node("Add", ["s", "bias"], ["out"]),
    ]
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    inits = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("two", 2), ("three", 3), ("zero", 0), ("one", 1), ("axis1", [1]))
    ] + [numpy_helper.from_array(np.array(0.25, dtype), "slope")]
    return helper.make_graph(nodes, "score_bias", [s], [out], inits)


def _prob_scale(elem: int) -> onnx.GraphProto:
    p = helper.make_tensor_value_info("p", elem, None)
    out = helper.make_tensor_value_info("out", elem, None)
    half = numpy_helper.from_array(np.array(0.5, helper.tensor_dtype_to_np_dtype(elem)), "h")
    return helper.make_graph(
        [helper.make_node("Mul", ["p", "h"], ["out"])], "prob_scale", [p], [out], [half]
    )


def _model(
    shapes: tuple[tuple[int, ...], ...], elem: int = TensorProto.FLOAT, **attrs: object
) -> onnx.ModelProto:
    names = ("q", "k", "v")
    node = helper.make_node("FlexAttention", list(names), ["y"], domain=DOMAIN, **attrs)
    graph = helper.make_graph(
        [node],
        "flex",
        [
            helper.make_tensor_value_info(n, elem, list(s))
            for n, s in zip(names, shapes, strict=True)
        ],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(DOMAIN, 1)]
    )


def _feeds(shapes: tuple[tuple[int, ...], ...], dtype: type) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {n: rng.standard_normal(s).astype(dtype) for n, s in zip("qkv", shapes, strict=True)}


PLAIN = ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4))
GQA = ((1, 6, 5, 8), (1, 2, 7, 8), (1, 2, 7, 3))


@pytest.mark.parametrize(
    ("shapes", "attrs"),
    [
        (PLAIN, {}),
        (PLAIN, {"scale": 0.3}),
        (GQA, {}),
        (PLAIN, {"score_mod": _score_bias(TensorProto.FLOAT)}),
        (GQA, {"score_mod": _score_bias(TensorProto.FLOAT), "prob_mod": _prob_scale(1)}),
    ],
    ids=["plain", "scaled", "gqa", "score_mod", "gqa_both_mods"],
)
def test_flex_attention_gives_the_reference_answer(
    shapes: tuple[tuple[int, ...], ...], attrs: dict[str, object]
) -> None:
    model, feeds = _model(shapes, **attrs), _feeds(shapes, np.float32)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    [want] = onnx_reference_outputs(model, feeds)
    assert got.shape == want.shape == (*shapes[0][:3], shapes[2][3])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_float16_attention_takes_its_softmax_in_float32() -> None:
    f32 = TensorProto.FLOAT
    model = _model(PLAIN, TensorProto.FLOAT16, score_mod=_score_bias(f32))
    feeds = _feeds(PLAIN, np.float16)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    [want] = onnx_reference_outputs(model, feeds)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-3)
    own = [
        n
        for n in expand_preview(model).graph.node
        if n.op_type == "Cast" and "/score_mod/" not in n.name
    ]
    targets = [helper.get_attribute_value(n.attribute[0]) for n in own]
    assert targets == [f32, f32, TensorProto.FLOAT16]  # the scores, V, the result


def test_double_attention_with_a_float_softmax_precision() -> None:
    model = _model(PLAIN, TensorProto.DOUBLE, softmax_precision=TensorProto.FLOAT)
    feeds = _feeds(PLAIN, np.float64)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    [want] = onnx_reference_outputs(model, feeds)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_model_without_flex_attention_is_returned_as_it_is() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph)
    assert expand_preview(model) is model


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((1, 4, 5, 8), (1, 3, 6, 8), (1, 3, 6, 8)), "Q's 4 heads are not a multiple of K's 3"),
        (((1, 3, 5, 8), (1, 3, 6, 4), (1, 3, 6, 8)), "Q's head size 8 is not K's 4"),
        (((1, 3, 5, 8), (1, 3, 6, 8), (1, 3, 7, 8)), "K has 6 positions, V 7"),
        (((3, 5, 8), (3, 6, 8), (3, 6, 8)), "must have rank 4"),
    ],
)
def test_shapes_that_do_not_fit_are_refused_by_name(
    shapes: tuple[tuple[int, ...], ...], message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        polyonnx.InferenceSession(_model(shapes))


def test_an_input_without_a_static_shape_is_refused() -> None:
    model = _model((("B", 3, 5, 8), ("B", 3, 6, 8), ("B", 3, 6, 8)))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedOpError, match="FlexAttention.*'q' has no static shape"):
        expand_preview(model)


def test_a_modifier_with_two_inputs_is_refused() -> None:
    bad = _prob_scale(TensorProto.FLOAT)
    bad.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    with pytest.raises(ModelError, match="prob_mod must have one input and one output"):
        polyonnx.InferenceSession(_model(PLAIN, prob_mod=bad))
