"""Tiny kernels and models for examples: the docstrings' doctests, docs/schedule.md and tests.

The kernels are hand-built krnl kernels (no ONNX, no isl); :func:`conv_model` is a small ONNX
model, Conv -> BatchNormalization -> Relu with seeded weights, that compiles in about a second;
:func:`lstm_model` a bidirectional LSTM; :func:`run_time_loop_model` a Loop run at run time.

Example:
    >>> print(matmul(2, 3, 4))
    kernel matmul(in A: float32[2, 4], in B: float32[4, 3], out C: float32[2, 3]) {
      for i in [0, 2):
        for j in [0, 3):
          S0: C[i, j] = 0.0
          for k in [0, 4):
            S1: C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))
    }
    >>> [i.name for i in conv_model().graph.input], [o.name for o in conv_model().graph.output]
    (['x'], ['y'])
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt, binary, unary

F32 = "float32"


def matmul(m: int = 4, n: int = 5, k: int = 3) -> Kernel:
    """C[i, j] = sum_k A[i, k] * B[k, j] with an init statement inside the (i, j) loops."""
    i, j, kk = Aff.var("i"), Aff.var("j"), Aff.var("k")
    init = Stmt("S0", Access("C", (i, j)), Const(0.0, F32))
    update = Stmt(
        "S1",
        Access("C", (i, j)),
        Load("C", (i, j), F32) + Load("A", (i, kk), F32) * Load("B", (kk, j), F32),
    )
    return Kernel(
        "matmul",
        (
            Buffer("A", F32, (m, k), "input"),
            Buffer("B", F32, (k, n), "input"),
            Buffer("C", F32, (m, n), "output"),
        ),
        (Loop("i", 0, m, (Loop("j", 0, n, (init, Loop("k", 0, k, (update,)))),)),),
    )


def stencil(t: int = 4, n: int = 8) -> Kernel:
    """A[t, i] = A[t-1, i] + A[t-1, i+1]: dependence distances (1, 0) and (1, -1)."""
    tt, i = Aff.var("t"), Aff.var("i")
    body = Load("A", (tt - 1, i), F32) + Load("A", (tt - 1, i + 1), F32)
    s = Stmt("S0", Access("A", (tt, i)), body)
    return Kernel(
        "stencil",
        (Buffer("A", F32, (t, n + 1), "output"),),
        (Loop("t", 1, t, (Loop("i", 0, n, (s,)),)),),
    )


def chain(m: int = 5, n: int = 7) -> Kernel:
    """T = A * 2; U = T + A; V = tanh(U): three elementwise nests."""
    i, j = Aff.var("i"), Aff.var("j")
    s0 = Stmt("S0", Access("T", (i, j)), Load("A", (i, j), F32) * 2.0)
    s1 = Stmt("S1", Access("U", (i, j)), Load("T", (i, j), F32) + Load("A", (i, j), F32))
    s2 = Stmt("S2", Access("V", (i, j)), unary("tanh", Load("U", (i, j), F32)))

    def nest(s: Stmt) -> Loop:
        return Loop("i", 0, m, (Loop("j", 0, n, (s,)),))

    return Kernel(
        "chain",
        (
            Buffer("A", F32, (m, n), "input"),
            Buffer("T", F32, (m, n), "temp"),
            Buffer("U", F32, (m, n), "temp"),
            Buffer("V", F32, (m, n), "output"),
        ),
        (nest(s0), nest(s1), nest(s2)),
    )


def softmax_rows(rows: int = 4, n: int = 16) -> Kernel:
    """Y = softmax(X) along its rows, as the lowering builds it: per row the max, then the
    exponentials with their sum, then the division."""
    i, r = Aff.var("i"), Aff.var("r")
    x, y = Load("X", (i, r), F32), Load("Y", (i, r), F32)
    top, total = Load("M", (i,), F32), Load("S", (i,), F32)
    body = (
        Stmt("S0", Access("M", (i,)), Const(float("-inf"), F32)),
        Loop("r", 0, n, (Stmt("S1", Access("M", (i,)), binary("max", top, x)),)),
        Stmt("S2", Access("S", (i,)), Const(0.0, F32)),
        Loop(
            "r",
            0,
            n,
            (
                Stmt("S3", Access("Y", (i, r)), unary("exp", x - top)),
                Stmt("S4", Access("S", (i,)), total + y),
            ),
        ),
        Loop("r", 0, n, (Stmt("S5", Access("Y", (i, r)), y / total),)),
    )
    return Kernel(
        "softmax_rows",
        (
            Buffer("X", F32, (rows, n), "input"),
            Buffer("M", F32, (rows,), "temp"),
            Buffer("S", F32, (rows,), "temp"),
            Buffer("Y", F32, (rows, n), "output"),
        ),
        (Loop("i", 0, rows, body),),
    )


def cumsum(rows: int = 3, n: int = 9) -> Kernel:
    """Y = cumsum(X, axis=1): copy, then a scan along ``i``."""
    r, i = Aff.var("r"), Aff.var("i")
    s0 = Stmt("S0", Access("Y", (r, i)), Load("X", (r, i), F32))
    s1 = Stmt("S1", Access("Y", (r, i)), Load("Y", (r, i - 1), F32) + Load("Y", (r, i), F32))
    return Kernel(
        "cumsum",
        (Buffer("X", F32, (rows, n), "input"), Buffer("Y", F32, (rows, n), "output")),
        (
            Loop("r", 0, rows, (Loop("i", 0, n, (s0,)),)),
            Loop("r", 0, rows, (Loop("i", 1, n, (s1,)),)),
        ),
    )


def rnn(steps: int = 4, hidden: int = 5) -> Kernel:
    """H[t, j] = tanh(X[t, j] + sum_k W[j, k] * H[t-1, k]): a time loop carrying everything."""
    t, j, k = Aff.var("t"), Aff.var("j"), Aff.var("k")
    s0 = Stmt("S0", Access("H", (t, j)), Load("X", (t, j), F32))
    s1 = Stmt(
        "S1",
        Access("H", (t, j)),
        Load("H", (t, j), F32) + Load("W", (j, k), F32) * Load("H", (t - 1, k), F32),
    )
    s2 = Stmt("S2", Access("H", (t, j)), unary("tanh", Load("H", (t, j), F32)))
    body = Loop(
        "t",
        1,
        steps,
        (Loop("j", 0, hidden, (s0, Loop("k", 0, hidden, (s1,)))), Loop("j", 0, hidden, (s2,))),
    )
    return Kernel(
        "rnn",
        (
            Buffer("X", F32, (steps, hidden), "input"),
            Buffer("W", F32, (hidden, hidden), "input"),
            Buffer("H", F32, (steps, hidden), "output"),
        ),
        (body,),
    )


def conv_model(
    channels: int = 8, size: int = 8, batch: int | str = 1, seed: int = 0
) -> onnx.ModelProto:
    """``y = Relu(BatchNormalization(Conv(x)))``: a 3x3 conv with padding 1 from ``channels``
    to ``channels`` on ``x: float32[batch, channels, size, size]`` (a string ``batch`` is a
    symbolic dimension; opset 17, seeded weights)."""
    rng = np.random.default_rng(seed)
    c = channels

    def const(name: str, shape: tuple[int, ...], low: float, high: float) -> TensorProto:
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype(np.float32), name)

    weights = [
        const("w", (c, c, 3, 3), -0.3, 0.3),
        const("b", (c,), -0.1, 0.1),
        const("scale", (c,), 0.5, 1.5),
        const("bias", (c,), -0.1, 0.1),
        const("mean", (c,), -0.1, 0.1),
        const("var", (c,), 0.5, 1.5),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["conv", "scale", "bias", "mean", "var"], ["bn"], "bn"
        ),
        helper.make_node("Relu", ["bn"], ["y"], "relu"),
    ]
    shape = [batch, c, size, size]
    graph = helper.make_graph(
        nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def lstm_model(
    hidden: int = 64, inputs: int = 8, steps: int = 5, batch: int = 1, seed: int = 0
) -> onnx.ModelProto:
    """A bidirectional ``LSTM`` of ``hidden`` units over ``x: float32[steps, batch, inputs]``
    (outputs ``Y``, ``Y_h``, ``Y_c``; opset 14, seeded weights and biases)."""
    rng = np.random.default_rng(seed)
    h = hidden
    weights = [
        numpy_helper.from_array(rng.uniform(-0.3, 0.3, shape).astype(np.float32), name)
        for name, shape in (("w", (2, 4 * h, inputs)), ("r", (2, 4 * h, h)), ("b", (2, 8 * h)))
    ]
    node = helper.make_node(
        "LSTM",
        ["x", "w", "r", "b"],
        ["Y", "Y_h", "Y_c"],
        "lstm",
        hidden_size=h,
        direction="bidirectional",
    )
    out = {"Y": [steps, 2, batch, h], "Y_h": [2, batch, h], "Y_c": [2, batch, h]}
    graph = helper.make_graph(
        [node],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, inputs])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in out.items()],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def run_time_loop_model() -> onnx.ModelProto:
    """A ``Loop`` named ``lp`` whose trip count is the input ``n: int64[]``: ``acc = acc * 0.5
    + x`` from ``acc0``, ``x``, ``acc0`` and the output ``acc`` all ``float32[3]`` (opset
    17). polyonnx runs it as a loop of the entry point (:mod:`polyonnx.graph.loops`)."""
    f3 = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [3]) for v in ("acc", "acc_out")]
    flags = [helper.make_tensor_value_info(v, TensorProto.BOOL, []) for v in ("cond", "cond_out")]
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc", "half"], ["h"]),
            helper.make_node("Add", ["h", "x"], ["acc_out"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), flags[0], f3[0]],
        [flags[1], f3[1]],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "acc0"], ["acc"], "lp", body=body)],
        "loop",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
