"""The render stage's words as each form shows them: the code a verdict or a note quotes (the
cell's line, a program) is code in the HTML and plain in the text, never a literal backtick."""

from __future__ import annotations

from xprof_magic._analysis import render_html, render_text
from xprof_magic._analysis.model.summary import Flaw, Summary

VERDICT = (
    "Host-bound: 61% of each step is Python on the host (`optimizer.step()`, line 9); "
    "move it out of the loop (`x < y & z`)."
)


def summary() -> Summary:
    return Summary(run="prose", run_dir="/tmp/prose", warnings=(Flaw("capture message", VERDICT),))


def test_code_in_a_note_is_code_in_html() -> None:
    page = render_html(summary())
    assert "`" not in page, page
    assert "(<code>optimizer.step()</code>, line 9)" in page
    assert "<code>x &lt; y &amp; z</code>" in page  # escaped first, as all of the cell's text


def test_code_in_a_note_is_plain_in_text() -> None:
    text = render_text(summary())
    assert "`" not in text, text
    assert "is Python on the host (optimizer.step(), line 9); move it" in text
