"""The ONNX node test suite run through :mod:`polyonnx.backend`: case loading, one-case runs.

onnx 1.23 builds the node cases in Python (``load_model_tests(kind="node")``, about 20 s) rather
than shipping them as files; :func:`load_cases` stores them once in a cache folder and every
later run (and every worker process) reads them from there.

A case passes when every data set's outputs match the reference exactly as
``onnx.backend.test.runner.Runner.assert_similar_outputs`` checks them (shape, dtype, then
``assert_allclose`` with the case's rtol/atol; object/string arrays compared for equality).
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from polyonnx.graph.shapes import REDUCTIONS

HERE = Path(__file__).resolve().parent
EXPECTED_FILE = HERE / "expected_pass.txt"
LAST_RUN_FILE = HERE / "last_run.json"
#: Expected-pass cases a shared library runs as they are (tensor inputs and outputs, shapes
#: not computed from input values, one data set), spread over the op families: what other
#: targets run (the x86 levels, the emulated architectures).
PORTABLE_FILE = HERE / "portable_cases.txt"

#: Op type -> family, for the summary. Ops not listed count as "other".
FAMILIES: dict[str, tuple[str, ...]] = {
    "elementwise": (
        "Abs",
        "Neg",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Pow",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Tanh",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Erf",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "IsNaN",
        "IsInf",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "Mish",
        "Softplus",
        "Softsign",
        "ThresholdedRelu",
        "Shrink",
        "Clip",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Min",
        "Max",
        "Mean",
        "Sum",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Not",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "Where",
        "Cast",
        "CastLike",
        "Swish",
    ),
    "reduction": (
        *REDUCTIONS,
        "ArgMax",
        "ArgMin",
        "Softmax",
        "LogSoftmax",
        "Hardmax",
        "CumSum",
    ),
    "data": (
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "ScatterElements",
        "ScatterND",
        "Scatter",
        "Expand",
        "Tile",
        "Pad",
        "DepthToSpace",
        "SpaceToDepth",
        "Shape",
        "Size",
        "Identity",
        "Constant",
        "ConstantOfShape",
        "Range",
        "OneHot",
        "Trilu",
        "EyeLike",
        "Resize",
        "ReverseSequence",
        "NonZero",
        "TopK",
        "Unique",
        "Compress",
        "Upsample",
    ),
    "linalg": (
        "MatMul",
        "MatMulInteger",
        "Gemm",
        "Conv",
        "ConvInteger",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "GlobalMaxPool",
        "GlobalAveragePool",
        "GlobalLpPool",
        "Einsum",
        "MaxUnpool",
        "QLinearConv",
        "QLinearMatMul",
        "DeformConv",
        "Col2Im",
    ),
    "norm": (
        "BatchNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "LRN",
        "MeanVarianceNormalization",
        "RMSNormalization",
        "Dropout",
        "LpNormalization",
    ),
    "rnn": ("RNN", "GRU", "LSTM"),
}
FAMILY_OF = {op: fam for fam, ops in FAMILIES.items() for op in ops}


#: The model suites shipped with onnx as files (run with ``run_suite --kind``).
MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator")


@dataclass(frozen=True)
class Case:
    name: str
    model_dir: str
    rtol: float
    atol: float
    kind: str = "node"


def cache_dir() -> Path:
    """Where the generated cases are stored (``POLYONNX_NODE_SUITE_DIR`` overrides)."""
    env = os.environ.get("POLYONNX_NODE_SUITE_DIR")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "polyonnx" / f"onnx-node-{onnx.__version__}"


def materialize(target: Path) -> None:
    """Generate the node cases (onnx builds them in Python: ~20 s) and store them in ``target``:
    per case ``model.onnx``, ``data.pkl`` (the data sets, as numpy) and ``meta.json``."""
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generated = load_model_tests(kind="node")
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    for c in generated:
        d = tmp / c.name
        d.mkdir()
        onnx.save(c.model, d / "model.onnx")
        sets = [
            ([_normalize(v) for v in ins], [_normalize(v) for v in outs])
            for ins, outs in c.data_sets
        ]
        with open(d / "data.pkl", "wb") as f:
            pickle.dump(sets, f)
        (d / "meta.json").write_text(json.dumps({"rtol": c.rtol, "atol": c.atol}))
    try:
        tmp.rename(target)
    except OSError:  # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)


def _normalize(v: object) -> object:
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


@cache
def load_cases(kind: str = "node") -> dict[str, Case]:
    """Every test case of one suite of the installed onnx package, by name (sorted)."""
    if kind != "node":
        from onnx.backend.test.loader import load_model_tests

        return {
            c.name: Case(c.name, c.model_dir, c.rtol, c.atol, kind)
            for c in sorted(load_model_tests(kind=kind), key=lambda c: c.name)
        }
    root = cache_dir()
    if not root.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        materialize(root)
    cases = {}
    for d in sorted(root.iterdir()):
        meta = json.loads((d / "meta.json").read_text())
        cases[d.name] = Case(d.name, str(d), meta["rtol"], meta["atol"])
    return cases


@lru_cache(maxsize=1)
def all_cases() -> dict[str, Case]:
    """The node cases and the model suites' cases, by name (the names do not collide)."""
    out = dict(load_cases())
    for kind in MODEL_KINDS:
        out.update(load_cases(kind))
    return out


