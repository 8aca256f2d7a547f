"""Regular expressions compiled, at compile time, to a DFA over Unicode code points.

RegexFullMatch (:mod:`polyonnx.krnl.lower.regex`) steps each string through the tables built
here. The pattern is parsed by the standard library's parser (``re._parser``), and means what
``re.fullmatch`` makes of it, as ``onnx.reference`` does: ``\\w``, ``\\d``, ``\\s`` and ``\\b``
are Unicode-aware, ``$`` also matches before a final newline, and the flags ``(?i)``, ``(?s)``,
``(?m)``, ``(?a)``, ``(?x)`` apply. RE2 refuses what a DFA cannot express, and so does this
module (:class:`UnsupportedPattern`): backreferences, lookaround, conditional groups; also
possessive repeats and atomic groups, which RE2 does not parse.

The construction: a Thompson NFA whose edges consume a set of code points, or are empty, or
assert something of the neighbouring characters (``^ $ \\A \\Z \\b \\B``); the code points are
partitioned into the coarsest *classes* that every set used is a union of; the subset
construction then runs over classes. Assertions look one character ahead (the class being
read) and one behind (a DFA state remembers what it needs of the previous character);
``$`` before a final newline looks two ahead, which a state records as "the string must end
after the next character". The DFA is minimised (Moore) and bounded by :data:`MAX_STATES`.

Class ``0`` is the padding code point 0, which no string holds: it leaves every state as it
is, so a string's state after its padding is its state after its last character.

Example:
    >>> dfa = compile_pattern(r"[a-c]+\\d?")
    >>> [dfa.fullmatch(s) for s in ("abc7", "ab77", "", "c")]
    [True, False, False, True]
    >>> dfa.states, dfa.classes
    (4, 4)
"""

from __future__ import annotations

import bisect
import importlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import numpy as np

# re's own parser and its opcodes (private modules, without type stubs).
sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")

#: One past the largest code point.
END_CP = 0x110000
#: The largest DFA (states after minimisation, and states explored before it) compiled.
MAX_STATES = 4096
#: The largest NFA built (repeats with large counts are expanded copy by copy).
MAX_NFA = 20000

#: Half-open code-point intervals ``[lo, hi)``, sorted and disjoint.
Intervals = tuple[tuple[int, int], ...]

_FLAGS = sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_ASCII | sre.SRE_FLAG_DOTALL
_CATEGORY_TEXT = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}
#: The zero-width assertions, by what they are in re._parser, with the multi-line variants.
_BEGIN, _BEGIN_LINE, _BEGIN_TEXT = "begin", "begin_line", "begin_text"
_END, _END_LINE, _END_TEXT = "end", "end_line", "end_text"
_WORD_EDGE, _NOT_WORD_EDGE = "word_edge", "not_word_edge"
_UNSUPPORTED = {
    sre.GROUPREF: "a backreference",
    sre.GROUPREF_EXISTS: "a conditional group",
    sre.ATOMIC_GROUP: "an atomic group",
    sre.POSSESSIVE_REPEAT: "a possessive repeat",
}


class BadPattern(ValueError):
    """The pattern does not parse."""


class UnsupportedPattern(ValueError):
    """The pattern uses a construct no DFA expresses, or its DFA is too large."""


@dataclass(frozen=True)
class Dfa:
    """A DFA over code points, as the tables the loops read.

    ``bounds[k]`` is the first code point of interval ``k`` (sorted; padded to a power of two
    with :data:`END_CP`), ``klass[k]`` its class; ``delta[s, c]`` is the state after reading a
    code point of class ``c`` in state ``s``; ``accept[s]`` says whether a string may end in
    ``s``. The start state is 0.
    """

    bounds: np.ndarray
    klass: np.ndarray
    delta: np.ndarray
    accept: np.ndarray

    @property
    def states(self) -> int:
        return int(self.delta.shape[0])

    @property
    def classes(self) -> int:
        return int(self.delta.shape[1])

    def class_of(self, cp: int) -> int:
        """The class of code point ``cp``, by the binary search the loops do."""
        lo, half = 0, len(self.bounds) // 2
        while half:
            if self.bounds[lo + half] <= cp:
                lo += half
            half //= 2
        return int(self.klass[lo])

    def fullmatch(self, text: str) -> bool:
        """Whether the DFA accepts ``text`` (the tables run in Python, for tests)."""
        state = 0
        for ch in text:
            state = int(self.delta[state, self.class_of(ord(ch))])
        return bool(self.accept[state])


