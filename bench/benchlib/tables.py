"""The one table printer of the benchmarks, and the number formats their cells use.

Every benchmark (wan.py's three subcommands, audit_scale.py, coexist_table.py) prints its figures as Markdown
tables, the form docs/benchmarks.md and the project README quote them in. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ALIGN = {"l": "---", "r": "---:"}  # GitHub-flavoured Markdown: "---" left, "---:" right (numbers)


def markdown_table(header: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: a header row, the alignment row, one row per item of rows.

    align has one letter per column, "l" (text) or "r" (numbers). Cells are written with str() as they are:
    format them first (fmt, fmt_ratio, fmt_count, pct). A row with another number of cells than the header is an
    error, not a misaligned table."""
    if len(align) != len(header) or set(align) - set(ALIGN):
        raise ValueError(f"align {align!r}: one of {'/'.join(ALIGN)} per column, {len(header)} columns")
    lines = [_row(header), "|" + "".join(f"{ALIGN[a]}|" for a in align)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row of {len(row)} cells in a table of {len(header)} columns: {list(row)!r}")
        lines.append(_row(row))
    return "\n".join(lines)


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def fmt(v: float | None) -> str:
    """A rate or other measured figure to about three significant digits; None as a dash."""
    if v is None:
        return "–"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def fmt_ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}×" if v >= 10 else f"{v:.1f}×"


def fmt_count(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def pct(loss: float) -> str:
    """A loss rate (a fraction) as the percentage the tables and the results' keys use: 0.001 -> "0.1 %"."""
    return f"{loss * 100:g} %"