def read_expected() -> list[str]:
    return _read_names(EXPECTED_FILE)


def read_portable() -> list[str]:
    """The cases of :data:`PORTABLE_FILE`."""
    return _read_names(PORTABLE_FILE)


def is_portable(case: Case) -> bool:
    """Whether a shared library runs ``case`` as it is (see :data:`PORTABLE_FILE`)."""
    from polyonnx.backend import value_inputs

    if case.kind != "node":
        return False
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    values = [*model.graph.input, *model.graph.output]
    return (
        not value_inputs(model)
        and all(
            v.type.HasField("tensor_type") and v.type.tensor_type.elem_type != TensorProto.STRING
            for v in values
        )
        and len(data_sets(case, model)) == 1
    )


def _read_names(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def case_op(case: Case) -> str:
    """The op a case tests: its node's type (for ``*_expanded`` cases, the unexpanded case's)."""
    if case.kind != "node":
        return f"model:{case.kind}"
    name = case.name
    if _EXPANDED.search(name):
        base = load_cases().get(_EXPANDED.sub("", name))
        if base is not None:
            return case_op(base)
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    return ops[-1] if len(set(ops)) != 1 else ops[0]


def family(op: str) -> str:
    return op if op.startswith("model:") else FAMILY_OF.get(op, "other")


def data_sets(case: Case, model: onnx.ModelProto) -> list[tuple[list, list]]:
    """(inputs, expected outputs) of each data set, as the Runner passes them."""
    if case.kind == "node":
        with open(os.path.join(case.model_dir, "data.pkl"), "rb") as f:
            return pickle.load(f)
    out = []
    for d in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set*"))):
        n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
        out.append(
            (
                [_read_pb(os.path.join(d, f"input_{i}.pb")) for i in range(n_in)],
                [_read_pb(os.path.join(d, f"output_{i}.pb")) for i in range(n_out)],
            )
        )
    return out


def _read_pb(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def assert_similar_outputs(ref: list, got: list, rtol: float, atol: float) -> None:
    """``Runner.assert_similar_outputs`` (onnx 1.23): a bfloat16 output is compared in
    float32 with ``rtol`` at least 2**-6, two bfloat16 units in the last place, as the
    Runner does. (The reference rounds intermediate tensors where polyonnx keeps float32 and
    sums a softmax's bfloat16 terms rounding every partial sum: see
    :mod:`polyonnx.graph.passes.bfloat16`.)"""
    np.testing.assert_equal(len(got), len(ref))
    for r, g in zip(ref, got, strict=True):
        if isinstance(r, list | tuple):
            assert isinstance(g, list | tuple), f"expected a sequence, got {type(g)}"
            assert_similar_outputs(list(r), list(g), rtol, atol)
            continue
        np.testing.assert_array_equal(g.shape, r.shape, err_msg="output has incorrect shape")
        if r.dtype == object:
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_equal(g.dtype, r.dtype)
            if r.dtype.name == "bfloat16":
                g, r = g.astype(np.float32), r.astype(np.float32)
                np.testing.assert_allclose(g, r, rtol=max(rtol, 2**-6), atol=atol)
                continue
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)


def run_case(name: str) -> None:
    """Run one case through :mod:`polyonnx.backend`; raises on any failure."""
    from polyonnx import backend

    case = all_cases()[name]
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    rep = backend.prepare(model, "CPU")
    for inputs, expected in data_sets(case, model):
        got = list(rep.run(inputs))
        assert_similar_outputs(expected, got, case.rtol, case.atol)


def classify(exc: BaseException | None) -> str:
    """``pass``, ``unsupported`` (UnsupportedOpError at compile time) or ``fail``."""
    from polyonnx.errors import UnsupportedOpError

    if exc is None:
        return "pass"
    if isinstance(exc, UnsupportedOpError):
        return "unsupported"
    cause = exc.__cause__
    if isinstance(cause, UnsupportedOpError):
        return "unsupported"
    return "fail"
