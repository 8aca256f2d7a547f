"""``InferenceSession``: onnxruntime's API over polyonnx-compiled native code.

Feeds are checked (names, dtypes, shapes) before native code runs; arrays that are not C-contiguous
or not aligned to their element size are copied (never refused). A model with symbolic input
dimensions is compiled once per distinct set of input shapes, on first use; a model with string
inputs once per set of string widths too (strings travel as fixed-width code points:
:mod:`polyonnx.graph.strings`).

Example:
    >>> from polyonnx.testing.examples import conv_model
    >>> sess = InferenceSession(conv_model())
    >>> [y] = sess.run(None, {"x": np.ones((1, 8, 8, 8), np.float32)})
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from polyonnx.errors import InputError, ModelError, PolyonnxError, UnsupportedOpError
from polyonnx.frontend.load import load_model
from polyonnx.frontend.zipmap import Zipped, without_zipmaps
from polyonnx.graph.strings import fixed_width, is_string, string_dtype
from polyonnx.krnl.memory import aligned_empty
from polyonnx.options import Options

_ONNX_TYPE = {"float32": "float", "float64": "double", "float16": "float16", "bool": "bool"}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it (``name``, ``shape``, ``type``)."""

    name: str
    shape: list[int | str]
    dtype: str
    #: The ONNX type of a value that is not a tensor (a ZipMap's sequence of maps).
    onnx_type: str | None = None

    @property
    def type(self) -> str:
        if self.onnx_type is not None:
            return self.onnx_type
        if is_string(self.dtype):
            return "tensor(string)"
        return f"tensor({_ONNX_TYPE.get(self.dtype, self.dtype)})"


_RUN = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)


@dataclass(frozen=True)
class DynamicShape:
    """How to size an output with data-dependent extents (NonZero, Unique ...): the native
    code fills a buffer of ``max_shape``; ``counts[d]`` is None for a static dim, else the
    index of the extra int64 output (after the graph's outputs) holding dim ``d``'s extent."""

    max_shape: tuple[int, ...]
    counts: tuple[int | None, ...]


