"""Which loops LLVM's unroller may touch: reductions and innermost scalar loops, not loops
whose bodies are straight-line code already (see ``KernelEmitter._worth_unrolling``)."""

import re

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.codegen.target import init_llvm
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt

i, j = Aff.var("i"), Aff.var("j")


def _loop(var: str, extent: int, body: tuple) -> la.For:
    cond = la.IOp("lt", (la.IVar(var), la.IConst(extent)))
    return la.For(var, la.IConst(0), cond, 1, body)


def _call(*args: str) -> la.Call:
    return la.Call("S0", tuple(la.IVar(a) for a in args))


def _kernel(write: Access, out_shape: tuple[int, ...]) -> Kernel:
    """``out[write] += x[i, j]`` over i < 4, j < 3."""
    body = Load("out", write.index, "float32") + Load("x", (i, j), "float32")
    return Kernel(
        "k",
        (Buffer("x", "float32", (4, 3), "input"), Buffer("out", "float32", out_shape, "output")),
        (Loop("i", 0, 4, (Loop("j", 0, 3, (Stmt("S0", write, body),)),)),),
    )


def _hinted_latches(kernel: Kernel, ast: tuple) -> list[str]:
    """The loops (by iterator) whose back edge carries ``llvm.loop.unroll.disable``; the
    module parses and verifies in LLVM."""
    module = ir.Module()
    emit_kernel(module, kernel, ast, CodegenConfig())
    text = str(module)
    init_llvm()
    llvm.parse_assembly(text).verify()
    disable = re.search(r'^(!\d+) = !\{ !"llvm.loop.unroll.disable" \}', text, re.M)
    if disable is None:
        return []
    ids = set(re.findall(rf"^(!\d+) = distinct !\{{ \1, {disable.group(1)} \}}", text, re.M))
    hinted = []
    for line in text.splitlines():
        m = re.search(r'br label %"(\w+)\.header", !llvm.loop (!\d+)', line)
        if m and m.group(2) in ids:
            hinted.append(m.group(1))
    return hinted


def test_an_outer_loop_writing_new_elements_is_not_unrolled():
    kernel = _kernel(Access("out", (i, j)), (4, 3))
    ast = (_loop("c0", 4, (_loop("c1", 3, (_call("c0", "c1"),)),)),)
    # c1 is innermost and scalar: LLVM unrolls or vectorizes it as it likes.
    assert _hinted_latches(kernel, ast) == ["c0"]


def test_a_reduction_loop_is_left_to_llvm():
    kernel = _kernel(Access("out", (i,)), (4,))
    # j outermost: every iteration of it adds into the same out[i].
    ast = (_loop("c0", 3, (_loop("c1", 4, (_call("c1", "c0"),)),)),)
    assert _hinted_latches(kernel, ast) == []


def test_hinted_loops_compute_the_same():
    kernel = _kernel(Access("out", (i, j)), (4, 3))
    ast = (_loop("c0", 4, (_loop("c1", 3, (_call("c0", "c1"),)),)),)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.ones((4, 3), np.float32)
    kernel_callable(kernel, ast)({"x": x, "out": out})
    np.testing.assert_array_equal(out, x + 1)
