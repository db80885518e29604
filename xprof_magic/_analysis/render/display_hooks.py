"""The render stage's text and HTML, registered as how the model's objects show themselves.

The model does not import the render stage (:mod:`xprof_magic._analysis.model.display`):
:func:`register` tells it, once, that a :class:`Summary` shows as :func:`render_text` and
:func:`render_html`, and a :class:`Comparison` as its side-by-side table and notes.
:mod:`xprof_magic._analysis` calls it when it is imported.
"""

from __future__ import annotations

from xprof_magic._analysis.model import display
from xprof_magic._analysis.model.comparison import Comparison
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._analysis.render.comparison_words import (
    comparison_html,
    comparison_notes,
    comparison_text,
)
from xprof_magic._analysis.render.html import render_html
from xprof_magic._analysis.render.text import render_text

__all__ = ["register"]


def register() -> None:
    """Make the render stage's renderers how a summary and a comparison show themselves.

    Calling it again changes nothing.
    """
    display.text.register(Summary, render_text)
    display.html.register(Summary, render_html)
    display.text.register(Comparison, comparison_text)
    display.html.register(Comparison, comparison_html)
    display.notes.register(Comparison, comparison_notes)
