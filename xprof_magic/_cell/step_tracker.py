"""Steps: where they begin and end in a cell, and how they are marked.

IPython- and torch-free, like :mod:`xprof_magic._cell.labels`, which feeds the tracker: the
backend reports syncs and the user's own markers, the rewritten cell its loops. Ownership
runs one way: the tracker splits the label blocks (:class:`LabelBlocks`) at step ends and
asks its step :class:`Window`, if any, which steps are traced; the window starts and stops
the capture's trace. Nothing here calls back into what owns it. The ``--steps`` option's
window, and what the user is told about a run's steps, are :mod:`xprof_magic._cell.step_window`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from xprof_magic._cell.fast_steps import Fast, Run

__all__ = [
    "FAST_AFTER",
    "FAST_BELOW_NS",
    "STEP_EVENT",
    "EventFactory",
    "LabelBlocks",
    "StepTracker",
    "Window",
]

EventFactory = Callable[..., AbstractContextManager[Any]]


class LabelBlocks(Protocol):
    """What the tracker needs of the label recorder: the label blocks open on the timeline."""

    def opened_count(self) -> int: ...

    def split(self, after: int) -> list[Any]: ...

    def resume(self, blocks: list[Any]) -> None: ...

    def clip(self) -> None: ...


STEP_EVENT = "step"

FAST_AFTER = 32
"""Iterations a loop runs with a profiler marker per step before its steps are measured for
:meth:`StepTracker.go_fast` (and again after each as many, while they stay long)."""
FAST_BELOW_NS = 250_000
"""Steps shorter than this (their median) are recorded in Python from then on: a step marker
costs about 4.4 µs a step (XProf's own 2.7 µs and our bookkeeping), 2% of a 250 µs step,
so below this the markers would cost a loop of tiny steps more than the profiler itself
(``python -m bench tiny-steps``)."""


class Window(Protocol):
    """A step window as the tracker asks it: it starts and stops the trace.

    As :class:`xprof_magic._capture.trace_window.TraceWindow`: it starts the trace at its first
    step and stops it after its last; ``str()`` is ``A:B``.
    """

    state: str

    def step_starts(self, number: int) -> bool:
        """Step ``number`` starts; whether it is traced."""

    def is_last(self, number: int) -> bool:
        """Whether step ``number`` is the window's last one."""

    def stop_after(self, number: int) -> None:
        """Step ``number``, the last, has ended: stop the trace."""


@dataclass(slots=True)
class _Open:
    """A step in progress: its number, its start, and its marker while the trace runs."""

    number: int
    start_ns: int
    marker: AbstractContextManager[Any] | None
    traced: bool
    labels_before: int


class StepTracker:
    """Decides where one capture's steps begin and end, and marks them for XProf.

    Three sources report: syncs (the backend's hook), iterations of the loops the rewriter
    chose, and the user's own step markers. The rule is decided once per capture:

    - the user's markers win, whenever they appear: from then on no marker of ours;
    - a sync, once the cell's loop (without one: the cell) has started and before its first
      iteration has ended, makes a step end at each sync that launched work, the next
      starting there: steps tile the loop. A sync that launched nothing (the loader's sync
      right after ``optimizer_step(barrier=True)``) ends no step, so there is no empty step;
    - before the cell's loop has begun its first iteration, no sync ends a step: step 0
      starts where the loop starts and ends at the first sync that launched work after it
      began. MpDeviceLoader's first ``next()`` syncs before it yields the first batch, and
      what that sync launches is whatever the cell's setup, or an earlier cell, left
      pending (tensors computed on the device and never read): that work is the loop's
      start, so it belongs to step 0, and there is one step per batch however much was
      pending and whether or not the runtime had started before. A cell without a
      loop of its own (a loop inside ``train()``) has no such boundary: its first sync
      that launched work ends step 0;
    - otherwise each iteration is a step.
    - an inner loop whose outer loop runs more than it (``for step …: for j …: …`` then
      ``sync()``), with ``defer_nested`` (a backend whose loops sync to end a graph), decides
      the rule at the first sync that launched work or at the end of the outer loop's first
      iteration, not at the end of its own first iteration: a sync in the outer loop then
      makes one step per sync, whatever the inner loop does. When no sync came, the inner
      iterations are steps from the outer loop's second iteration on.

    A profiler event takes its start time when it opens, so a step's marker opens where the
    step starts, and while the rule is undecided both candidates are open. An event is
    recorded only when it closes while the trace runs: a candidate that lost, or the step
    still open when the cell ends, is held open until the trace has stopped (``release``)
    and never reaches the timeline.

    A step that ends at a sync ends inside whatever label block holds the sync. XProf finds
    steps only when events nest on a timeline row (verified: with a label around the sync,
    the overview found no steps), so the blocks the step opened and that are still open
    are closed at the step's end and reopened, under the same names, in the next step; a
    reopened piece carries ``continued=1``, for readers that count entries.

    With a ``window``, only the steps inside it are traced and marked; the window starts and
    stops the trace; counting goes on to the cell's end.

    A loop of tiny steps cannot afford a profiler marker per step (about 4.4 µs a step, most
    of it XProf's own). Once a loop's iterations are the steps and they are measured short
    (:meth:`go_fast`), nothing runs per step where the loop's iterator can say how far it is
    (a built-in sequence's or a ``range``'s): the line sampler's looks read it
    (:meth:`look`), and :meth:`fast_done` reads it at the loop's end, so the count is exact
    and the steps' times are spread between the looks (:meth:`spread` says which). Elsewhere
    (a dict) its iterator appends each step's start to a list, nothing more, and
    :meth:`fast_done` turns the list into steps when the loop ends; the capture writes them
    into the saved timeline afterwards (:meth:`python_steps`,
    :mod:`xprof_magic._capture.step_events`), so the run holds every step as if marked.
    """

    def __init__(
        self,
        make_event: EventFactory,
        labels: LabelBlocks | None = None,
        *,
        watch_syncs: bool = False,
        window: Window | None = None,
        defer_nested: bool = False,
    ) -> None:
        self._make_event = make_event
        self._labels = labels
        self.watch_syncs = watch_syncs
        self.defer_nested = defer_nested and watch_syncs
        self.window = window
        self.rule: str | None = None
        self.first: int | None = None
        self.last: int | None = None
        self._ended = 0
        self._lock = threading.RLock()
        self._armed = False
        self._by_loop = False
        self._iterated = False
        self._sync: _Open | None = None
        self._iter: _Open | None = None
        self._user: _Open | None = None
        self._user_depth = 0
        self._kept: list[AbstractContextManager[Any]] = []
        self._durations: list[int] = []
        self._fast: Fast | None = None
        self._runs: list[Run] = []

    @property
    def ended(self) -> int:
        """How many steps have ended (or, in a loop recorded in Python, started)."""
        fast = self._fast
        if fast is not None and not fast.done:
            return fast.first + fast.started()
        return self._ended

    @ended.setter
    def ended(self, value: int) -> None:
        self._ended = value

    @property
    def fast(self) -> bool:
        """Whether a loop's steps are being recorded in Python now (:meth:`go_fast`)."""
        fast = self._fast
        return fast is not None and not fast.done

    def look(self) -> int:
        """:attr:`ended`, as the line sampler's thread reads it at each look.

        In a loop whose steps are counted (:meth:`go_fast` with ``taken``), the look is kept:
        when, and how many of its steps had started, between which its steps are spread.
        """
        fast = self._fast
        if fast is None or fast.done or fast.taken is None:
            return self.ended
        with self._lock:
            fast = self._fast
            if fast is None or fast.done or fast.looks is None:
                return self.ended
            started = fast.started()
            fast.looks.append((time.time_ns(), started))
            return fast.first + started

    def spread(self) -> list[tuple[int, int, list[tuple[float, int]]]]:
        """The steps recorded in Python whose times are spread between the sampler's looks.

        Each a range of step numbers, first and end (exclusive), and where its steps are known to
        have been (:func:`~xprof_magic._cell.fast_steps.knots`: steps started since the first,
        wall-clock ns): such a loop counted its steps and read no clock per step
        (:meth:`go_fast`).
        """
        with self._lock:
            found: list[tuple[int, int, list[tuple[float, int]]]] = []
            for run in self._runs:
                if run.looks is not None:
                    count = len(run.bounds()[0])
                    if count:
                        found.append((run.first, run.first + count, run.knots()))
            return found

    def python_steps(self) -> list[tuple[int, int, int]]:
        """The steps recorded in Python, with no marker on the timeline.

        Each one's number, start and end (wall-clock ns).
        """
        with self._lock:
            return self._steps_ns()

    def go_fast(self, taken: Callable[[], int] | None = None) -> list[int] | None:
        """Between two iterations, the list to append each next step's start to, or None.

        Called for a loop whose iterations are the steps; the starts are wall-clock ns. The list is
        given when the steps so far are short and nothing needs a marker per step (no window, no
        marker of the user's open).

        ``taken``: how many items the loop's iterator has given so far, read without touching it
        (a built-in container's). The loop then appends nothing: its steps are counted, their
        number read at the loop's end, their times spread between the looks of the line sampler
        (:meth:`look`), or evenly over the loop without one.
        """
        with self._lock:
            if (
                self.rule != "iteration"
                or self.window is not None
                or self._iter is not None
                or self._user_depth
                or (self._fast is not None and not self._fast.done)
                or len(self._durations) < FAST_AFTER
            ):
                return None
            recent = sorted(self._durations[-FAST_AFTER:])
            if recent[len(recent) // 2] >= FAST_BELOW_NS:
                return None
            fast = Fast(self._ended, [])
            if taken is not None:
                try:
                    fast.base, fast.taken, fast.looks = taken(), taken, []
                except Exception:  # it cannot say where it is: the loop keeps its markers
                    return None
                fast.start_ns = time.time_ns()
            self._fast = fast
            return fast.stamps

    def fast_done(self, end_ns: int | None) -> None:
        """The loop recorded in Python has ended at ``end_ns`` (wall-clock ns), its last step too.

        None: the last step was still running, so it is no step. Constant time, in the cell's own
        time: the steps are made from the starts when asked for.
        """
        with self._lock:
            fast = self._fast
            if fast is None or fast.done:
                return
            try:
                held = fast.started()  # a user's marker: the loop goes on, read it now
            except Exception:  # a count unknown: no step of this loop's fast part
                held = 0
            fast.done = True
            count = held if end_ns is not None else max(held - 1, 0)
            looks, fast.taken = fast.looks, None  # the container is the cell's to free
            if not count:
                return
            run = Run(len(self._durations), fast.first, fast.stamps, held, end_ns)
            if looks is not None:
                run.looks, run.start_ns = looks, fast.start_ns
                run.stop_ns = time.time_ns() if end_ns is None else end_ns
            self._runs.append(run)
            if self.first is None:
                self.first = fast.first
            self.last = fast.first + count - 1
            self._ended = fast.first + count

    def _steps_ns(self) -> list[tuple[int, int, int]]:
        """Each step recorded in Python: its number, start and end (wall-clock ns)."""
        found: list[tuple[int, int, int]] = []
        for run in self._runs:
            starts, ends = run.bounds()
            found.extend(
                (run.first + k, start, max(end, start))
                for k, (start, end) in enumerate(zip(starts, ends, strict=False))
            )
        return found

    def _all_ns(self) -> list[int]:
        """Each step's host time (ns), marked ones and those recorded in Python, in order."""
        out: list[int] = []
        at = 0
        for run in self._runs:
            out.extend(self._durations[at : run.position])
            at = run.position
            starts, ends = run.bounds()
            out.extend(max(end - start, 0) for start, end in zip(starts, ends, strict=False))
        out.extend(self._durations[at:])
        return out

    @property
    def state(self) -> str:
        """Where the cell is relative to the window: ``inside`` when there is none."""
        return "inside" if self.window is None else self.window.state

    def durations(self) -> list[float]:
        """Host time of each step in the trace, in seconds."""
        with self._lock:
            return [ns / 1e9 for ns in self._all_ns()]

    def arm(self, by_loop: bool = False) -> None:
        """The first step starts now: at the cell's loop (``by_loop``), or the cell."""
        with self._lock:
            if self._armed or (self._by_loop and not by_loop):
                return
            self._armed = True
            if self.rule is None and self.watch_syncs:
                self._sync = self._begin(self._ended)

    def disarm(self) -> None:
        """The cell has loops: the first step starts at the first of them, not here."""
        with self._lock:
            if self._by_loop or self.rule is not None or self._ended:
                return
            self._by_loop = True
            self._armed = False
            self._drop(self._sync)
            self._sync = None

    def outer_label(self) -> None:
        """A block opened at the cell's top level.

        While no step has ended, the first step starts inside it, so that a block like ``train(60)``
        holds the steps.
        """
        with self._lock:
            if self._by_loop or self.rule not in (None, "sync") or self._ended:
                return
            if self._sync is not None:
                self._drop(self._sync)
                self._sync = self._begin(self._ended)

    def synced(self, launched: bool) -> None:
        """A sync ran; ``launched``: it launched device work."""
        with self._lock:
            if not self.watch_syncs or not self._armed or self.rule == "user":
                return
            if self.rule is None:
                self.rule = "sync"
                self._drop(self._iter)
                self._iter = None
            current = self._sync
            if self.rule != "sync" or not launched or current is None:
                return
            if self._by_loop and not self._iterated:
                return
            labels = self._labels
            pieces = [] if labels is None else labels.split(current.labels_before)
            self._end(current)
            self._sync = self._begin(self._ended)
            if labels is not None:
                labels.resume(pieces)

    def iteration_started(self, deferred: bool = False) -> None:
        """An iteration of an innermost loop begins.

        ``deferred``: the loop sits in an outer loop that runs more than it (see the class's
        docstring).
        """
        if self.rule == "iteration" and self._iter is None and self.window is None:
            # The steady state of a loop whose iterations are the steps: nothing but the
            # user's own marker, on this thread, changes the rule now. _begin, inlined.
            number = self._ended
            marker: AbstractContextManager[Any] | None = None
            try:
                made = self._make_event(STEP_EVENT, _r=1, step_num=number)
                made.__enter__()
                marker = made
            except Exception:
                marker = None
            self._iter = _Open(number, time.perf_counter_ns(), marker, True, 0)
            return
        with self._lock:
            self._iterated = True
            if deferred and self.defer_nested and self.rule is None:
                if not self._armed:
                    self.arm(by_loop=self._by_loop)
                return
            if self.rule not in (None, "iteration") or self._iter is not None:
                return
            if not self._armed:
                self.arm(by_loop=self._by_loop)
            self._iter = self._begin(self._ended)

    def iteration_ended(self) -> None:
        if self.rule == "iteration" and self.window is None:
            current, self._iter = self._iter, None
            if current is not None:
                self._end(current)
            return
        with self._lock:
            current, self._iter = self._iter, None
            if current is None:
                return
            if self.rule is None:
                self.rule = "iteration"
                self._drop(self._sync)
                self._sync = None
            self._end(current)

    def outer_iteration_ended(self) -> None:
        """An iteration of an outer loop holding a deferred inner loop ended.

        Without a sync so far, the inner loop's iterations are the steps.
        """
        with self._lock:
            if self.defer_nested and self.rule is None and self._iterated:
                self.rule = "iteration"
                self._drop(self._sync)
                self._sync = None

    def user_step(self, begin: bool, mark: bool = False) -> None:
        """The user's own step marker begins or ends; ``mark``: we draw it for them."""
        with self._lock:
            if not begin:
                if self._user_depth == 0:
                    return
                self._user_depth -= 1
                current = self._user
                if self._user_depth == 0 and current is not None:
                    self._user = None
                    self._end(current)
                return
            self._user_depth += 1
            if self._user_depth > 1:
                return
            self.fast_done(None)
            if self.rule != "user":
                self.rule = "user"
                self._drop(self._sync)
                self._drop(self._iter)
                self._sync = self._iter = None
            self._user = self._begin(self._ended, mark=mark)

    def finish(self) -> None:
        """The cell ended: a step still open is no step."""
        with self._lock:
            self.fast_done(None)
            for current in (self._sync, self._iter, self._user):
                self._drop(current)
            self._sync = self._iter = self._user = None
            self._armed = False

    def release(self) -> None:
        """The trace has stopped: the markers held open can go."""
        with self._lock:
            self._kept.clear()

    def _begin(self, number: int, mark: bool = True) -> _Open:
        window = self.window
        traced = True if window is None else window.step_starts(number)
        marker: AbstractContextManager[Any] | None = None
        if traced and mark:
            try:
                marker = self._make_event(STEP_EVENT, _r=1, step_num=number)
                marker.__enter__()
            except Exception:
                marker = None
        # Only a sync splits the labels open at a step's start (:meth:`synced`).
        labels = self._labels if self.rule != "iteration" else None
        opened = 0 if labels is None else labels.opened_count()
        return _Open(number, time.perf_counter_ns(), marker, traced, opened)

    def _end(self, step: _Open) -> None:
        elapsed = time.perf_counter_ns() - step.start_ns
        if step.marker is not None:
            _close(step.marker)
        self._ended = step.number + 1
        window = self.window
        if not step.traced or (window is not None and window.state != "inside"):
            return
        self._durations.append(elapsed)
        if self.first is None:
            self.first = step.number
        self.last = step.number
        if window is not None and window.is_last(step.number):
            if self._labels is not None:
                self._labels.clip()
            window.stop_after(step.number)
            self.release()

    def _drop(self, step: _Open | None) -> None:
        if step is not None and step.marker is not None:
            self._kept.append(step.marker)


def _close(marker: AbstractContextManager[Any]) -> None:
    """Close a step's marker; a profiler that fails to is no error of the cell's."""
    try:
        marker.__exit__(None, None, None)
    except Exception:
        return
