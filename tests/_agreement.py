"""One number per thing: every figure a summary prints about a block or a step, checked
against its one source (the labels' rows, the steps' spans) wherever it is printed: the
verdict, the labels table, the steps' line, the chart's bars and the text under the cell."""

from __future__ import annotations

import re
import statistics

from tests._said import worded
from xprof_magic._analysis import Summary
from xprof_magic._analysis.render.html import render_html
from xprof_magic._analysis.render.text import render_text, steps_line
from xprof_magic._analysis.summary.blocks import line_of
from xprof_magic._units import seconds

__all__ = ["figures_agree"]

_FIGURE = r"([0-9.]+ (?:µs|ms|s))"


def figures_agree(s: Summary, under_cell: str = "") -> None:
    """Each block the verdict names has its labels row's time and the cell line the summary
    numbers it by, printed the same in the text's table, the HTML and ``under_cell`` (the
    text the magic printed); each step named apart has its bar's time; the steps' line and
    the chart's bars are the steps' own times."""
    d = worded(s)
    text, page = render_text(s), render_html(s)
    rows = {r.path[-1]: r for r in s.labels}
    named = re.findall(rf"`([^`]+)` \(line (\d+)\) took {_FIGURE}", d.headline)
    for name, line, figure in named:
        row = rows[name]
        assert figure == seconds(row.total_s), (name, figure, row)
        assert int(line) == line_of(s.cell, row.path), (name, line)
        assert any(name in t and figure in t for t in text.splitlines()), (name, figure, text)
        assert figure in page
        if under_cell:
            shown = [t for t in under_cell.splitlines() if t.rstrip().endswith(name)]
            assert shown and all(figure in t for t in shown), (name, figure, shown)
    st = s.steps
    if st is None:
        return
    said = steps_line(st)
    assert f"first {seconds(st.durations_s[0])}" in said, said
    if len(st.durations_s) > 1:
        assert f"median {seconds(statistics.median(st.durations_s[1:]))}" in said, said
    bars = d.breakdown.steps
    assert [round(b.total_s, 9) for b in bars] == [round(x, 9) for x in st.durations_s[: len(bars)]]
    for number, figure in re.findall(rf"step (\d+) \({_FIGURE}", d.headline):
        bar = next(b for b in bars if b.step == int(number))
        assert figure == seconds(bar.total_s), (number, figure, bar)