# --------------------------------------------------------------------------- code-point sets


@cache
def _all_code_points() -> str:
    """Every code point, in order, as one string (surrogates included, as Python allows)."""
    return np.arange(END_CP, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")


@cache
def _scanned(text: str, flags: int) -> Intervals:
    """The code points that the one-character pattern ``text`` matches under ``flags``: found
    by running it over every code point, so they are exactly what ``re`` matches."""
    runs = re.finditer(f"(?:{text})+", _all_code_points(), flags)
    return tuple(m.span() for m in runs)


def matching(text: str, flags: int = 0) -> Intervals:
    """The code points the one-character pattern ``text`` matches (``re`` flags ``flags``),
    as intervals.

    Example:
        >>> matching(r"\\s")[:2]
        ((9, 14), (28, 33))
    """
    return _scanned(text, flags)


def _union(sets: Iterable[Intervals]) -> Intervals:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(iv for s in sets for iv in s):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _complement(s: Intervals) -> Intervals:
    gaps, at = [], 0
    for lo, hi in s:
        if lo > at:
            gaps.append((at, lo))
        at = hi
    if at < END_CP:
        gaps.append((at, END_CP))
    return tuple(gaps)


def _escape(cp: int) -> str:
    return f"\\U{cp:08x}"


def _item_text(op: Any, av: Any) -> str:
    """One item of a parsed character class, written back as pattern text."""
    if op is sre.LITERAL:
        return _escape(int(av))
    if op is sre.RANGE:
        lo, hi = av
        return f"{_escape(lo)}-{_escape(hi)}"
    if op is sre.CATEGORY:
        return _CATEGORY_TEXT[av]
    raise UnsupportedPattern(f"the class item {op} {av}")


def _class_set(items: Sequence[tuple[Any, Any]], flags: int) -> Intervals:
    """The code points a parsed character class ``[...]`` matches."""
    negate = bool(items) and items[0][0] is sre.NEGATE
    body = items[1:] if negate else items
    if flags & sre.SRE_FLAG_IGNORECASE:  # case folding: let re say what matches
        text = "".join(_item_text(op, av) for op, av in body)
        return _scanned(f"[{'^' if negate else ''}{text}]", flags & _FLAGS)
    parts: list[Intervals] = []
    for op, av in body:
        if op is sre.CATEGORY:
            parts.append(_scanned(_item_text(op, av), flags & _FLAGS))
        elif op is sre.LITERAL:
            parts.append(((int(av), int(av) + 1),))
        elif op is sre.RANGE:
            lo, hi = av
            parts.append(((lo, hi + 1),))
        else:
            raise UnsupportedPattern(f"the class item {op} {av}")
    s = _union(parts)
    return _complement(s) if negate else s


def _atom_set(op: Any, av: Any, flags: int) -> Intervals:
    """The code points one parsed single-character atom matches."""
    if op is sre.ANY:
        return _full() if flags & sre.SRE_FLAG_DOTALL else _complement(((10, 11),))
    if op is sre.IN:
        return _class_set(av, flags)
    s = _class_set([(sre.LITERAL, av)], flags)
    return _complement(s) if op is sre.NOT_LITERAL else s


def _full() -> Intervals:
    return ((0, END_CP),)


# --------------------------------------------------------------------------- the NFA


#: An assertion: what it asserts, and whether its words are ASCII-only.
_Assertion = tuple[str, bool]


@dataclass
class _Nfa:
    """Thompson NFA: per state, its empty edges (``eps``: targets), its reading edges
    (``reads``: the index of a set in ``sets``, target) and its assertions (``checks``)."""

    eps: list[list[int]] = field(default_factory=list)
    reads: list[list[tuple[int, int]]] = field(default_factory=list)
    checks: list[list[tuple[_Assertion, int]]] = field(default_factory=list)
    sets: dict[Intervals, int] = field(default_factory=dict)

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA:
            raise UnsupportedPattern(f"its NFA passes {MAX_NFA} states (large repeat counts)")
        for edges in (self.eps, self.reads, self.checks):
            edges.append([])
        return len(self.eps) - 1

    def build(self, items: Iterable[tuple[Any, Any]], flags: int) -> tuple[int, int]:
        """The fragment ``(entry, exit)`` matching the parsed sequence ``items``."""
        entry = at = self.state()
        for op, av in items:
            first, last = self.atom(op, av, flags)
            self.eps[at].append(first)
            at = last
        return entry, at

    def atom(self, op: Any, av: Any, flags: int) -> tuple[int, int]:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            s = _atom_set(op, av, flags)
            a, b = self.state(), self.state()
            self.reads[a].append((self.sets.setdefault(s, len(self.sets)), b))
            return a, b
        if op is sre.SUBPATTERN:
            _, add, remove, body = av
            return self.build(body, (flags | add) & ~remove)
        if op is sre.BRANCH:
            a, b = self.state(), self.state()
            for alt in av[1]:
                first, last = self.build(alt, flags)
                self.eps[a].append(first)
                self.eps[last].append(b)
            return a, b
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # (laziness changes no full match)
            least, most, body = av
            return self.repeat(least, most, body, flags)
        if op is sre.AT:
            a, b = self.state(), self.state()
            self.checks[a].append((_assertion(av, flags), b))
            return a, b
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            negative = "negative " if op is sre.ASSERT_NOT else ""
            raise UnsupportedPattern(f"a {negative}{'lookahead' if av[0] == 1 else 'lookbehind'}")
        raise UnsupportedPattern(_UNSUPPORTED.get(op, f"the construct {op}"))

    def repeat(self, least: int, most: int, body: Any, flags: int) -> tuple[int, int]:
        entry = at = self.state()
        for _ in range(least):
            first, last = self.build(body, flags)
            self.eps[at].append(first)
            at = last
        if most == sre.MAXREPEAT:  # a loop: body, any number of times
            first, last = self.build(body, flags)
            self.eps[at].append(first)
            self.eps[last].append(at)
            return entry, at
        exit_ = self.state()
        for _ in range(most - least):  # each further copy optional
            self.eps[at].append(exit_)
            first, last = self.build(body, flags)
            self.eps[at].append(first)
            at = last
        self.eps[at].append(exit_)
        return entry, exit_


def _assertion(code: Any, flags: int) -> _Assertion:
    """(what, whether words are ASCII-only) of a parsed ``AT`` code under ``flags``."""
    multi = bool(flags & sre.SRE_FLAG_MULTILINE)
    ascii_ = bool(flags & sre.SRE_FLAG_ASCII)
    what = {
        sre.AT_BEGINNING: _BEGIN_LINE if multi else _BEGIN,
        sre.AT_BEGINNING_STRING: _BEGIN_TEXT,
        sre.AT_END: _END_LINE if multi else _END,
        sre.AT_END_STRING: _END_TEXT,
        sre.AT_BOUNDARY: _WORD_EDGE,
        sre.AT_NON_BOUNDARY: _NOT_WORD_EDGE,
    }.get(code)
    if what is None:
        raise UnsupportedPattern(f"the assertion {code}")
    return what, ascii_


# --------------------------------------------------------------------------- classes


@dataclass(frozen=True)
class _Alphabet:
    """The code points cut into classes: ``starts`` of the elementary intervals, the class of
    each, the classes in each NFA set, and per class what assertions ask of a character."""

    starts: tuple[int, ...]
    klass: tuple[int, ...]
    members: tuple[frozenset[int], ...]
    newline: int  # the class of "\n" (alone in its class), -2 if no assertion asks
    word: tuple[frozenset[int], frozenset[int]]  # classes of word characters: Unicode, ASCII

    @property
    def count(self) -> int:
        return max(self.klass) + 1


def _inside(s: Intervals, cp: int) -> bool:
    k = bisect.bisect_right(s, (cp, END_CP + 1)) - 1
    return k >= 0 and s[k][0] <= cp < s[k][1]


def _alphabet(sets: Sequence[Intervals], newline: bool, words: tuple[bool, bool]) -> _Alphabet:
    """The classes of ``sets``; ``newline``: "\n" alone in its class; ``words``: the word
    characters (Unicode, ASCII) apart from the others (as the assertions need)."""
    word_sets = [
        _scanned(r"\w", flag) if need else ()
        for need, flag in zip(words, (0, sre.SRE_FLAG_ASCII), strict=True)
    ]
    cuts = [*sets, ((10, 11),) if newline else (), *word_sets]
    starts = sorted({0, 1, *(p for s in cuts for iv in s for p in iv)} - {END_CP})
    ids: dict[tuple[bool, ...], int] = {}
    klass = [0]  # the padding code point 0 is a class of its own
    for cp in starts[1:]:
        klass.append(ids.setdefault(tuple(_inside(s, cp) for s in cuts), len(ids) + 1))
    first = {c: cp for cp, c in reversed(list(zip(starts, klass, strict=True)))}

    def classes_in(s: Intervals) -> frozenset[int]:
        return frozenset(c for c, cp in first.items() if c and _inside(s, cp))

    unicode_words, ascii_words = (classes_in(w) for w in word_sets)
    nl = klass[starts.index(10)] if newline else -2
    return _Alphabet(
        tuple(starts), tuple(klass), tuple(map(classes_in, sets)), nl, (unicode_words, ascii_words)
    )


# --------------------------------------------------------------------------- subset construction

#: What a DFA state remembers of the previous character: None at the start of the string,
#: else (is "\n", is a Unicode word character, is an ASCII word character).
_Before = tuple[bool, bool, bool] | None
#: An NFA state with how many more characters the string may have (None: any number).
_Item = tuple[int, int | None]
_AT_END = -1  # "the next class" at the end of the string


@dataclass(frozen=True)
class _Context:
    alphabet: _Alphabet
    nfa: _Nfa
    final: int

    def holds(self, what: str, ascii_: bool, before: _Before, nxt: int) -> bool:
        """Whether an assertion holds between ``before`` and the class ``nxt``."""
        a = self.alphabet
        if what in (_BEGIN, _BEGIN_TEXT):
            return before is None
        if what == _BEGIN_LINE:
            return before is None or before[0]
        if what in (_END, _END_TEXT):
            return nxt == _AT_END
        if what == _END_LINE:
            return nxt in (_AT_END, a.newline)
        word_before = before is not None and before[2 if ascii_ else 1]
        word_after = nxt != _AT_END and nxt in a.word[ascii_]
        if before is None and nxt == _AT_END:  # (re: no boundary, nor non-boundary, in "")
            return False
        return (word_before != word_after) == (what == _WORD_EDGE)

    def closure(self, items: Iterable[_Item], before: _Before, nxt: int) -> set[_Item]:
        """``items`` and all they reach without reading, before reading class ``nxt``."""
        todo = [it for it in items if nxt == _AT_END or it[1] != 0]
        seen = set(todo)
        while todo:
            state, left = todo.pop()
            reached = [(t, left) for t in self.nfa.eps[state]]
            for (what, ascii_), target in self.nfa.checks[state]:
                if self.holds(what, ascii_, before, nxt):
                    reached.append((target, left))
                elif what == _END and nxt == self.alphabet.newline:
                    # "$" before a "\n": only if the string ends right after it.
                    reached.append((target, 1 if left is None else min(left, 1)))
            for item in reached:
                if item not in seen:
                    seen.add(item)
                    todo.append(item)
        return seen

    def step(self, items: Iterable[_Item], before: _Before, c: int) -> frozenset[_Item]:
        out = set()
        for state, left in self.closure(items, before, c):
            for label, target in self.nfa.reads[state]:
                if c in self.alphabet.members[label]:
                    out.add((target, None if left is None else left - 1))
        return frozenset(out)

    def after(self, c: int, looks_back: bool) -> _Before:
        if not looks_back:
            return None
        a = self.alphabet
        return (c == a.newline, c in a.word[0], c in a.word[1])


def _subsets(ctx: _Context, start: int, looks_back: bool) -> tuple[np.ndarray, np.ndarray]:
    """The DFA's transition table and accepting states, before minimisation."""
    first: tuple[frozenset[_Item], _Before] = (frozenset({(start, None)}), None)
    index = {first: 0}
    order = [first]
    rows: list[list[int]] = []
    classes = ctx.alphabet.count
    while len(rows) < len(order):
        items, before = order[len(rows)]
        row = [len(rows)]  # class 0, the padding: stay
        for c in range(1, classes):
            nxt = ctx.step(items, before, c)
            key = (nxt, ctx.after(c, looks_back) if nxt else None)
            if key not in index:
                if len(order) >= MAX_STATES:
                    raise UnsupportedPattern(f"its DFA passes {MAX_STATES} states")
                index[key] = len(order)
                order.append(key)
            row.append(index[key])
        rows.append(row)
    accept = [
        any(s == ctx.final for s, _ in ctx.closure(items, before, _AT_END))
        for items, before in order
    ]
    return np.array(rows, dtype=np.int32).reshape(len(rows), classes), np.array(accept, bool)


def _minimized(delta: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moore's partition refinement; state 0 stays the start state."""
    block = accept.astype(np.int64)
    count = len(np.unique(block))
    while True:
        signature = np.concatenate([block[:, None], block[delta]], axis=1)
        refined = np.unique(signature, axis=0, return_inverse=True)[1].reshape(-1)
        if refined.max() + 1 == count:
            break
        block, count = refined, int(refined.max()) + 1
    # Blocks numbered by first appearance: the start state's is 0.
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first)
    renumber = np.empty_like(order)
    renumber[order] = np.arange(len(order))
    reps = first[order]
    return renumber[block[delta[reps]]], accept[reps]


@lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> Dfa:
    """The DFA of ``re.fullmatch(pattern, ·)`` (see the module docstring). BadPattern if the
    pattern does not parse, UnsupportedPattern for what a DFA cannot do.

    Example:
        >>> compile_pattern(r"(?i)\\bab\\b|x$").fullmatch("AB"), compile_pattern("a|").states
        (True, 3)
    """
    try:
        parsed = sre_parse.parse(pattern, 0)
    except (re.error, RecursionError, OverflowError) as e:
        raise BadPattern(str(e)) from None
    flags = parsed.state.flags
    nfa = _Nfa()
    start, final = nfa.build(parsed.data, flags)
    asserted = {label for checks in nfa.checks for label, _ in checks}
    unicode_words, ascii_words = (
        any(what in (_WORD_EDGE, _NOT_WORD_EDGE) and a == ascii_ for what, a in asserted)
        for ascii_ in (False, True)
    )
    newline = any(what in (_END, _BEGIN_LINE, _END_LINE) for what, _ in asserted)
    alphabet = _alphabet(list(nfa.sets), newline, (unicode_words, ascii_words))
    looks_back = any(what not in (_END, _END_LINE, _END_TEXT) for what, _ in asserted)
    delta, accept = _subsets(_Context(alphabet, nfa, final), start, looks_back)
    delta, accept = _minimized(delta, accept)
    size = 1 << max(len(alphabet.starts) - 1, 0).bit_length()
    bounds = np.full(size, END_CP, dtype=np.uint32)
    bounds[: len(alphabet.starts)] = alphabet.starts
    klass = np.zeros(size, dtype=np.int32)
    klass[: len(alphabet.klass)] = alphabet.klass
    tables = (bounds, klass, delta.astype(np.int32), accept)
    for t in tables:
        t.flags.writeable = False  # (shared by every caller of this cached function)
    return Dfa(*tables)
