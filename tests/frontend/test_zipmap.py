"""ZipMap: a classifier's scores returned as onnxruntime returns them (a list of dicts), in
models shaped as scikit-learn's exporter writes them (ONNX-ML opset 1: no inferred shapes)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx import pipeline
from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.zipmap import Zipped, without_zipmaps

ML = "ai.onnx.ml"
X = np.array([[-1.0, 0.5], [1.0, -2.0], [0.0, 3.0], [2.5, 0.25]], np.float32)


def _forest(labels: list[int] | list[str], *, zipmap: bool = True, read: bool = False):
    """A depth-1 tree per feature voting for three classes, then (optionally) a ZipMap."""
    key = "classlabels_int64s" if isinstance(labels[0], int) else "classlabels_strings"
    tree = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "scores"],
        domain=ML,
        nodes_treeids=[0, 0, 0, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 0, 1, 2],
        nodes_featureids=[0, 0, 0, 1, 1, 1],
        nodes_values=[0.0, 0.0, 0.0, 0.4, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2,
        nodes_truenodeids=[1, 0, 0, 1, 0, 0],
        nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
        class_treeids=[0, 0, 0, 1, 1],
        class_nodeids=[1, 2, 2, 1, 2],
        class_ids=[0, 1, 2, 2, 1],
        class_weights=[0.5, 0.3, 0.2, 0.25, 0.75],
        post_transform="SOFTMAX",
        **{key: labels},
    )
    label_type = TensorProto.INT64 if key == "classlabels_int64s" else TensorProto.STRING
    outputs = [helper.make_tensor_value_info("label", label_type, [len(X)])]
    nodes = [tree]
    if zipmap:
        nodes.append(helper.make_node("ZipMap", ["scores"], ["probs"], domain=ML, **{key: labels}))
        map_type = helper.make_map_type_proto(
            label_type, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
        )
        outputs.append(helper.make_value_info("probs", helper.make_sequence_type_proto(map_type)))
        if read:  # another node reads the sequence of maps
            nodes.append(helper.make_node("SequenceLength", ["probs"], ["n"]))
            outputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    else:
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(X), 2])],
        outputs,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid(ML, 1)]
    )


@pytest.mark.parametrize("labels", [[4, 7, 9], ["cat", "dog", "emu"]], ids=["int", "string"])
def test_zipmap_returns_onnxruntimes_dicts(labels: list) -> None:
    model = _forest(labels)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    sess = polyonnx.InferenceSession(model)
    label, probs = sess.run(None, {"x": X})
    np.testing.assert_array_equal(label, expected[0])
    assert [list(p) for p in probs] == [list(p) for p in expected[1]]  # labels, in order
    for got, want in zip(probs, expected[1], strict=True):
        np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-6)
    assert [type(k) for k in probs[0]] == [type(labels[0])] * 3
    onnxruntime_types = [
        o.type for o in ort.InferenceSession(model.SerializeToString()).get_outputs()
    ]
    assert [o.type for o in sess.get_outputs()] == onnxruntime_types
    assert sess.run(["probs"], {"x": X})[0] == probs


def test_scores_without_zipmap_match_onnxruntime() -> None:
    model = _forest([0, 1, 2], zipmap=False)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    got = polyonnx.InferenceSession(model).run(None, {"x": X})
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)


def test_zipmap_read_by_another_node_is_refused() -> None:
    with pytest.raises(UnsupportedOpError, match="ZipMap.*read by other nodes"):
        polyonnx.InferenceSession(_forest([0, 1, 2], read=True))


def test_compiling_a_library_with_zipmap_names_the_export_option() -> None:
    with pytest.raises(UnsupportedOpError, match="zipmap': False"):
        pipeline.compile(_forest([0, 1, 2]))


def test_without_zipmaps_leaves_other_models_alone() -> None:
    model = _forest([0, 1, 2], zipmap=False)
    assert without_zipmaps(model) == (model, {})


def test_labels_and_scores_must_agree() -> None:
    with pytest.raises(ModelError, match="2 labels for scores of shape"):
        Zipped((0, 1)).present(np.zeros((4, 3), np.float32))
    bad = _forest([0, 1, 2])
    del bad.graph.node[1].attribute[:]
    with pytest.raises(ModelError, match="exactly one of classlabels"):
        without_zipmaps(bad)


def test_a_one_dimensional_score_vector_is_one_row() -> None:
    assert Zipped(("a", "b")).present(np.array([0.5, 0.5], np.float32)) == [{"a": 0.5, "b": 0.5}]


def test_zipmap_model_keeps_its_proto() -> None:
    model = _forest([0, 1, 2])
    before = model.SerializeToString()
    without_zipmaps(model)
    assert model.SerializeToString() == before
