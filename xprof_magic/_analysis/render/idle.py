"""The device's idle time in words: what the host did while the device waited.

``the device is busy 20%, idle 80% of each step while the host makes batches in your
Python at line 3``: the diagnosis's :class:`~xprof_magic._analysis.model.diagnosis.IdleTime`
(:mod:`~xprof_magic._analysis.diagnosis.idle`), its largest part and, when another holds a
fifth of the idle time or more, the second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xprof_magic._analysis.model.diagnosis import Diagnosis

__all__ = ["DURING", "idle_words"]

DURING = {
    "making batches": "the host makes batches in your Python",
    "loader": "the host waits on the data iterator",
    "own code": "the host runs your Python",
    "printing": "the host prints",
    "framework": "the host runs the framework's dispatch and graph building",
    "sync": "the host waits on a sync with the device",
    "transfer": "data is copied between host and device",
    "compile": "the host compiles",
    "host": "the host runs Python and the framework",
}
"""What the host did while the device idled, by :attr:`IdleTime.during`'s ``what``."""
_SECOND = 0.2
"""The part of the idle time a second thing needs to be said too."""


def _percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else "<1%"


def idle_words(d: Diagnosis, each: str) -> str:
    """How long the device idles, and what the host did meanwhile; "" if too little to say.

    ``idle 80% of each step while the host makes batches in your Python at line 3`` (``each``: what
    the shares are of); with two things, each with its share
    (``idle 61% of each step: while … (34%), and while … (27%)``).
    """
    idle = d.idle
    if idle is None or not idle.during:
        return ""
    said = []
    for at, (what, share, line) in enumerate(idle.during[:2]):
        if at and round(share / idle.share, 2) < _SECOND:
            break
        where = f" at line {line}" if line else ""
        if d.cause == "printing" and line == d.line and what in ("own code", "framework"):
            what = "printing"
        said.append((f"while {DURING.get(what, what)}{where}", share))
    if len(said) == 1 and said[0][1] >= 0.8 * idle.share:
        return f"idle {_percent(idle.share)} {each} {said[0][0]}"
    parts = ", and ".join(f"{text} ({_percent(share)})" for text, share in said)
    return f"idle {_percent(idle.share)} {each}: {parts}"