class Executable:
    """A compiled model with static input shapes: its native entry point and the memory it
    needs. Outputs listed in ``dynamic`` (by output index) are returned with the extents the
    run computed; ``count_outputs`` int64 extents follow the outputs in the entry's table."""

    def __init__(
        self,
        inputs: Sequence[NodeArg],
        outputs: Sequence[NodeArg],
        call: Any,
        weights: np.ndarray | None,
        workspace_bytes: int,
        kernel_ops: Sequence[Sequence[str]],
        keep_alive: Any = None,
        dynamic: Mapping[int, DynamicShape] | None = None,
        count_outputs: int = 0,
    ) -> None:
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self._call, self._weights = call, weights
        # Addresses looked up once: ``.ctypes.data`` is slow next to a small model's run.
        self._weights_address = weights.ctypes.data if weights is not None else None
        self._workspace_bytes = workspace_bytes
        self._kernel_ops = kernel_ops
        self._keep_alive = keep_alive
        self._dynamic = dict(dynamic or {})
        self._count_outputs = count_outputs
        self._output_specs = [
            (
                self._dynamic[j].max_shape if j in self._dynamic else tuple(map(int, o.shape)),
                np.dtype(o.dtype),
            )
            for j, o in enumerate(self.outputs)
        ]
        self._local = threading.local()
        self._input_table = ctypes.c_void_p * max(len(self.inputs), 1)
        self._output_table = ctypes.c_void_p * max(len(self.outputs) + count_outputs, 1)

    @staticmethod
    def from_compiled(compiled: Any) -> Executable:
        from polyonnx.codegen.jit import jit_with_objects
        from polyonnx.codegen.objects import compile_objects

        program = compiled.program
        weights: list[np.ndarray] = []  # (laid out while worker processes compile)
        objects = compile_objects(
            compiled.kernel_modules(),
            compiled.options,
            jit=True,
            meanwhile=lambda: weights.append(compiled.plan.weights_blob(program)),
        )
        address = jit_with_objects(
            compiled.entry_module(), objects, compiled.entry, compiled.options
        )
        meta = json.loads(compiled.metadata())
        return Executable(
            [NodeArg(v.name, list(v.shape), v.dtype) for v in program.inputs],
            [NodeArg(v.name, list(v.shape), v.dtype) for v in program.outputs],
            _RUN(address),
            weights[0],
            compiled.plan.workspace_size,
            [k.ops for k in program.kernels],
            dynamic=_dynamic_shapes(meta),
            count_outputs=meta["count_outputs"],
        )

    @staticmethod
    def from_library(path: str | os.PathLike) -> Executable:
        try:
            lib = ctypes.CDLL(os.path.abspath(path))
            lib.polyonnx_metadata.restype = ctypes.c_char_p
            meta = json.loads(lib.polyonnx_metadata().decode())
        except (OSError, AttributeError, ValueError) as e:
            raise ModelError(f"{path}: not a polyonnx shared library ({e})") from None
        if not hasattr(lib, "polyonnx_run_in"):
            raise ModelError(
                f"{path}: a polyonnx library without polyonnx_run_in (written "
                "by an older polyonnx): write it again"
            )
        # Runs in this executable's workspaces (zeroed when allocated, one per thread).
        run = lib.polyonnx_run_in
        run.restype, run.argtypes = ctypes.c_int32, [ctypes.c_void_p] * 3
        lib.polyonnx_workspace_size.restype = ctypes.c_int64
        return Executable(
            [NodeArg(v["name"], v["shape"], v["dtype"]) for v in meta["inputs"]],
            [NodeArg(v["name"], v["shape"], v["dtype"]) for v in meta["outputs"]],
            lambda ins, outs, _w, ws: run(ins, outs, ws),
            None,
            lib.polyonnx_workspace_size(),
            [],
            keep_alive=lib,
            dynamic=_dynamic_shapes(meta),
            count_outputs=meta.get("count_outputs", 0),
        )

    def _workspace(self) -> int:
        # One workspace per thread, so one session can run on several threads at once.
        address = getattr(self._local, "address", None)
        if address is None:
            self._local.workspace = aligned_empty(max(self._workspace_bytes, 64))
            address = self._local.address = self._local.workspace.ctypes.data
        return address

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        outs = [np.empty(shape, dtype) for shape, dtype in self._output_specs]
        counts = [np.zeros(1, dtype=np.int64) for _ in range(self._count_outputs)]
        table = outs + counts
        in_ptrs = self._input_table(*map(_address, feeds))
        out_ptrs = self._output_table(*map(_address, table))
        rc = self._call(in_ptrs, out_ptrs, self._weights_address, self._workspace())
        if rc != 0:
            raise InputError(self._describe_failure(rc))
        for j, dyn in self._dynamic.items():
            outs[j] = self._valid_part(j, outs[j], dyn, counts)
        # Strings are returned as onnxruntime returns them: an object array of str.
        return [o.astype(object) if o.dtype.kind == "U" else o for o in outs]

    def _valid_part(
        self, j: int, buf: np.ndarray, dyn: DynamicShape, counts: Sequence[np.ndarray]
    ) -> np.ndarray:
        """The leading corner of a maximal output buffer that the run filled, C-contiguous
        (a copy: data movement only, the values were computed by the native code)."""
        index = []
        for d, (extent, k) in enumerate(zip(dyn.max_shape, dyn.counts, strict=True)):
            if k is None:
                index.append(slice(None))
                continue
            n = int(counts[k][0])
            if not 0 <= n <= extent:
                raise InputError(
                    f"output {self.outputs[j].name!r}: the run computed extent {n} "
                    f"for dim {d}, outside [0, {extent}] (for TopK: is K in "
                    "range?)"
                )
            index.append(slice(0, n))
        return np.ascontiguousarray(buf[tuple(index)])

    def _describe_failure(self, rc: int) -> str:
        if rc < 0:
            return "the compiled model could not allocate its workspace"
        kernel, status = (rc >> 8) - 1, rc & 0xFF
        nodes = (
            ", ".join(self._kernel_ops[kernel])
            if 0 <= kernel < len(self._kernel_ops)
            else f"kernel {kernel}"
        )
        what = (
            "an index computed from the input data is out of range"
            if status == 1
            else f"run-time check failed (status {status})"
        )
        return f"{what} in {nodes}"


#: String feeds are padded to a multiple of this many code points, so that feeds of similar
#: lengths share one compiled program (the padding changes no result).
WIDTH_STEP = 8


