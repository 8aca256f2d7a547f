"""Shape rules of the ONNX-ML ops ONNX types without a shape at ML opset 1 (as scikit-learn's
exporter writes them): their outputs feed other nodes, so polyonnx must size them itself."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ShapeError
from polyonnx.graph.ir import ML_DOMAIN, Node, Value
from polyonnx.graph.ml_shapes import ml_outputs

TREE = {
    "nodes_treeids": [0, 0, 0],
    "nodes_nodeids": [0, 1, 2],
    "nodes_featureids": [1, 0, 0],
    "nodes_values": [0.25, 0.0, 0.0],
    "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
    "nodes_truenodeids": [1, 0, 0],
    "nodes_falsenodeids": [2, 0, 0],
}


def _run_both(nodes: list, outputs: list[tuple[str, int]], x: np.ndarray) -> None:
    """A model whose ML node's outputs are read by standard ops, against onnxruntime."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(o, t, None) for o, t in outputs],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid(ML_DOMAIN, 1)]
    )
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = polyonnx.InferenceSession(model).run(None, {"x": x})
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)


X = np.array([[0.5, -1.0], [-0.5, 1.0], [1.5, 0.25]], np.float32)


def test_tree_classifier_scores_feed_other_ops() -> None:
    tree = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "scores"],
        domain=ML_DOMAIN,
        classlabels_int64s=[3, 5, 8],
        class_treeids=[0, 0, 0, 0],
        class_nodeids=[1, 1, 2, 2],
        class_ids=[0, 1, 2, 1],
        class_weights=[0.9, 0.1, 0.2, 0.8],
        **TREE,
    )
    _run_both(
        [
            tree,
            helper.make_node("ReduceMax", ["scores"], ["top"], axes=[1], keepdims=0),
            helper.make_node("Mul", ["label", "label"], ["label2"]),
        ],
        [("top", TensorProto.FLOAT), ("label2", TensorProto.INT64)],
        X,
    )


def test_tree_regressor_output_feeds_other_ops() -> None:
    tree = helper.make_node(
        "TreeEnsembleRegressor",
        ["x"],
        ["y"],
        domain=ML_DOMAIN,
        n_targets=2,
        target_treeids=[0, 0, 0, 0],
        target_nodeids=[1, 1, 2, 2],
        target_ids=[0, 1, 0, 1],
        target_weights=[1.0, -1.0, 2.0, 3.0],
    )
    tree.attribute.extend(helper.make_node("N", [], [], **TREE).attribute)
    _run_both([tree, helper.make_node("Relu", ["y"], ["z"])], [("z", TensorProto.FLOAT)], X)


def test_array_feature_extractor_with_run_time_indices() -> None:
    """scikit-learn's labels: the class table indexed by the row's argmax."""
    table = helper.make_tensor("classes", TensorProto.FLOAT, [4], [10.0, 20.0, 30.0, 40.0])
    nodes = [
        helper.make_node("Constant", [], ["classes"], value=table),
        helper.make_node("ArgMax", ["x"], ["best"], axis=1),
        helper.make_node(
            "ArrayFeatureExtractor", ["classes", "best"], ["picked"], domain=ML_DOMAIN
        ),
        helper.make_node("Neg", ["picked"], ["out"]),
    ]
    _run_both(nodes, [("out", TensorProto.FLOAT)], X)


@pytest.mark.parametrize(
    ("op", "attrs", "shape"),
    [
        ("TreeEnsembleRegressor", {}, (5, 1)),
        ("TreeEnsembleRegressor", {"n_targets": 3}, (5, 3)),
        ("TreeEnsemble", {"n_targets": 2}, (5, 2)),
        ("LinearRegressor", {"targets": 4}, (5, 4)),
        ("SVMRegressor", {}, (5, 1)),
    ],
)
def test_regressor_columns(op: str, attrs: dict, shape: tuple[int, ...]) -> None:
    node = Node("n", op, ("x",), ("y",), attrs, ML_DOMAIN)
    [y] = ml_outputs(node, [Value("x", "float32", (5, 7))])
    assert y.shape == shape


def test_classifier_with_string_labels_types_its_label_for_the_strings_pass() -> None:
    node = Node(
        "n",
        "TreeEnsembleClassifier",
        ("x",),
        ("y", "z"),
        {"classlabels_strings": ("a", "b", "c")},
        ML_DOMAIN,
    )
    y, z = ml_outputs(node, [Value("x", "float32", (5, 7))])
    assert (y.dtype, y.shape, z.shape) == ("object", (5,), (5, 3))


def test_an_op_without_a_rule_is_named() -> None:
    with pytest.raises(ShapeError, match="no shape rule for ai.onnx.ml.DictVectorizer"):
        ml_outputs(
            Node("n", "DictVectorizer", ("x",), ("y",), {}, ML_DOMAIN), [Value("x", "int64", (3,))]
        )
