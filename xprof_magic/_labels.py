"""What rewritten cells call at run time: labels, steps and the kept final value.

The rewritten code reaches this module through ``__import__``, so it must stay cheap to
import and free of torch: the backend hands in its event factory when a capture starts.
Outside a capture every call is a no-op, so functions defined in a profiled cell keep
working anywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = [
    "STEP_EVENT",
    "STEP_RULES",
    "LabelStat",
    "Recorder",
    "StepTracker",
    "StepWindow",
    "iteration",
    "keep",
    "label",
    "loop",
    "loops_ahead",
    "recording",
    "step",
]

EventFactory = Callable[..., AbstractContextManager[Any]]


@dataclass(frozen=True)
class LabelStat:
    """Host time spent in one labelled block, summed over its entries."""

    path: tuple[str, ...]
    count: int
    total_s: float

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "count": self.count, "total_s": self.total_s}


STEP_EVENT = "step"
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


@dataclass
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
      starting there: steps tile the loop. A sync that launched nothing (MpDeviceLoader's
      first ``next()``, or the loader's sync right after ``optimizer_step(barrier=True)``)
      ends no step, so there is no empty step;
    - otherwise each iteration is a step.

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

    With a window, ``start_trace`` is called where step ``window.start`` starts and
    ``stop_trace`` where step ``window.stop - 1`` ends; counting goes on to the cell's end.
    """

    def __init__(
        self,
        make_event: EventFactory,
        *,
        watch_syncs: bool = False,
        window: StepWindow | None = None,
        start_trace: Callable[[], bool] | None = None,
        stop_trace: Callable[[], None] | None = None,
    ) -> None:
        self._make_event = make_event
        self.watch_syncs = watch_syncs
        self.window = window
        self._start_trace = start_trace
        self._stop_trace = stop_trace
        self.rule: str | None = None
        self.state = "inside" if window is None else "before"
        self.first: int | None = None
        self.last: int | None = None
        self.ended = 0
        self.recorder: Recorder | None = None
        self._lock = threading.RLock()
        self._armed = False
        self._by_loop = False
        self._sync: _Open | None = None
        self._iter: _Open | None = None
        self._user: _Open | None = None
        self._user_depth = 0
        self._kept: list[AbstractContextManager[Any]] = []
        self._durations: list[int] = []

    def durations(self) -> list[float]:
        """Host time of each step in the trace, in seconds."""
        with self._lock:
            return [ns / 1e9 for ns in self._durations]

    def arm(self, by_loop: bool = False) -> None:
        """The first step starts now: at the cell's loop (``by_loop``), or the cell."""
        with self._lock:
            if self._armed or (self._by_loop and not by_loop):
                return
            self._armed = True
            if self.rule is None and self.watch_syncs:
                self._sync = self._begin(self.ended)

    def disarm(self) -> None:
        """The cell has loops: the first step starts at the first of them, not here."""
        with self._lock:
            if self._by_loop or self.rule is not None or self.ended:
                return
            self._by_loop = True
            self._armed = False
            self._drop(self._sync)
            self._sync = None

    def outer_label(self) -> None:
        """A block opened at the cell's top level: while no step has ended, the first step
        starts inside it, so that a block like ``train(60)`` holds the steps."""
        with self._lock:
            if self._by_loop or self.rule not in (None, "sync") or self.ended:
                return
            if self._sync is not None:
                self._drop(self._sync)
                self._sync = self._begin(self.ended)

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
            recorder = self.recorder
            pieces = [] if recorder is None else recorder.split(current.labels_before)
            self._end(current)
            self._sync = self._begin(self.ended)
            if recorder is not None:
                recorder.resume(pieces)

    def iteration_started(self) -> None:
        with self._lock:
            if self.rule not in (None, "iteration") or self._iter is not None:
                return
            if not self._armed:
                self.arm(by_loop=self._by_loop)
            self._iter = self._begin(self.ended)

    def iteration_ended(self) -> None:
        with self._lock:
            current, self._iter = self._iter, None
            if current is None:
                return
            if self.rule is None:
                self.rule = "iteration"
                self._drop(self._sync)
                self._sync = None
            self._end(current)

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
            if self.rule != "user":
                self.rule = "user"
                self._drop(self._sync)
                self._drop(self._iter)
                self._sync = self._iter = None
            self._user = self._begin(self.ended, mark=mark)

    def finish(self) -> None:
        """The cell ended: a step still open is no step."""
        with self._lock:
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
        if window is not None and self.state == "before" and number >= window.start:
            started = self._start_trace() if self._start_trace is not None else True
            self.state = "inside" if started else "failed"
        traced = self.state == "inside"
        marker: AbstractContextManager[Any] | None = None
        if traced and mark:
            try:
                marker = self._make_event(STEP_EVENT, _r=1, step_num=number)
                marker.__enter__()
            except Exception:
                marker = None
        labels = 0 if self.recorder is None else self.recorder.opened_count()
        return _Open(number, time.perf_counter_ns(), marker, traced, labels)

    def _end(self, step: _Open) -> None:
        elapsed = time.perf_counter_ns() - step.start_ns
        if step.marker is not None:
            with contextlib.suppress(Exception):
                step.marker.__exit__(None, None, None)
        self.ended = step.number + 1
        if not step.traced or self.state != "inside":
            return
        self._durations.append(elapsed)
        if self.first is None:
            self.first = step.number
        self.last = step.number
        window = self.window
        if window is not None and window.stop is not None and step.number >= window.stop - 1:
            self.state = "after"
            if self.recorder is not None:
                self.recorder.clip()
            if self._stop_trace is not None:
                self._stop_trace()

    def _drop(self, step: _Open | None) -> None:
        if step is not None and step.marker is not None:
            self._kept.append(step.marker)