def _string_feed(arg: NodeArg, value: np.ndarray) -> np.ndarray:
    """A string feed (str objects, UTF-8 bytes or numpy ``<U``) as ``<U{width}`` code points,
    ``width`` the longest string's rounded up to :data:`WIDTH_STEP`."""
    if value.dtype.kind not in "OUS":
        raise InputError(
            f"input {arg.name!r}: expected strings ({arg.type}), got dtype {value.dtype}"
        )
    try:
        sized = fixed_width(value.astype(object))
    except (TypeError, ValueError) as e:  # (UnicodeDecodeError is a ValueError)
        raise InputError(f"input {arg.name!r}: {e}") from None
    longest = sized.dtype.itemsize // 4
    return sized.astype(string_dtype(-(-longest // WIDTH_STEP) * WIDTH_STEP))


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s data, which ``a.ctypes.data`` takes twice as long to give (a
    small model's run spends microseconds on them)."""
    try:
        return ctypes.addressof(_FIRST_BYTE.from_buffer(a))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # read-only, or empty
        return int(a.ctypes.data)


_FIRST_BYTE = ctypes.c_char * 1


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype) -> str:
    """A feed's dtype as the graph names it (strings: ``U{width}``)."""
    return string_dtype(dtype.itemsize // 4) if dtype.kind == "U" else dtype.name


def _dynamic_shapes(meta: Mapping[str, Any]) -> dict[int, DynamicShape]:
    """The data-dependent outputs a model's metadata describes (see
    :meth:`polyonnx.compiled.Compiled.metadata`), by output index."""
    return {
        j: DynamicShape(tuple(o["max_shape"]), tuple(o["counts"]))
        for j, o in enumerate(meta["outputs"])
        if "max_shape" in o
    }


def _check_feed(arg: NodeArg, value: Any, ranked: bool = True) -> np.ndarray:
    """``value`` as the native code takes it, if it has ``arg``'s dtype and (when ``ranked``:
    the input declares a shape) its rank and fixed dims. Strings become fixed-width code
    points (:func:`_string_feed`)."""
    if not isinstance(value, np.ndarray):
        if np.isscalar(value) or isinstance(value, list | tuple):
            value = np.asarray(value, dtype=object if is_string(arg.dtype) else None)
        else:
            raise InputError(
                f"input {arg.name!r}: expected a numpy array, got {type(value).__name__}"
            )
    if is_string(arg.dtype):
        value = _string_feed(arg, value)
    elif value.dtype != arg.dtype:
        raise InputError(
            f"input {arg.name!r}: expected dtype {arg.dtype} ({arg.type}), got {value.dtype}"
        )
    want = tuple(arg.shape) if ranked else value.shape
    if value.shape != want and (
        value.ndim != len(want)
        or any(isinstance(w, int) and w != d for w, d in zip(want, value.shape, strict=True))
    ):
        raise InputError(
            f"input {arg.name!r}: expected shape {list(want)}, got {list(value.shape)}"
        )
    # Native code wants dense row-major data aligned to the element size: copy otherwise.
    flags = value.flags
    if not (flags.c_contiguous and flags.aligned):
        value = np.array(value, order="C", copy=True)
    return value


class InferenceSession:
    """Compile a model and run it, with onnxruntime's ``run`` semantics.

    ``model`` is a path to an ``.onnx`` file or to a library written by ``polyonnx compile -o``,
    the model's bytes, or an ``onnx.ModelProto``. ``schedules`` maps kernel names or signatures
    to schedule traces (see :mod:`polyonnx.schedule.trace`) that replace the default schedules.

    Example:
        >>> from polyonnx.testing.examples import conv_model
        >>> sess = InferenceSession(conv_model(), num_threads=1)
        >>> [(i.name, i.shape, i.type) for i in sess.get_inputs()]
        [('x', [1, 8, 8, 8], 'tensor(float)')]
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes | onnx.ModelProto,
        num_threads: int | None = None,
        options: Options | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        schedules: Mapping[str, Any] | None = None,
    ) -> None:
        options = options or Options()
        self._schedules = dict(schedules or {})
        if num_threads is not None:
            options = replace(options, num_threads=num_threads)
        self.options = options
        self._lock = threading.Lock()
        self._by_shapes: dict[tuple, Executable] = {}
        if isinstance(model, str | os.PathLike) and Path(model).suffix in (".so", ".dylib"):
            exe = Executable.from_library(model)
            self._inputs, self._outputs = exe.inputs, exe.outputs
            self._by_shapes[self._key_of(exe.inputs)] = exe
            self._proto = None
            self._zipped: dict[str, Zipped] = {}
            self._unranked: frozenset[str] = frozenset()
            return
        self._proto, self._zipped = without_zipmaps(load_model(model))
        self._inputs, self._outputs = _declared_io(self._proto)
        # Inputs declared without a shape (onnxruntime takes any): their rank comes from the
        # first feed, as symbolic dims do.
        self._unranked = frozenset(
            vi.name
            for vi in self._proto.graph.input
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")
        ) - {t.name for t in self._proto.graph.initializer}
        # (A string input's width comes from its first feed, as symbolic dims do.)
        if not any(is_string(a.dtype) for a in self._inputs) and (
            input_shapes
            or (
                not self._unranked
                and all(isinstance(d, int) for a in self._inputs for d in a.shape)
            )
        ):
            exe = self._compile(input_shapes)
            self._inputs, self._outputs = exe.inputs, exe.outputs

    @staticmethod
    def _key_of(args: Sequence[NodeArg]) -> tuple:
        return tuple((tuple(a.shape), a.dtype) for a in args)

    def _compile(
        self,
        input_shapes: Mapping[str, Sequence[int]] | None,
        string_widths: Mapping[str, int] | None = None,
    ) -> Executable:
        from polyonnx.pipeline import compile as compile_model

        assert self._proto is not None  # a library runs the shapes it was compiled for
        compiled = compile_model(
            self._proto, self.options, input_shapes, self._schedules or None, string_widths
        )
        exe = Executable.from_compiled(compiled)
        self._by_shapes[self._key_of(exe.inputs)] = exe
        return exe

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return [
            replace(o, shape=[], onnx_type=self._zipped[o.name].type)
            if o.name in self._zipped
            else o
            for o in self._outputs
        ]

    def get_providers(self) -> list[str]:
        return ["PolyonnxCPU"]

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        """Run the model; ``output_names=None`` returns every output, in order."""
        if not isinstance(input_feed, Mapping):
            raise InputError("input_feed must be a dict of input name -> numpy array")
        if len(input_feed) != len(self._inputs) or any(
            a.name not in input_feed for a in self._inputs
        ):
            names = [a.name for a in self._inputs]
            unknown = sorted(set(input_feed) - set(names))
            fixed = [n for n in unknown if self._proto and _is_initializer(self._proto, n)]
            if fixed:
                raise InputError(
                    f"input(s) {fixed} are initializers, compiled into the model as constants "
                    f"(listed among the graph's inputs too, but not overridable here); the "
                    f"model's inputs are {names}"
                )
            if unknown:
                raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {names}")
            raise InputError(f"missing input(s) {[n for n in names if n not in input_feed]}")
        feeds = [
            _check_feed(a, input_feed[a.name], a.name not in self._unranked) for a in self._inputs
        ]
        exe = self._executable(feeds)
        outs: list[Any] = exe.run(feeds)
        if self._zipped:
            outs = [
                self._zipped[o.name].present(a) if o.name in self._zipped else a
                for o, a in zip(exe.outputs, outs, strict=True)
            ]
        if output_names is None:
            return outs
        index = {o.name: i for i, o in enumerate(exe.outputs)}
        bad = [n for n in output_names if n not in index]
        if bad:
            raise InputError(f"unknown output name(s) {bad}; the model's outputs are {list(index)}")
        return [outs[index[n]] for n in output_names]

    def _executable(self, feeds: Sequence[np.ndarray]) -> Executable:
        key = tuple((tuple(f.shape), _dtype_name(f.dtype)) for f in feeds)
        exe = self._by_shapes.get(key)
        if exe is not None:
            return exe
        if self._proto is None:
            raise InputError("a compiled library only runs the shapes it was compiled for")
        with self._lock:
            exe = self._by_shapes.get(key)
            if exe is None:
                shapes = {a.name: tuple(f.shape) for a, f in zip(self._inputs, feeds, strict=True)}
                widths = {
                    a.name: f.dtype.itemsize // 4
                    for a, f in zip(self._inputs, feeds, strict=True)
                    if f.dtype.kind == "U"
                }
                try:
                    exe = self._compile(shapes, widths)
                except PolyonnxError as e:
                    raise InputError(f"cannot run with input shapes {shapes}: {e}") from e
        return exe


def _is_initializer(proto: onnx.ModelProto, name: str) -> bool:
    return any(t.name == name for t in proto.graph.initializer)


def _declared_io(model: onnx.ModelProto) -> tuple[tuple[NodeArg, ...], tuple[NodeArg, ...]]:
    """Inputs (initializers excluded) and outputs as the model declares them."""
    inits = {t.name for t in model.graph.initializer}

    def arg(vi: onnx.ValueInfoProto, output: bool = False) -> NodeArg:
        kind = vi.type.WhichOneof("value")
        # (A sequence or optional output is compiled into its elements' outputs:
        # polyonnx.frontend.sequences.)
        t = vi.type.optional_type.elem_type if output and kind == "optional_type" else vi.type
        if t.WhichOneof("value") == "sequence_type" and output:
            t = t.sequence_type.elem_type
        if t.WhichOneof("value") not in ("tensor_type", None):
            raise UnsupportedOpError(
                "value", detail=f"{vi.name!r} is a {kind}; polyonnx handles tensors only"
            )
        tt = t.tensor_type
        dims: list[int | str] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim
        ]
        dtype = (
            np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
            if tt.elem_type
            else "float32"
        )
        return NodeArg(vi.name, dims, dtype)

    return (
        tuple(arg(v) for v in model.graph.input if v.name not in inits),
        tuple(arg(v, output=True) for v in model.graph.output),
    )
