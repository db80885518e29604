"""The device's busy time from the timeline's spans (measured with
:mod:`~xprof_magic._analysis.timeline.intervals`)."""

from __future__ import annotations

import numpy as np

from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._analysis.timeline.intervals import measure, merge

__all__ = ["busy_ns"]


def busy_ns(facts: TraceFacts) -> float | None:
    """How long the device ran executions in the window (None: no execution seen)."""
    pieces = facts.spans.get("device")
    if not pieces:
        return None
    spans = merge(pieces)
    lo, hi = facts.window or (float(spans[0][0]), float(spans[1][-1]))
    return float(measure(spans, np.array([lo]), np.array([hi]))[0])
