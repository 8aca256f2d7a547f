"""The host's FP32 FMA peak, measured by a kernel polyonnx generates.

The kernel is a krnl statement ``acc[r, l] = acc[r, l] + acc[r, l] * m[0]`` run for ``iterations``
steps over a small accumulator block: ``rows`` rows (unrolled) of one vector of ``l`` lanes each
(the widest float32 vector of the target, :func:`polyonnx.codegen.target.vector_bits`). The loops
are a hand-built loop AST (``for t { unroll: for r { vector: for l { S0 } } }``) JIT-compiled with
:func:`polyonnx.codegen.kernel_call.kernel_callable`; LLVM keeps the block in registers and fuses
the multiply-add into one FMA (an accumulation's ``acc + x * w``, the one form polyonnx emits
with ``contract``: a conv's or GEMM's; with ``x`` the accumulator, not a loop invariant that
LLVM would multiply once, out of the loop), so the loop is ``rows`` independent FMA chains:
enough to cover the FMA latency on every port. :func:`hot_loop` finds the hot loop in
the assembly, to count its FMAs.

Several threads: that many Python threads call the kernel at once, each on its own block (ctypes
releases the GIL); the per-core figure is the total divided by the thread count. Thread counts
are interleaved round by round; "best" is the fastest round (the hardware's figure on a loaded
machine, where other processes only ever slow a round down).

Example (a measurement: it takes seconds to minutes)::

    rows = measure(build_peak(), threads=[1, 2], repeat=10)
    print(table(rows))
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from polyonnx.bench.timing import Spread
from polyonnx.codegen import loopast as la
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.jit import parse_and_optimize
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.codegen.target import (
    LLVM_LOCK,
    codegen_config,
    host_cpu,
    target_machine,
    vector_bits,
)
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
from polyonnx.options import Options

DEFAULT_ROWS = 16
"""Independent accumulator vectors: 16 of the 32 AVX-512 registers (AVX2 has 16 in all, so
narrower targets get fewer, see :func:`default_rows`)."""
DEFAULT_ITERATIONS = 1 << 21


def default_rows(bits: int) -> int:
    """Accumulator vectors that fit the register file with room for the two operands."""
    return DEFAULT_ROWS if bits >= 512 else 12


def options_for(bits: int | None) -> Options:
    """Options whose target has ``bits``-wide vectors: the host, with AVX-512 switched off for
    256 (the host's own features when ``bits`` is None or the host's width)."""
    host_bits = vector_bits(Options())
    if bits is None or bits == host_bits:
        return Options()
    if bits > host_bits or bits != 256:
        raise ValueError(f"vector bits {bits}: this host supports 256 or {host_bits}")
    features = ",".join(
        "-" + f[1:] if f[1:].startswith("avx512") else f for f in host_cpu()[2].split(",")
    )
    return Options(features=features)


def fma_kernel(rows: int, lanes: int, iterations: int) -> tuple[Kernel, tuple[la.LNode, ...]]:
    """The krnl kernel and its loop AST (see the module docstring)."""
    r, lane = Aff.var("r"), Aff.var("l")
    acc = Load("acc", (r, lane), "float32")
    stmt = Stmt("S0", Access("acc", (r, lane)), acc + acc * Load("m", (Aff.lift(0),), "float32"))
    kernel = Kernel(
        "fma_peak",
        (Buffer("acc", "float32", (rows, lanes), "output"), Buffer("m", "float32", (1,), "input")),
        (Loop("t", 0, iterations, (Loop("r", 0, rows, (Loop("l", 0, lanes, (stmt,)),)),)),),
    )

    def loop(var: str, extent: int, body: tuple[la.LNode, ...]) -> la.For:
        return la.For(var, la.IConst(0), la.IOp("lt", (la.IVar(var), la.IConst(extent))), 1, body)

    call = la.Call("S0", (la.IVar("t"), la.IVar("r"), la.IVar("l")))
    ast = (
        loop(
            "t",
            iterations,
            (
                la.Mark(
                    "unroll", (loop("r", rows, (la.Mark("vector", (loop("l", lanes, (call,)),)),)),)
                ),
            ),
        ),
    )
    return kernel, ast


def assembly(kernel: Kernel, ast: tuple[la.LNode, ...], options: Options) -> str:
    """The optimized x86 assembly of ``kernel`` (as the JIT compiles it)."""
    module = ir.Module(name=kernel.name)
    emit_kernel(module, kernel, ast, replace(codegen_config(options), threads=1))
    with LLVM_LOCK:
        tm = target_machine(options)
        return tm.emit_assembly(parse_and_optimize(module, tm, options.opt_level))


_INSN = re.compile(r"^\s+([a-z][a-z0-9]*)\b")


def hot_loop(asm: str) -> list[str]:
    """The instructions of the innermost loop with the most FMAs: the block from a label to
    the branch back to it."""
    lines = asm.splitlines()
    best: list[str] = []
    for i, line in enumerate(lines):
        label = re.match(r"^(\.LBB\w+):", line)
        if not label:
            continue
        body: list[str] = []
        for text in lines[i + 1 :]:
            m = _INSN.match(text)
            if m:
                body.append(text.strip())
                if m.group(1).startswith("j") and text.rstrip().endswith(label.group(1)):
                    break
            elif re.match(r"^\.LBB\w+:", text):
                body = []
                break
        else:
            body = []
        if _fma_count(body) > _fma_count(best):
            best = body
    return best


def _fma_count(insns: Sequence[str]) -> int:
    return sum(1 for s in insns if s.startswith(("vfmadd", "vfnmadd")))


@dataclass
class PeakKernel:
    """A compiled FMA loop and what one call computes."""

    run: Callable[[Mapping[str, np.ndarray]], None]
    bits: int
    rows: int
    lanes: int
    iterations: int
    loop: list[str]

    @property
    def flops(self) -> int:
        """Floating-point operations of one call (an FMA counts 2)."""
        return 2 * self.rows * self.lanes * self.iterations

    @property
    def loop_summary(self) -> str:
        """``fma/instructions`` of the hot loop and the register kind its FMAs use."""
        fmas = [s for s in self.loop if s.startswith("vfmadd")]
        reg = (
            "zmm"
            if any("zmm" in s for s in fmas)
            else "ymm"
            if any("ymm" in s for s in fmas)
            else "xmm"
        )
        return f"{len(fmas)}/{len(self.loop)} ({reg})"

    def arrays(self) -> dict[str, np.ndarray]:
        """A fresh accumulator block of ones and the factor -2^-30: ``1 - 2^-30`` rounds to 1,
        so the block stays 1 (no denormals or infinities whatever the iteration count)."""
        return {
            "acc": np.ones((self.rows, self.lanes), np.float32),
            "m": np.array([-(2.0**-30)], np.float32),
        }


def build_peak(
    bits: int | None = None, rows: int | None = None, iterations: int = DEFAULT_ITERATIONS
) -> PeakKernel:
    """Generate and JIT the FMA loop for ``bits``-wide vectors (the host's widest if None)."""
    options = options_for(bits)
    width = vector_bits(options)
    lanes = width // 32
    rows = rows or default_rows(width)
    kernel, ast = fma_kernel(rows, lanes, iterations)
    run = kernel_callable(kernel, ast, options)
    peak = PeakKernel(run, width, rows, lanes, iterations, hot_loop(assembly(kernel, ast, options)))
    arrays = peak.arrays()
    run(arrays)
    if not np.array_equal(arrays["acc"], np.ones_like(arrays["acc"])):
        raise RuntimeError("FMA kernel computed a wrong result")
    return peak


def timed_round(
    peak: PeakKernel,
    pool: ThreadPoolExecutor,
    threads: int,
    blocks: Sequence[dict[str, np.ndarray]],
) -> float:
    """Wall time of ``threads`` concurrent calls of the kernel (each on its own block)."""
    if threads == 1:
        t = time.perf_counter()
        peak.run(blocks[0])
        return time.perf_counter() - t
    t = time.perf_counter()
    list(pool.map(peak.run, blocks[:threads]))
    return time.perf_counter() - t


@dataclass(frozen=True)
class PeakRow:
    """One line of the table: GFLOP/s per core (median and best round) at a thread count."""

    bits: int
    rows: int
    threads: int
    per_core: Spread
    loop: str

    @property
    def median(self) -> float:
        return self.per_core.median

    @property
    def best(self) -> float:
        return self.per_core.max

    @property
    def runs(self) -> int:
        return self.per_core.rounds


def measure(peak: PeakKernel, threads: Sequence[int], repeat: int) -> list[PeakRow]:
    """Per-core GFLOP/s of ``peak`` at each thread count, rounds interleaved."""
    most = max(threads)
    blocks = [peak.arrays() for _ in range(most)]
    times: dict[int, list[float]] = {t: [] for t in threads}
    with ThreadPoolExecutor(max_workers=most) as pool:
        for t in threads:  # warm-up (thread start, page faults, frequency ramp)
            timed_round(peak, pool, t, blocks)
        for _ in range(repeat):
            for t in threads:
                times[t].append(timed_round(peak, pool, t, blocks))
    return [
        PeakRow(
            peak.bits, peak.rows, t, Spread.of(times[t]).rate(peak.flops / 1e9), peak.loop_summary
        )
        for t in threads
    ]


def measure_peak(
    threads: int = 1, repeat: int = 10, bits: int | None = None, best: bool = False
) -> float:
    """The per-core FP32 FMA peak (GFLOP/s) of this host on ``threads`` threads: the median
    of ``repeat`` rounds, or the fastest round with ``best`` (the hardware's figure on a loaded
    machine, where other processes only ever slow a round down)."""
    row = measure(build_peak(bits), [threads], repeat)[0]
    return row.best if best else row.median


def table(rows: Sequence[PeakRow]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| vector bits | accumulators | threads | GFLOP/s per core (median) | best | "
        "total GFLOP/s (median) | FMAs / insns in loop |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.bits} | {r.rows} x {r.bits // 32} | {r.threads} | {r.median:.1f} "
            f"(n={r.runs}) | {r.best:.1f} | {r.median * r.threads:.1f} | {r.loop} |"
        )
    return "\n".join(lines)