class Recorder:
    """Collects one capture's label times, steps and final value."""

    def __init__(self, make_event: EventFactory, tracker: StepTracker | None = None) -> None:
        self.make_event = make_event
        self.tracker = tracker if tracker is not None else StepTracker(make_event)
        self.tracker.recorder = self
        self.tracing = True
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], list[int]] = {}
        self._opened = 0
        self._open: dict[int, _Block] = {}
        self.value: Any = None
        self.has_value = False

    def add(self, path: tuple[str, ...], elapsed_ns: int) -> None:
        with self._lock:
            entry = self._totals.setdefault(path, [0, 0])
            entry[0] += 1
            entry[1] += elapsed_ns

    def opened(self, block: _Block) -> int:
        """Number a traced block as it opens (1, 2, ...)."""
        with self._lock:
            self._opened += 1
            self._open[self._opened] = block
            return self._opened

    def closed(self, number: int) -> None:
        with self._lock:
            self._open.pop(number, None)

    def opened_count(self) -> int:
        with self._lock:
            return self._opened

    def split(self, after: int) -> list[_Block]:
        """Close the events of this thread's open blocks numbered above ``after``, innermost
        first; return them, outermost first, for :meth:`resume`."""
        me = threading.get_ident()
        with self._lock:
            blocks = [b for n, b in sorted(self._open.items()) if n > after and b.thread == me]
        for block in reversed(blocks):
            block.close_event()
        return blocks

    def resume(self, blocks: list[_Block]) -> None:
        """Reopen the events of split blocks, outermost first, as blocks opened now."""
        for block in blocks:
            with self._lock:
                self._open.pop(block.number, None)
                self._opened += 1
                self._open[self._opened] = block
                block.number = self._opened
            block.open_event(continued=1)

    def clip(self) -> None:
        """The trace stops now: the open blocks it holds count up to here, and no further."""
        with self._lock:
            blocks = list(self._open.values())
            self._open.clear()
        for block in blocks:
            block.clip()

    def labels(self) -> list[LabelStat]:
        """Label totals, in the order the blocks were first entered."""
        with self._lock:
            return [LabelStat(p, c, t / 1e9) for p, (c, t) in self._totals.items()]

    def steps(self) -> list[float]:
        """Host time of each step the trace holds, in seconds."""
        return self.tracker.durations()


_active: Recorder | None = None
_path: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "xprof_magic_label_path", default=()
)


@contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Make ``recorder`` receive every label until the block ends."""
    global _active
    previous, _active = _active, recorder
    token = _path.set(())
    try:
        yield recorder
    finally:
        _active = previous
        with contextlib.suppress(ValueError, RuntimeError):
            _path.reset(token)


class _Block:
    """One entry into a labelled block.

    The enclosing labels live in a context variable, so each asyncio task and each thread
    nests its own blocks; a generator suspended inside a block and resumed elsewhere cannot
    corrupt later blocks beyond its own statement; and a block never raises into user code.
    Its time counts only when the trace ran from its entry to its exit, so that a step
    window's summary holds the blocks its timeline holds.
    """

    __slots__ = (
        "_event",
        "_live",
        "_name",
        "_path",
        "_recorder",
        "_start",
        "_token",
        "number",
        "thread",
    )

    def __init__(self, recorder: Recorder, name: str) -> None:
        self._recorder = recorder
        self._name = name
        self._event: AbstractContextManager[Any] | None = None
        self._token: contextvars.Token[tuple[str, ...]] | None = None
        self._path: tuple[str, ...] = (name,)
        self._start = 0
        self._live = False
        self.number = 0
        self.thread = 0

    def __enter__(self) -> None:
        self.open_event()
        outer = not _path.get()
        self._path = (*_path.get(), self._name)
        self._token = _path.set(self._path)
        self._live = self._recorder.tracing
        if self._live:
            self.thread = threading.get_ident()
            self.number = self._recorder.opened(self)
        if outer:
            with contextlib.suppress(Exception):
                self._recorder.tracker.outer_label()
        self._start = time.perf_counter_ns()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter_ns() - self._start
        if self._live and self._recorder.tracing:
            self._recorder.add(self._path, elapsed)
        if self._token is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                _path.reset(self._token)
        if self._live:
            self._recorder.closed(self.number)
        self.close_event(exc_type, exc, tb)

    def clip(self) -> None:
        if self._live:
            self._live = False
            self._recorder.add(self._path, time.perf_counter_ns() - self._start)

    def open_event(self, **stats: Any) -> None:
        try:
            self._event = self._recorder.make_event(self._name, **stats)
            self._event.__enter__()
        except Exception:
            self._event = None

    def close_event(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        event, self._event = self._event, None
        if event is not None:
            with contextlib.suppress(Exception):
                event.__exit__(exc_type, exc, tb)


class _Nothing:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()


class _Hook:
    """Calls ``enter`` and ``exit`` around a block; never raises into user code."""

    __slots__ = ("_enter", "_exit")

    def __init__(self, enter: Callable[[], None], exit: Callable[[], None]) -> None:
        self._enter, self._exit = enter, exit

    def __enter__(self) -> None:
        with contextlib.suppress(Exception):
            self._enter()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._exit()


def _nothing() -> None:
    return None


def label(name: str) -> _Block | _Nothing:
    """A labelled block: a profiler event plus its host time."""
    recorder = _active
    if recorder is None:
        return _NOTHING
    return _Block(recorder, name)


def step() -> _Hook | _Nothing:
    """One step, marked by the caller: an XProf step marker around the block.

    Explicit steps are the user's own markers: while a capture sees them, it marks no
    steps of its own.
    """
    recorder = _active
    if recorder is None:
        return _NOTHING
    tracker = recorder.tracker
    return _Hook(lambda: tracker.user_step(True, mark=True), lambda: tracker.user_step(False))


def iteration() -> _Hook | _Nothing:
    """One iteration of a loop the rewriter chose: a step when nothing syncs."""
    recorder = _active
    if recorder is None:
        return _NOTHING
    tracker = recorder.tracker
    return _Hook(tracker.iteration_started, tracker.iteration_ended)


def loops_ahead() -> None:
    """The cell has loops for steps: the first step starts at the first one, not here."""
    recorder = _active
    if recorder is not None:
        with contextlib.suppress(Exception):
            recorder.tracker.disarm()


def loop() -> _Hook | _Nothing:
    """The cell's loop: its first entry is where the first step starts."""
    recorder = _active
    if recorder is None:
        return _NOTHING
    tracker = recorder.tracker
    return _Hook(lambda: tracker.arm(by_loop=True), _nothing)


def keep(value: Any) -> Any:
    """Hold the cell's final value for the magic to return as Out[n]."""
    recorder = _active
    if recorder is not None:
        recorder.value = value
        recorder.has_value = True
    return value
