"""In-process JIT: one MCJIT engine for the whole process; each model adds its own module.

The engine owns its target machine, so it is created once and kept alive; modules are added to
it, never given their own engine. The engine starts with polyonnx's own definitions of the
runtime functions LLVM may call (:mod:`polyonnx.codegen.builtins`), and no object code is
loaded before every function it calls is known to resolve: an unresolved call would jump to
address 0. Code lives as long as the engine: MCJIT keeps the machine code of a module it
finalised when the module is removed, so each module is removed (its IR freed) as soon as its
address is known. Kernels are loaded once per process by symbol, and so are entry points, by
their content: sessions of one model share them, and creating and dropping sessions of a model
does not grow the process.
"""

from __future__ import annotations

import ctypes
import hashlib

import llvmlite.binding as llvm
from llvmlite import ir

from polyonnx.codegen.builtins import BUILTINS, builtins_module
from polyonnx.codegen.elf import undefined_symbols
from polyonnx.codegen.parallel_runtime import ENTRY, shared_library
from polyonnx.codegen.target import LLVM_LOCK, init_llvm, machine, optimize, target_machine
from polyonnx.errors import CodegenError
from polyonnx.options import Options

_ENGINE: llvm.ExecutionEngine | None = None
_POOL: ctypes.CDLL | None = None


def parse_and_optimize(
    module: ir.Module | str, tm: llvm.TargetMachine, opt_level: int
) -> llvm.ModuleRef:
    """Parse llvmlite IR (or its text) into LLVM, verify it and run the O-level pipeline."""
    init_llvm()
    try:
        ref = llvm.parse_assembly(module if isinstance(module, str) else str(module))
        ref.verify()
    except RuntimeError as e:
        raise CodegenError(f"generated LLVM IR is invalid: {e}") from None
    ref.triple = tm.triple
    ref.data_layout = str(tm.target_data)
    optimize(ref, tm, opt_level)
    return ref


def _engine() -> llvm.ExecutionEngine:
    global _ENGINE
    if _ENGINE is None:
        init_llvm()
        pool = shared_library()
        if pool:
            # Loaded with ctypes, not LLVM: LLVM closes the libraries it opened when the process
            # exits, while the pool's worker threads still run code from this one.
            global _POOL
            _POOL = ctypes.CDLL(pool, mode=ctypes.RTLD_GLOBAL)
            address = ctypes.cast(getattr(_POOL, ENTRY), ctypes.c_void_p).value
            llvm.add_symbol(ENTRY, address)
        tm = target_machine(Options(opt_level=3), jit=True)
        _ENGINE = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        builtins = parse_and_optimize(builtins_module(), tm, 3)
        _ENGINE.add_module(builtins)
        _ENGINE.finalize_object()
        _DEFINED.update(BUILTINS)
    return _ENGINE


_LOADED_OBJECTS: set[str] = set()
#: Functions the engine's code defines (kernels, builtins) that objects may call.
_DEFINED: set[str] = set()


def _check_resolved(symbol: str, obj: bytes, defined: set[str]) -> None:
    """Refuse object code that calls a function nothing in the process defines."""
    missing = sorted(
        name
        for name in undefined_symbols(obj) or ()
        if name not in defined and not llvm.address_of_symbol(name)
    )
    if missing:
        raise CodegenError(
            f"kernel {symbol} calls {', '.join(missing)}, which nothing in this "
            "process defines (a runtime function LLVM emitted for this target "
            "that polyonnx does not provide)"
        )


#: Entry points compiled in this process, by :func:`_entry_key`.
_ENTRIES: dict[str, int] = {}


def jit_with_objects(
    module: ir.Module, objects: dict[str, bytes], entry: str, options: Options
) -> int:
    """Load kernel object code (each symbol once per process) and JIT ``module``, which calls
    those kernels (once per process for one content); return the address of ``entry``."""
    with LLVM_LOCK:
        engine = _engine()
        new = {symbol: obj for symbol, obj in objects.items() if symbol not in _LOADED_OBJECTS}
        defined = _DEFINED | set(objects)
        for symbol, obj in new.items():
            _check_resolved(symbol, obj, defined)
        for symbol, obj in new.items():
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            _LOADED_OBJECTS.add(symbol)
            _DEFINED.add(symbol)
        text = str(module)
        key = _entry_key(text, module.name, entry, options)
        if key not in _ENTRIES:
            _ENTRIES[key] = _jit_text(text, entry, options)
        return _ENTRIES[key]


def _entry_key(text: str, module_name: str, entry: str, options: Options) -> str:
    """What decides an entry point's code: its module's text with the names that make each
    compiled model unique left out, and the target."""
    canonical = text.replace(entry, "@entry").replace(module_name, "@module")
    spec = repr((*machine(options), options.opt_level))
    return hashlib.sha256(f"{spec}\n{canonical}".encode()).hexdigest()


def jit(module: ir.Module, entry: str, options: Options) -> int:
    """Compile ``module`` into this process; return the address of ``entry`` (valid for the
    life of the process)."""
    return _jit_text(str(module), entry, options)


def _jit_text(text: str, entry: str, options: Options) -> int:
    with LLVM_LOCK:
        engine = _engine()
        ref = parse_and_optimize(text, target_machine(options, jit=True), options.opt_level)
        engine.add_module(ref)
        engine.finalize_object()
        address = engine.get_function_address(entry)
        # The code stays in the engine; the module's IR is not needed any more.
        engine.remove_module(ref)
    if not address:
        raise CodegenError(f"JIT: entry point {entry!r} not found")
    return address
