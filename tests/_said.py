"""A summary's verdict as the tests read it: its diagnosis's figures with the render stage's
words (the summary holds no words; :func:`~xprof_magic._analysis.render.headline.said` makes
them when it is shown)."""

from __future__ import annotations

from typing import Any

from xprof_magic._analysis.render.headline import said
from xprof_magic._analysis.render.notes import notes_of

__all__ = ["notes_of", "said", "worded"]

WORDS = ("headline", "fix", "evidence")


class Worded:
    """``summary.diagnosis``'s fields, and ``headline``, ``fix`` and ``evidence`` in words."""

    def __init__(self, summary: Any) -> None:
        self.summary = summary
        self.diagnosis = summary.diagnosis
        self.said = said(summary)

    def __repr__(self) -> str:
        return f"{self.said!r} of {self.diagnosis!r}"

    def __getattr__(self, name: str) -> Any:
        if name in WORDS:
            return getattr(self.said, name)
        return getattr(self.diagnosis, name)


def worded(summary: Any) -> Any:
    """The verdict of ``summary`` with its words (typed loosely, as a diagnosis is read)."""
    return Worded(summary)
