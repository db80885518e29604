"""Why the device is idle: what the host was doing while it was, in the profiling guide's words.

The guide reads the device's idle gaps in the trace viewer as input-pipeline bottlenecks or
host-device synchronization. A step's idle device time (its length less the device's busy
time, :attr:`StepBreakdown.busy_s`) is here said by what held the host meanwhile: the
breakdown's host, sync and transfer seconds are idle device time by construction (they take
only instants the device is not busy), and the rest of the idle time is the input's and the
compiles' (which take their instants before the device does), split between them by their
seconds. The cell's thread sampled during the capture (:mod:`.own`) splits the host's part
into the framework's dispatch, the user's own Python and the batches it makes, each at the
cell line holding most of it; the input's part keeps its own split (:attr:`Breakdown.made`:
making batches vs waiting on the loader).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from xprof_magic._analysis.diagnosis.own import MIN_LOOKS, Sampled
from xprof_magic._analysis.model.diagnosis import Breakdown, IdleTime

__all__ = ["MIN_IDLE", "idle_time"]

MIN_IDLE = 0.10
"""The idle share of a step worth saying why."""
_KEPT = 0.05
"""The share of a step a thing the host did while the device idled needs to be named."""


def idle_time(
    basis: Breakdown, found: Sampled | None, steady: Sequence[int], cell_line: int = 0
) -> IdleTime | None:
    """The device's idle time in ``basis``, by what the host did meanwhile.

    None when the device idles under :data:`MIN_IDLE` of the time, or nothing was measured.

    Args:
        basis: a diagnosis's basis: its steady steps, or the cell.
        steady: those steps' positions in the whole breakdown (for the looks).
        cell_line: the loop's line (its ``next()``).
    """
    of_steps = bool(basis.steps)
    total = basis.total_s(of_steps)
    if not basis.categories or total <= 0 or "device" not in basis.categories:
        return None
    busy = sum(s.busy_s for s in basis.steps) if of_steps else basis.busy_s
    idle = max(0.0, total - busy) if busy > 0 or of_steps else basis.total_s(of_steps)
    if idle / total < MIN_IDLE:
        return None
    held = {c: basis.seconds(c, of_steps) for c in ("host", "sync", "transfer")}
    if sum(held.values()) > idle:  # a chip's own copies (outfeed) count as transfer, busy
        held = {c: s * idle / sum(held.values()) for c, s in held.items()}
    rest = max(0.0, idle - sum(held.values()))
    waited = {c: basis.seconds(c, of_steps) for c in ("input", "compile")}
    weight = sum(waited.values())
    for c, s in waited.items():
        held[c] = rest * s / weight if weight > 0 else 0.0
    inputs = held.pop("input")
    # Batches made in the user's Python were host time (the device idle), moved to input.
    making = min(basis.made(of_steps), inputs)
    during: dict[str, tuple[float, int]] = {
        "making batches": (making, _line(found, steady, "batch")),
        "loader": (inputs - making, cell_line),
    }
    during |= _host(held.pop("host"), found, steady)
    during |= {c: (s, 0) for c, s in held.items()}
    named = sorted(
        ((what, round(s / total, 4), line) for what, (s, line) in during.items()),
        key=lambda d: -d[1],
    )
    kept = tuple(d for d in named if d[1] >= _KEPT)
    return IdleTime(round(min(1.0, idle / total), 4), kept)


def _pick(found: Sampled, steady: Sequence[int]) -> np.ndarray:
    return np.isin(found.step, list(steady)) if steady else np.ones(len(found.step), bool)


def _host(
    seconds: float, found: Sampled | None, steady: Sequence[int]
) -> dict[str, tuple[float, int]]:
    """The host's idle seconds split by its sampled looks: the user's own Python, the framework's.

    The user's own leaves out the batches it made, which the breakdown already counts as input.
    """
    if found is None:
        return {"host": (seconds, 0)}
    pick = _pick(found, steady) & found.host & ~found.batches()
    looks = int(pick.sum())
    if looks < MIN_LOOKS:
        return {"host": (seconds, 0)}
    own = float((pick & found.own).sum()) / looks
    return {
        "own code": (seconds * own, _line(found, steady, "own")),
        "framework": (seconds * (1 - own), _line(found, steady, "framework")),
    }


def _line(found: Sampled | None, steady: Sequence[int], whose: str) -> int:
    """The cell line holding most of the looks at ``whose`` work in the steady steps."""
    if found is None:
        return 0
    pick = _pick(found, steady) & found.host & (found.line > 0)
    made = found.batches()
    mask = {
        "batch": pick & made,
        "own": pick & found.own & ~made,
        "framework": pick & ~found.own,
    }[whose]
    if not mask.any():
        return 0
    return int(Counter(found.line[mask].tolist()).most_common(1)[0][0])
