"""Tree ensembles compiled, against onnxruntime and onnx.reference: hand-built forests the
shape of a small random forest (several trees of depth 3 to 5), inputs on the thresholds and
NaN inputs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import PolyonnxError
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs

ML = "ai.onnx.ml"
GRID = np.array([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], np.float32)  # thresholds and inputs
FEATURES = 4


@dataclass
class _Tree:
    """A random binary tree in the older ops' node lists (node ids in pre-order)."""

    modes: list[str] = field(default_factory=list)
    features: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    true_ids: list[int] = field(default_factory=list)
    false_ids: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)

    def grow(self, rng: np.random.Generator, depth: int, branch: list[str]) -> int:
        nid = len(self.modes)
        for lst in (self.features, self.true_ids, self.false_ids, self.missing):
            lst.append(0)
        self.values.append(0.0)
        if depth == 0 or (depth < 3 and rng.random() < 0.3):
            self.modes.append("LEAF")
            return nid
        self.modes.append(str(rng.choice(branch)))
        self.features[nid] = int(rng.integers(FEATURES))
        self.values[nid] = float(rng.choice(GRID))
        self.missing[nid] = int(rng.integers(2))
        self.true_ids[nid] = self.grow(rng, depth - 1, branch)
        self.false_ids[nid] = self.grow(rng, depth - 1, branch)
        return nid


def _forest_attrs(
    seed: int, trees: int, targets: int, branch: list[str], prefix: str
) -> dict[str, object]:
    """The nodes_* and <prefix>_* attributes of ``trees`` random trees, every leaf giving a
    random weight to every target."""
    rng = np.random.default_rng(seed)
    a: dict[str, list] = {
        k: []
        for k in (
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_modes",
            "nodes_featureids",
            "nodes_values",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
            f"{prefix}_treeids",
            f"{prefix}_nodeids",
            f"{prefix}_ids",
            f"{prefix}_weights",
        )
    }
    for t in range(trees):
        tree = _Tree()
        tree.grow(rng, int(rng.integers(3, 6)), branch)
        for nid, mode in enumerate(tree.modes):
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(nid)
            a["nodes_modes"].append(mode)
            a["nodes_featureids"].append(tree.features[nid])
            a["nodes_values"].append(tree.values[nid])
            a["nodes_truenodeids"].append(tree.true_ids[nid])
            a["nodes_falsenodeids"].append(tree.false_ids[nid])
            a["nodes_missing_value_tracks_true"].append(tree.missing[nid])
            if mode == "LEAF":
                for k in range(targets):
                    a[f"{prefix}_treeids"].append(t)
                    a[f"{prefix}_nodeids"].append(nid)
                    a[f"{prefix}_ids"].append(k)
                    a[f"{prefix}_weights"].append(float(rng.uniform(-1, 2)))
    return a


