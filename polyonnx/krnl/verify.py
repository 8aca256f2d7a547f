"""Whole-kernel checks for krnl: all of them between stages in tests, some on every model.

:func:`verify` checks what the records' own ``__post_init__`` cannot see: that every name a
statement uses is declared (buffers) or in scope (iterators), that index ranks match buffer
ranks, and that writes are well typed and go to writable buffers. :func:`check_lowered`
runs on every kernel a model lowers to: index ranks, and affine indices within their buffers,
so that an op given inputs of shapes it does not accept is refused, never run out of bounds.

Example:
    >>> from polyonnx.krnl import ir
    >>> k = ir.Kernel("bad", (ir.Buffer("x", "float32", (4,), "input"),),
    ...               (ir.Loop("i", 0, 4, (ir.Stmt("S0", ir.Access("x", (ir.Aff.var("i"),)),
    ...                                            ir.Const(0.0, "float32")),)),))
    >>> verify(k)
    Traceback (most recent call last):
    ...
    ValueError: kernel bad: statement S0 writes x, an input buffer
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.krnl import ir


def verify(kernel: ir.Kernel) -> None:
    """Raise ``ValueError`` naming the kernel, statement and name at fault if ``kernel`` is bad.

    Checks: buffer names are unique and known; index ranks match; every iterator used (in
    bounds, guards, indices and ``Iter`` expressions) is bound by an enclosing loop; no iterator
    is rebound along a path; statement names are unique; a statement's body has its write's
    dtype; no statement writes an input buffer; run-time computed indices are integers.
    """
    _Verifier(kernel).run()


class _Verifier:
    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.buffers: dict[str, ir.Buffer] = {}
        self.stmt_names: set[str] = set()

    def fail(self, where: str, message: str) -> ValueError:
        return ValueError(f"kernel {self.kernel.name}: {where}{message}")

    def run(self) -> None:
        for b in self.kernel.buffers:
            if b.name in self.buffers:
                raise self.fail("", f"buffer {b.name} is declared twice")
            self.buffers[b.name] = b
        self.visit(self.kernel.body, ())

    def visit(self, nodes: tuple[ir.Node, ...], scope: tuple[str, ...]) -> None:
        for node in nodes:
            if isinstance(node, ir.Loop):
                where = f"loop {node.iterator}: "
                if node.iterator in scope:
                    raise self.fail(
                        where,
                        f"iterator {node.iterator} is already bound by an "
                        f"enclosing loop ({' > '.join(scope)})",
                    )
                self.check_aff(node.lower, scope, where + "lower bound ")
                self.check_aff(node.upper, scope, where + "upper bound ")
                self.visit(node.body, scope + (node.iterator,))
            elif isinstance(node, ir.Stmt):
                self.check_stmt(node, scope)
            else:
                raise self.fail("", f"unexpected node {node!r} in the loop tree")

    def check_aff(self, aff: ir.Aff, scope: tuple[str, ...], where: str) -> None:
        for name in aff.vars:
            if name not in scope:
                raise self.fail(
                    where,
                    f"uses iterator {name} outside its loop "
                    f"(in scope: {', '.join(scope) or 'none'})",
                )

    def check_index(
        self, buffer: str, index: tuple[ir.Index, ...], scope: tuple[str, ...], where: str
    ) -> None:
        if buffer not in self.buffers:
            raise self.fail(where, f"unknown buffer {buffer}")
        rank = len(self.buffers[buffer].shape)
        if len(index) != rank:
            raise self.fail(where, f"indexes {buffer} (rank {rank}) with {len(index)} subscripts")
        for i in index:
            if isinstance(i, ir.Aff):
                self.check_aff(i, scope, where + f"index of {buffer} ")
            elif not isinstance(i, ir.Expr):
                raise self.fail(where, f"index {i!r} of {buffer} is neither an Aff nor an Expr")
            elif i.dtype not in ir.INT_DTYPES:
                raise self.fail(where, f"computed index of {buffer} has dtype {i.dtype}")

    def check_stmt(self, stmt: ir.Stmt, scope: tuple[str, ...]) -> None:
        where = f"statement {stmt.name}: "
        if stmt.name in self.stmt_names:
            raise self.fail("", f"statement name {stmt.name} is used twice")
        self.stmt_names.add(stmt.name)
        self.check_index(stmt.write.buffer, stmt.write.index, scope, where)
        target = self.buffers[stmt.write.buffer]
        if target.kind == "input":
            raise self.fail("", f"statement {stmt.name} writes {target.name}, an input buffer")
        for g in stmt.guards:
            self.check_aff(g.aff, scope, where + "guard ")
        for e in ir.walk(stmt.body):
            if isinstance(e, ir.Load):
                self.check_index(e.buffer, e.index, scope, where)
                if e.dtype != self.buffers[e.buffer].dtype:
                    raise self.fail(
                        where,
                        f"loads {e.buffer} as {e.dtype}, the buffer is "
                        f"{self.buffers[e.buffer].dtype}",
                    )
            elif isinstance(e, ir.Iter) and e.name not in scope:
                raise self.fail(where, f"uses iterator {e.name} outside its loop")
        if stmt.body.dtype != target.dtype:
            raise self.fail(
                where, f"writes a {stmt.body.dtype} value to {target.name}, a {target.dtype} buffer"
            )


def check_lowered(kernel: ir.Kernel) -> None:
    """Raise :class:`~polyonnx.errors.ShapeError` naming ``kernel``'s nodes when one of its
    statements indexes a buffer with the wrong number of subscripts, or with an affine index
    that leaves the buffer somewhere in the statement's iterations.

    The iterations are the box of the loop bounds (:func:`~polyonnx.krnl.ir.loop_box`),
    narrowed by the statement's one-iterator guards; a statement with a guard on several
    iterators, or in a loop whose bounds depend on an outer one, is not checked for bounds (its
    box would over-approximate). Run-time computed indices (Gather's, say) are checked by the
    code that computes them.

    Example:
        >>> i = ir.Aff.var("i")
        >>> s = ir.Stmt("S0", ir.Access("y", (i,)), ir.Load("x", (i + 1,), "float32"))
        >>> k = ir.Kernel("k0_Add", (ir.Buffer("x", "float32", (4,), "input"),
        ...     ir.Buffer("y", "float32", (4,), "output")), (ir.Loop("i", 0, 4, (s,)),), ("add",))
        >>> check_lowered(k)
        Traceback (most recent call last):
        ...
        polyonnx.errors.ShapeError: node 'add': its lowering reads x[i + 1] up to index 4 of \
axis 0, which has 4 elements: the op does not accept its inputs' shapes (or polyonnx has a bug)
    """
    shapes = {b.name: b.shape for b in kernel.buffers}
    nodes = ", ".join(repr(n) for n in kernel.ops) or repr(kernel.name)

    def fail(what: str) -> ShapeError:
        return ShapeError(
            f"node{'s' if len(kernel.ops) > 1 else ''} {nodes}: its lowering {what}: the op "
            "does not accept its inputs' shapes (or polyonnx has a bug)"
        )

    for loops, stmt in kernel.statements():
        # A bound on an outer iterator makes the box too large for indices that combine them.
        rectangular = all(not lp.lower.terms and not lp.upper.terms for lp in loops)
        box = _guarded_box(ir.loop_box(loops), stmt.guards) if rectangular else None
        accesses: list[tuple[str, str, tuple[ir.Index, ...], int]] = [
            ("writes", stmt.write.buffer, stmt.write.index, 1)
        ]
        accesses += [("reads", e.buffer, e.index, n) for e, n in ir.read_spans(stmt.body)]
        for verb, buffer, index, lanes in accesses:
            shape = shapes.get(buffer)
            if shape is None:
                raise fail(f"{verb} {buffer}, which is not among its buffers")
            if len(index) != len(shape):
                raise fail(f"indexes {buffer} (rank {len(shape)}) with {len(index)} subscripts")
            if box is None or any(hi < lo for lo, hi in box.values()):
                continue  # not checked, or no iterations
            for axis, (i, extent) in enumerate(zip(index, shape, strict=True)):
                if not isinstance(i, ir.Aff):
                    continue
                lo, hi = i.extremes(box)
                hi += lanes - 1 if axis == len(index) - 1 else 0
                if lo < 0 or hi >= extent:
                    at = f"index {lo}" if lo < 0 else f"up to index {hi}"
                    subscripts = ", ".join(map(str, index))
                    raise fail(
                        f"{verb} {buffer}[{subscripts}] {at} of axis {axis}, which has "
                        f"{extent} elements"
                    )


def _guarded_box(
    box: dict[str, tuple[int, int]], guards: tuple[ir.Cond, ...]
) -> dict[str, tuple[int, int]] | None:
    """``box`` narrowed by the guards on one iterator each; None if a guard has several."""
    for g in guards:
        terms = g.aff.terms
        if len(terms) != 1:
            if terms:
                return None
            continue
        (name, c), k = terms[0], g.aff.const
        lo, hi = box[name]
        if g.eq:  # c*i + k == 0
            if k % c:
                lo, hi = 1, 0
            else:
                lo, hi = max(lo, -k // c), min(hi, -k // c)
        elif c > 0:  # i >= ceil(-k / c)
            lo = max(lo, -(k // c))
        else:  # i <= floor(k / -c)
            hi = min(hi, k // -c)
        box = {**box, name: (lo, hi)}
    return box
