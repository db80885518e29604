"""The ``--steps`` option: its step window, and what the user is told about a run's steps.

``--steps`` parses here into whether to mark steps and which window to trace
(:class:`StepWindow`), before anything runs; once the cell has ended, the
:class:`~xprof_magic._cell.step_tracker.StepTracker`'s outcome is said here too (a window that never
started, a cell that ended inside it), and a run's steps in one line for its result.
IPython- and torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xprof_magic._cell.step_tracker import StepTracker

__all__ = ["STEP_RULES", "StepWindow", "end_messages", "never_started", "parse_steps", "steps_line"]

STEP_RULES = {
    "sync": "a step ends at each sync",
    "iteration": "a step is one iteration of the cell's loop",
    "user": "the steps your code marks",
}


@dataclass(frozen=True)
class StepWindow:
    """Steps ``start`` to ``stop - 1`` of the cell, numbered from 0; no ``stop``: to the end."""

    start: int = 0
    stop: int | None = None

    def __str__(self) -> str:
        return f"{self.start}:{'' if self.stop is None else self.stop}"


_WINDOW = re.compile(r"\s*(?P<start>-?\d*)\s*:\s*(?P<stop>-?\d*)\s*")


def parse_steps(value: bool | str | None) -> tuple[bool, StepWindow | None]:
    """``--steps`` as given: absent/False, plain (True or ``""``), or a window ``A:B``.

    Returns whether to mark steps, and the window to trace. Raises ``ValueError`` with a
    one-line reason for anything else.
    """
    if value is None or value is False:
        return False, None
    if value is True or (isinstance(value, str) and not value.strip()):
        return True, None
    if not isinstance(value, str):
        raise ValueError(f"steps={value!r}: give True or a window 'A:B', e.g. '10:13'")
    match = _WINDOW.fullmatch(value)
    if match is None:
        raise ValueError(
            f"{value!r} is not a step window; write A:B for steps A to B-1 (numbered from 0 "
            "in the cell), A: or :B, e.g. 10:13"
        )
    start_text, stop_text = match["start"], match["stop"]
    if start_text.startswith("-") or stop_text.startswith("-"):
        raise ValueError(
            f"{value}: steps are numbered from 0 in the cell, so a window cannot hold negative "
            "numbers; e.g. 10:13 traces steps 10, 11 and 12"
        )
    start = int(start_text) if start_text else 0
    stop = int(stop_text) if stop_text else None
    if stop is not None and stop <= start:
        raise ValueError(
            f"{value} holds no step: B must be greater than A (A:B traces steps A to B-1)"
        )
    return True, StepWindow(start, stop)


def steps_line(count: int, rule: str | None, window: str | None, first: int | None) -> str:
    """Which steps the run holds and how they were found.

    E.g. ``3 steps (100 to 102 of the cell, --steps 100:103; a step ends at each sync)``.
    """
    if not count:
        return ""
    how = STEP_RULES.get(rule or "", "")
    if window is None or first is None:
        span = "" if not how else f" ({how})"
        noun = "step" if count == 1 else "steps"
        return f"{count} {noun}{span}"
    noun = "step" if count == 1 else "steps"
    which = f"{first}" if count == 1 else f"{first} to {first + count - 1}"
    how = f"; {how}" if how else ""
    return f"{count} {noun} ({which} of the cell, --steps {window}{how})"


def end_messages(tracker: StepTracker, marking: bool, no_steps: str) -> list[str]:
    """What the user should know about the steps when the cell has ended.

    ``no_steps`` (the backend's words) says why none was found and how to mark them.
    """
    window = tracker.window
    if window is None:
        if marking and not tracker.durations():
            return [f"--steps found no step to mark: {no_steps}"]
        return []
    if tracker.state == "before":
        return [never_started(tracker)]
    if tracker.state == "inside":
        held = "none" if tracker.last is None else f"{tracker.first} to {tracker.last}"
        return [f"the cell ended inside the window --steps {window}: the run holds steps {held}"]
    return []


def never_started(tracker: StepTracker) -> str:
    """Why a step window left no run, and what to do."""
    window = tracker.window
    ran = "no step" if not tracker.ended else f"{tracker.ended} steps"
    if tracker.ended == 1:
        ran = "1 step"
    hint = (
        f"choose a window within steps 0 to {tracker.ended - 1}"
        if tracker.ended
        else "the cell neither synced nor ran a loop; run plain --steps to see its steps"
    )
    return f"the cell ran {ran}; --steps {window} never started, so nothing was stored; {hint}"
