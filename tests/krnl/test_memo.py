"""Identity memos: a result per object, recomputed for an equal but other object, bounded."""

from __future__ import annotations

from polyonnx.krnl import memo
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
from polyonnx.krnl.window import windowed
from polyonnx.schedule.signature import canonical_digest, kernel_signature

i = Aff.var("i")


def _kernel(offset: int) -> Kernel:
    s = Stmt("S0", Access("y", (i + offset,)), Load("x", (i,), "float32"))
    return Kernel(
        "k",
        (Buffer("x", "float32", (4,), "input"), Buffer("y", "float32", (12,), "output")),
        (Loop("i", 0, 4, (s,)),),
    )


def test_one_call_per_object():
    calls: list[object] = []

    @memo.identity_memo
    def first(t: tuple) -> object:
        calls.append(t)
        return t[0]

    a, b = tuple([1, 2]), tuple([1, 2])  # (literals would be one constant object)
    assert [first(a), first(a), first(b), first(a)] == [1, 1, 1, 1]
    assert len(calls) == 2 and calls[0] is a and calls[1] is b


def test_bounded(monkeypatch):
    monkeypatch.setattr(memo, "SIZE", 2)
    calls: list[object] = []

    @memo.identity_memo
    def same(t: tuple) -> tuple:
        calls.append(t)
        return t

    objects = [tuple([k]) for k in range(3)]
    for t in objects:
        same(t)
    same(objects[0])  # pushed out by the third: computed again
    same(objects[2])  # still there
    assert calls == [*objects, objects[0]]


def test_kernel_facts_are_remembered_per_object():
    k = _kernel(4)
    assert windowed(k) is windowed(k)
    # An equal kernel built again gets an equal (not the same) answer.
    assert windowed(_kernel(4)) == windowed(k) and windowed(_kernel(4)) is not windowed(k)
    assert kernel_signature(k) == canonical_digest(k)[:16] == kernel_signature(_kernel(4))
    assert kernel_signature(k) != kernel_signature(_kernel(8))
