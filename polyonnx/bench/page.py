"""A page of a benchmark report or comparison, rendered twice from one description: as
Markdown and as HTML. Tables are built once as (headers, rows) and rendered by both, so the two
documents cannot disagree.

Example:
    >>> t = table(["model", "ratio"], [["mnist", "0.75"]], "lr")
    >>> print(markdown("A title", [Section("Models", "Some **bold** text.", (t,))]))
    # A title
    <BLANKLINE>
    ## Models
    <BLANKLINE>
    Some **bold** text.
    <BLANKLINE>
    | model | ratio |
    | --- | ---: |
    | mnist | 0.75 |
    <BLANKLINE>
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-aligned columns


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    text: str = ""
    tables: tuple[Table, ...] = ()
    plot: str | None = None  # a file name in the page's folder


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: str = "") -> Table:
    """``numeric``: one character per column, ``r`` for right-aligned."""
    flags = tuple(c == "r" for c in numeric.ljust(len(headers), "l"))
    return Table(tuple(headers), tuple(tuple(r) for r in rows), flags)


def write_page(out: Path, stem: str, title: str, sections: Sequence[Section]) -> None:
    """``out/<stem>.md`` and ``out/<stem>.html``."""
    (out / f"{stem}.md").write_text(markdown(title, sections))
    (out / f"{stem}.html").write_text(to_html(title, sections))


def markdown_table(t: Table) -> list[str]:
    """The lines of ``t`` as a Markdown table."""
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in t.headers) + " |"]
    lines.append("| " + " | ".join("---:" if r else "---" for r in t.numeric) + " |")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t.rows]
    return lines


def markdown(title: str, sections: Sequence[Section]) -> str:
    lines = [f"# {title}", ""]
    for sec in sections:
        lines += [f"## {sec.title}", ""]
        if sec.text:
            lines += [sec.text, ""]
        if sec.plot:
            lines += [f"![{sec.title}]({sec.plot})", ""]
        for t in sec.tables:
            lines += [*markdown_table(t), ""]
    return "\n".join(lines)


_CSS = (
    "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0;font-size:90%}"
    "td,th{border:1px solid #ccc;padding:2px 6px}td.r{text-align:right}"
    "img{max-width:100%}"
)


def _inline(text: str) -> str:
    """The Markdown the sections use: **bold** and `code`, escaped."""
    parts = html.escape(text).split("**")
    text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="r">{html.escape(c)}</td>' if r else f"<td>{html.escape(c)}</td>"
            for c, r in zip(row, t.numeric, strict=True)
        )
        + "</tr>"
        for row in t.rows
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def to_html(title: str, sections: Sequence[Section]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    for sec in sections:
        body.append(f"<h2>{html.escape(sec.title)}</h2>")
        for para in sec.text.split("\n\n") if sec.text else ():
            items = [line[2:] for line in para.splitlines() if line.startswith("- ")]
            if items:
                body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            else:
                body.append(f"<p>{_inline(para)}</p>")
        if sec.plot:
            body.append(f'<img src="{html.escape(sec.plot)}" alt="{html.escape(sec.title)}">')
        body += [_html_table(t) for t in sec.tables]
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