def _model(
    node: onnx.NodeProto, outputs: list[onnx.ValueInfoProto], opsets: tuple[int, int] = (17, 3)
) -> onnx.ModelProto:
    """A model of ``node`` on input x[?, FEATURES], importing (default, ML) ``opsets``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, FEATURES])
    g = helper.make_graph([node], "forest", [x], outputs)
    default, ml = opsets
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", default), helper.make_opsetid(ML, ml)]
    )


def _inputs(seed: int, rows: int = 64) -> np.ndarray:
    """Features on the threshold grid (every comparison meets equality somewhere), some
    between grid points, some NaN."""
    rng = np.random.default_rng(seed)
    x = rng.choice(GRID, size=(rows, FEATURES)).astype(np.float32)
    between = rng.random(x.shape) < 0.2
    x[between] += np.float32(0.1)
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


BRANCHES = {
    "leq": ["BRANCH_LEQ"],
    "lt": ["BRANCH_LT"],
    "mixed": ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ"],
}


@pytest.mark.parametrize("branch", sorted(BRANCHES))
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_matches_onnxruntime(branch: str, aggregate: str) -> None:
    attrs = _forest_attrs(1, 5, 2, BRANCHES[branch], "target")
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["x"],
        ["y"],
        domain=ML,
        n_targets=2,
        aggregate_function=aggregate,
        base_values=[0.5, -0.25],
        **attrs,
    )
    m = _model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    x = _inputs(2)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_allclose(got, onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, onnx_reference_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("labels", ["int", "string"])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_classifier_matches_onnxruntime(labels: str, transform: str) -> None:
    attrs = _forest_attrs(3, 6, 3, BRANCHES["mixed"], "class")
    names = {"classlabels_int64s": [7, 3, 11]}
    if labels == "string":
        names = {"classlabels_strings": ["cat", "dog", "hamster"]}
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "scores"],
        domain=ML,
        post_transform=transform,
        base_values=[0.1, 0.0, -0.1],
        **names,
        **attrs,
    )
    m = _classifier(node, TensorProto.INT64 if labels == "int" else TensorProto.STRING)
    x = _inputs(4)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same_labels_and_scores(got, onnxruntime_outputs(m, {"x": x}))
    _same_labels_and_scores(got, onnx_reference_outputs(m, {"x": x}))


def _classifier(node: onnx.NodeProto, labels: int) -> onnx.ModelProto:
    outputs = [("label", labels), ("scores", TensorProto.FLOAT)]
    return _model(node, [helper.make_tensor_value_info(n, e, None) for n, e in outputs])


def _same_labels_and_scores(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_binary_classifier_as_skl2onnx_writes_it(transform: str) -> None:
    # One class id (0) per leaf, the probability of the second class: the reference's
    # binary case gives the scores [1 - p, p] (or [-p, p] through a transform).
    attrs = _forest_attrs(5, 4, 1, BRANCHES["leq"], "class")
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "scores"],
        domain=ML,
        post_transform=transform,
        classlabels_int64s=[0, 1],
        **attrs,
    )
    m = _classifier(node, TensorProto.INT64)
    x = _inputs(6)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same_labels_and_scores(got, onnx_reference_outputs(m, {"x": x}))
    if transform == "LOGISTIC":  # (onnxruntime agrees there; with NONE it writes [-p, p]
        # when some weight is negative)
        _same_labels_and_scores(got, onnxruntime_outputs(m, {"x": x}))


def _v5_from(attrs: dict) -> dict[str, object]:
    """A one-target regressor's attributes as TreeEnsemble's (ML opset 5)."""
    codes = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4}
    index: dict[tuple[int, int], int] = {}
    leaves: dict[tuple[int, int], int] = {}
    for t, nid, mode in zip(
        attrs["nodes_treeids"], attrs["nodes_nodeids"], attrs["nodes_modes"], strict=True
    ):
        table = leaves if mode == "LEAF" else index
        table[t, nid] = len(table)
    out: dict[str, list] = {k: [] for k in ("modes", "feat", "split", "t", "f", "tl", "fl", "mtt")}
    for i, key in enumerate(zip(attrs["nodes_treeids"], attrs["nodes_nodeids"], strict=True)):
        if key not in index:
            continue
        out["modes"].append(codes[attrs["nodes_modes"][i]])
        out["feat"].append(attrs["nodes_featureids"][i])
        out["split"].append(attrs["nodes_values"][i])
        out["mtt"].append(attrs["nodes_missing_value_tracks_true"][i])
        for side, name in (("t", "nodes_truenodeids"), ("f", "nodes_falsenodeids")):
            succ = (key[0], attrs[name][i])
            out[side].append(leaves[succ] if succ in leaves else index[succ])
            out[f"{side}l"].append(int(succ in leaves))
    weights = np.zeros(len(leaves), np.float32)
    for t, nid, w in zip(
        attrs["target_treeids"], attrs["target_nodeids"], attrs["target_weights"], strict=True
    ):
        weights[leaves[t, nid]] = w
    n = len(out["modes"])
    return {
        "nodes_modes": helper.make_tensor("m", TensorProto.UINT8, [n], out["modes"]),
        "nodes_featureids": out["feat"],
        "nodes_splits": helper.make_tensor("s", TensorProto.FLOAT, [n], out["split"]),
        "nodes_truenodeids": out["t"],
        "nodes_falsenodeids": out["f"],
        "nodes_trueleafs": out["tl"],
        "nodes_falseleafs": out["fl"],
        "nodes_missing_value_tracks_true": out["mtt"],
        "tree_roots": [index[t, 0] for t in sorted(set(attrs["nodes_treeids"]))],
        "leaf_targetids": [0] * len(leaves),
        "leaf_weights": helper.make_tensor("w", TensorProto.FLOAT, [len(leaves)], weights),
    }


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])  # AVERAGE, SUM, MIN, MAX
def test_tree_ensemble_5_matches_the_regressor(aggregate: int) -> None:
    # (Trees whose every root is a branch: depth >= 3.)
    attrs = _forest_attrs(7, 5, 1, BRANCHES["mixed"][:4], "target")
    node = helper.make_node(
        "TreeEnsemble",
        ["x"],
        ["y"],
        domain=ML,
        n_targets=1,
        aggregate_function=aggregate,
        **_v5_from(attrs),
    )
    m = _model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], (21, 5))
    xs = _inputs(8)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": xs})
    np.testing.assert_allclose(got, onnx_reference_outputs(m, {"x": xs})[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, onnxruntime_outputs(m, {"x": xs})[0], rtol=1e-5, atol=1e-5)


def test_unsupported_attribute_values_name_op_and_attribute() -> None:
    attrs = _forest_attrs(1, 2, 1, BRANCHES["leq"], "target")
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], "reg", domain=ML, post_transform="CUBE", **attrs
    )
    m = _model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(PolyonnxError, match=r"TreeEnsembleRegressor \(node 'reg'\)"):
        polyonnx.InferenceSession(m).run(None, {"x": _inputs(0, 2)})
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["l", "s"],
        "clf",
        domain=ML,
        classlabels_int64s=[1],
        **{k.replace("target", "class"): v for k, v in attrs.items()},
    )
    m = _model(
        node,
        [
            helper.make_tensor_value_info(n, e, None)
            for n, e in (("l", TensorProto.INT64), ("s", TensorProto.FLOAT))
        ],
    )
    with pytest.raises(
        PolyonnxError, match=r"ai\.onnx\.ml\.TreeEnsembleClassifier.*'clf'.*class label"
    ):
        polyonnx.InferenceSession(m).run(None, {"x": _inputs(0, 2)})
