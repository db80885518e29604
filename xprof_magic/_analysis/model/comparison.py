"""Two runs side by side, as plain frozen dataclasses: the rows, and what differs in kind.

:func:`~xprof_magic._analysis.diagnosis.compare.compare` fills a :class:`Comparison`; the
render stage words it (:mod:`~xprof_magic._analysis.render.comparison_words`), and a comparison
displays itself as that text and HTML, which the render stage registers for it
(:mod:`~xprof_magic._analysis.model.display`): the model imports no renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xprof_magic._analysis.model import display
from xprof_magic._analysis.model.diagnosis import Gain
from xprof_magic._analysis.model.summary import Gap

__all__ = ["CompareRow", "Comparison"]


@dataclass(frozen=True)
class CompareRow:
    """One quantity in two runs; ``unit`` is ``s``, ``bytes``, ``count`` or ``text``.

    Label rows carry their ``path``; ``name`` is its last element.
    """

    section: str
    name: str
    a: float | str | None
    b: float | str | None
    unit: str
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Two summaries side by side: runs ``a`` and ``b``, their ``rows``, and what differs in kind.

    - ``verdicts``: each run's verdict and its share (None where it has none), A's first; empty when
      neither run has a diagnosis;
    - ``moves``: ``(category, share in A, share in B)`` of each category whose share of step time
      moved by at least 5 points, largest move first;
    - ``devices``: the two runs' device kinds;
    - ``incomplete``: ``("A" or "B", the first thing missing from it)`` per incomplete run;
    - ``predicted``: A's estimate of what removing its verdict's time would gain (None for a healthy
      ``device`` or ``unknown`` A, one saved without it, or a B whose share of that category did not
      fall by 5 points: no fix to measure), and ``step_s``: the two runs' mean steps as that
      estimate measures them, so that B, the same cell after the fix, is the measured result
      (:attr:`measured`).
    """

    a: str
    b: str
    rows: tuple[CompareRow, ...]
    verdicts: tuple[tuple[str, float | None], ...] = ()
    moves: tuple[tuple[str, float, float], ...] = ()
    devices: tuple[str, str] = ("", "")
    incomplete: tuple[tuple[str, Gap], ...] = ()
    predicted: Gain | None = None
    step_s: tuple[float, float] | None = None

    @property
    def measured(self) -> float | None:
        """How many times faster B's mean step is than A's (None: either is unknown)."""
        if self.step_s is None or self.step_s[1] <= 0:
            return None
        return self.step_s[0] / self.step_s[1]

    @property
    def notes(self) -> tuple[str, ...]:
        """What differs in kind, in words: the diagnoses, the devices, incomplete runs."""
        return display.notes(self)

    def text(self) -> str:
        """The side-by-side table as plain text."""
        return display.text(self)

    def html(self) -> str:
        """The side-by-side table as static, self-contained HTML."""
        return display.html(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """``text/plain`` and static ``text/html``, for IPython's display of a cell's value."""
        return {"text/plain": self.text(), "text/html": self.html()}

    def __str__(self) -> str:
        return self.text()
