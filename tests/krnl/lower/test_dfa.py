"""The regex-to-DFA compiler: its tables, run in Python, against ``re.fullmatch``; the sets it
derives from ``re``; minimality; and the patterns it refuses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyonnx.krnl.lower.dfa import (
    END_CP,
    BadPattern,
    UnsupportedPattern,
    compile_pattern,
    matching,
)

#: Patterns over the constructs a DFA expresses: classes, ranges, negation, ``.``, repeats,
#: alternation, anchors, word boundaries, Unicode categories, flags.
PATTERNS = [
    r"abc",
    r"",
    r"a|",
    r"[a-c]+\d?",
    r"[^a-c\s]*",
    r"[\w.-]+@[a-z]+\.(com|org)",
    r"a.b",
    r"(?s)a.b",
    r"a{2,3}b{,2}c{2}",
    r"(ab|a)*b?",
    r"(?:a|b)*?a",
    r"\d+(\.\d*)?",
    r"\w+\s\w+",
    r"\W*",
    r"\D\S",
    r"^a$",
    r"a$\n",
    r"a\Z",
    r"\Aa",
    r"(?m)a$\n^b",
    r"\bab\b",
    r"a\b.*",
    r".*\B.*",
    r"\B",
    r"(\W|^)[\w.\-]{0,5}@(yahoo|gmail)\.com(\W|$)",
    r"(?i)ab[c-e]K",
    r"(?i)[^k]+",
    r"(?a)\w+\b",
    r"(?i:a)b",
    r"é+[à-ü]*Ω",
    r"[😀-😂]\U0001F600?",
]
#: Characters that tell those patterns apart: ASCII, Unicode digits (Arabic-Indic three,
#: mathematical zero), spaces (no-break, ideographic), case pairs (Kelvin sign, long s),
#: letters past the BMP.
ALPHABET = "abcdeK_.-@ \n\t0" + "\u0663\U0001d7d8\u00a0\u3000\u212a\u017fé\u00e0Ω😀😁\U0001f603ABC"


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=9))
def test_tables_match_re_fullmatch(pattern: str, text: str) -> None:
    assert compile_pattern(pattern).fullmatch(text) == bool(re.fullmatch(pattern, text))


@pytest.mark.parametrize(
    ("pattern", "texts"),
    [
        (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", ["account@gmail.com", "x@yahoo.com\n"]),
        (r"www\.[\w.-]+\.\bcom\b", ["www.google.com", "www.bbc.co.uk", "www..com"]),
        (r"a$", ["a", "a\n", "a\n\n"]),  # ("$" also before a final newline, as re has it)
    ],
)
def test_named_cases(pattern: str, texts: list[str]) -> None:
    dfa = compile_pattern(pattern)
    assert [dfa.fullmatch(t) for t in texts] == [bool(re.fullmatch(pattern, t)) for t in texts]


def test_sets_are_what_re_matches() -> None:
    every = [chr(cp) for cp in range(END_CP)]
    spaces = [cp for cp, ch in enumerate(every) if ch.isspace()]
    words = [cp for cp, ch in enumerate(every) if ch.isalnum() or ch == "_"]
    assert [cp for lo, hi in matching(r"\s") for cp in range(lo, hi)] == spaces
    assert [cp for lo, hi in matching(r"\w") for cp in range(lo, hi)] == words


def test_dfa_is_minimal() -> None:
    # "The k-th character from the end is a": 2^k states, plus one for any other character.
    for k in (2, 3, 4):
        assert compile_pattern(f"(a|b)*a(a|b){{{k - 1}}}").states == 2**k + 1


def test_classes_are_coarse_and_the_search_table_a_power_of_two() -> None:
    dfa = compile_pattern(r"[a-z]+[0-9]")
    # padding, [a-z], [0-9], the rest
    assert dfa.classes == 4
    assert len(dfa.bounds) & (len(dfa.bounds) - 1) == 0
    assert dfa.class_of(ord("q")) == dfa.class_of(ord("a")) != dfa.class_of(ord("5"))
    assert dfa.class_of(ord("A")) == dfa.class_of(0x10FFFF)
    # The padding class leaves every state as it is.
    assert (dfa.delta[:, 0] == range(dfa.states)).all()


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", "a backreference"),
        (r"(?P<x>a)(?P=x)", "a backreference"),
        (r"(?=a)a", "a lookahead"),
        (r"a(?!b).", "a negative lookahead"),
        (r"(?<=a)b", "a lookbehind"),
        (r"(?<!a)b", "a negative lookbehind"),
        (r"(a)?(?(1)b|c)", "a conditional group"),
        (r"(?>a+)b", "an atomic group"),
        (r"a*+", "a possessive repeat"),
        (r"(a|b)*a(a|b){14}", "its DFA passes 4096 states"),
        (r"a{30000}", "its NFA passes"),
    ],
)
def test_refuses_what_no_dfa_expresses(pattern: str, construct: str) -> None:
    with pytest.raises(UnsupportedPattern, match=re.escape(construct)):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "[z-a]", "*a", r"\p{L}"])
def test_bad_patterns(pattern: str) -> None:
    with pytest.raises(BadPattern):
        compile_pattern(pattern)
