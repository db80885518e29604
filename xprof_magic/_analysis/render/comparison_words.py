"""Two runs side by side in words: the notes on what differs in kind, text and static HTML.

The :class:`~xprof_magic._analysis.model.comparison.Comparison` is data (the rows, the
verdicts, the categories that moved); this module says it, in the same cells for the text
and the HTML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xprof_magic._analysis.model.categories import KIND
from xprof_magic._analysis.render.chart import ORANGE
from xprof_magic._analysis.render.chart import escape as _e
from xprof_magic._analysis.render.gaps import gap_said
from xprof_magic._analysis.render.headline import speedup
from xprof_magic._analysis.render.html import BOX, HEADING, table
from xprof_magic._units import NONE, data_size, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.comparison import CompareRow, Comparison

__all__ = [
    "compare_cell",
    "compare_delta",
    "comparison_html",
    "comparison_notes",
    "comparison_text",
    "predicted_and_measured",
]


def comparison_notes(c: Comparison) -> tuple[str, ...]:
    """What differs in kind between the two runs, one note each.

    The verdicts and the categories that moved,
    ``Diagnosis: input (82%) → device (71%); input 82% → 6%, device 3% → 71%``; A's predicted gain
    beside the measured one; different devices; a run that is incomplete.
    """
    notes: list[str] = []
    if c.verdicts:
        (x, x_share), (y, y_share) = c.verdicts
        what = ", ".join(f"{name} {a:.0%} → {b:.0%}" for name, a, b in c.moves)
        if what or x != y:
            head = f"Diagnosis: {_verdict(x, x_share)} → {_verdict(y, y_share)}"
            notes.append(
                f"{head}; {what}" if what else f"{head}; no category moved by 5 points or more"
            )
    if c.predicted is not None and c.measured is not None and c.step_s is not None:
        notes.append(predicted_and_measured(c))
    kind_a, kind_b = c.devices
    if kind_a != kind_b:
        notes.append(
            f"The runs used different devices ({kind_a} vs {kind_b}): "
            "their times are not comparable."
        )
    notes.extend(f"{which} is incomplete: {gap_said(gap)}" for which, gap in c.incomplete)
    return tuple(notes)


def predicted_and_measured(c: Comparison) -> str:
    """``Predicted 7.0×, measured 6.4×``, with the step times behind both."""
    g, measured, steps = c.predicted, c.measured, c.step_s
    assert g is not None and measured is not None and steps is not None
    return (
        f"Predicted {speedup(g.speedup)}, measured {speedup(measured)}: A's step "
        f"{seconds(steps[0])}, without {KIND[g.category].without} about {seconds(g.without_s)}; "
        f"B's {seconds(steps[1])}."
    )


def _verdict(verdict: str, share: float | None) -> str:
    return verdict if share is None else f"{verdict} ({share:.0%})"


def compare_cell(value: float | str | None, unit: str) -> str:
    """One run's value in a comparison."""
    if value is None:
        return NONE
    if isinstance(value, str):
        return value
    if unit == "s":
        return seconds(value)
    if unit == "bytes":
        return data_size(value)
    return f"{value:g}"


def compare_delta(row: CompareRow) -> str:
    """B − A, and B / A for times."""
    a, b = row.a, row.b
    if isinstance(a, str) or isinstance(b, str):
        return "" if a == b else "differs"
    if a is None or b is None:
        return "only in A" if b is None else "only in B"
    diff = b - a
    if diff == 0:
        return "="
    text = seconds(diff) if row.unit == "s" else f"{diff:+g}"
    if row.unit == "bytes":
        text = ("-" if diff < 0 else "") + data_size(abs(diff))
    if row.unit in ("s", "bytes") and not text.startswith("-"):
        text = "+" + text
    if a > 0 and row.unit in ("s", "bytes"):
        text += f" ({b / a:.2g}×)"
    return text


def _indented(row: CompareRow) -> str:
    return "  " * max(0, len(row.path) - 1) + row.name


def comparison_text(c: Comparison) -> str:
    """Two runs side by side as plain text, grouped by section."""
    rows = c.rows
    out = [f"xprof compare — A: {c.a}   B: {c.b}"]
    out.extend(f"  ! {n}" for n in comparison_notes(c))
    width = min(max([len(_indented(r)) for r in rows] + [10]), 48)
    section = ""
    for row in rows:
        if row.section != section:
            section = row.section
            out += ["", f"{section}", f"  {'':<{width}} {'A':>12} {'B':>12}  Δ (B − A)"]
        name = _indented(row)
        name = name if len(name) <= width else name[: width - 1] + "…"
        out.append(
            f"  {name:<{width}} {compare_cell(row.a, row.unit):>12} "
            f"{compare_cell(row.b, row.unit):>12}  {compare_delta(row)}"
        )
    return "\n".join(out)


def comparison_html(c: Comparison) -> str:
    """Two runs side by side as static HTML."""
    a, b = c.a, c.b
    parts = [f'<div class="xprof-magic-compare" style="{BOX}">']
    parts.append(f'<div style="font-weight:600">xprof compare — A: {_e(a)} · B: {_e(b)}</div>')
    for note in comparison_notes(c):
        parts.append(
            f'<div style="border-left:4px solid {ORANGE};padding:2px 8px;margin:3px 0">'
            f"{_e(note)}</div>"
        )
    section = ""
    table_rows: list[list[str]] = []

    def flush() -> None:
        if table_rows:
            parts.append(f'<div style="{HEADING}">{_e(section)}</div>')
            parts.append(table(["", f"A: {a}", f"B: {b}", "Δ (B − A)"], table_rows, {1, 2, 3}))
            table_rows.clear()

    for row in c.rows:
        if row.section != section:
            flush()
            section = row.section
        pad = 14 * max(0, len(row.path) - 1)
        table_rows.append(
            [
                f'<span style="padding-left:{pad}px">{_e(row.name)}</span>',
                _e(compare_cell(row.a, row.unit)),
                _e(compare_cell(row.b, row.unit)),
                _e(compare_delta(row)),
            ]
        )
    flush()
    parts.append("</div>")
    return "".join(parts)
