"""What rewritten cells call at run time: labels, steps and the kept final value.

A capture hands :func:`recording` its :class:`~xprof_magic._cell.label_times.Recorder` (label
times, the open label blocks, the kept value) and its
:class:`~xprof_magic._cell.step_tracker.StepTracker`, which the recorder does not know: the tracker
splits the recorder's blocks at step ends, never the other way round.

The rewritten code reaches this module through ``__import__``, so it must stay cheap to
import and free of torch: the backend hands in its event factory when a capture starts.
Outside a capture every call is a no-op, so functions defined in a profiled cell keep
working anywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import operator
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType, TracebackType
from typing import Any

__all__ = [
    "SHAPES_EVENT",
    "LabelStat",
    "Recorder",
    "capturing",
    "inputs",
    "iteration",
    "keep",
    "label",
    "loop",
    "loops_ahead",
    "outer_iteration",
    "recording",
    "step",
    "steps",
]

from xprof_magic._cell.label_times import LabelStat, Recorder
from xprof_magic._cell.step_tracker import FAST_AFTER, StepTracker

SHAPES_EVENT = "xprof.shapes "
"""The name that starts the marker :func:`inputs` leaves when the items' shapes change."""


class _Iteration:
    """One iteration of a loop the rewriter chose, around its body.

    Made once per capture and kind (``deferred`` or not) and entered each iteration, since a loop
    of tiny steps pays for every call made per iteration (``python -m bench tiny-steps``). Never
    raises into user code.
    """

    __slots__ = ("_deferred", "_ended", "_started")

    def __init__(self, tracker: StepTracker, deferred: bool) -> None:
        self._started, self._ended = tracker.iteration_started, tracker.iteration_ended
        self._deferred = deferred

    def __enter__(self) -> None:
        try:
            self._started(self._deferred)
        except Exception:
            return

    def __exit__(self, *exc: object) -> None:
        try:
            self._ended()
        except Exception:
            return


class _Active:
    """The capture receiving labels and steps now, and its iteration hooks."""

    __slots__ = ("iterations", "recorder", "tracker")

    def __init__(self, recorder: Recorder, tracker: StepTracker) -> None:
        self.recorder, self.tracker = recorder, tracker
        self.iterations = (_Iteration(tracker, False), _Iteration(tracker, True))


_active: _Active | None = None
_path: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "xprof_magic_label_path", default=()
)


@contextmanager
def recording(recorder: Recorder, tracker: StepTracker | None = None) -> Iterator[Recorder]:
    """Send every label to ``recorder`` and every step to ``tracker`` until the block ends.

    ``tracker`` defaults to one that watches no syncs and has no window.
    """
    global _active
    if tracker is None:
        tracker = StepTracker(recorder.make_event, recorder)
    previous, _active = _active, _Active(recorder, tracker)
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
        "_tracker",
        "number",
        "thread",
    )

    def __init__(self, recorder: Recorder, tracker: StepTracker, name: str) -> None:
        self._recorder = recorder
        self._tracker = tracker
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
                self._tracker.outer_label()
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
            self._recorder.sample(self._path)
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


def capturing() -> bool:
    """Whether a capture receives labels now (a profiled function called inside another)."""
    return _active is not None


def label(name: str) -> _Block | _Nothing:
    """A labelled block: a profiler event plus its host time."""
    active = _active
    if active is None:
        return _NOTHING
    return _Block(active.recorder, active.tracker, name)


def step() -> _Hook | _Nothing:
    """One step, marked by the caller: an XProf step marker around the block.

    Explicit steps are the user's own markers: while a capture sees them, it marks no
    steps of its own.
    """
    active = _active
    if active is None:
        return _NOTHING
    tracker = active.tracker
    return _Hook(lambda: tracker.user_step(True, mark=True), lambda: tracker.user_step(False))


def iteration(deferred: bool = False) -> _Iteration | _Nothing:
    """One iteration of a loop the rewriter chose: a step when nothing syncs.

    ``deferred``: the loop sits in an outer one that runs more than it, whose iterations
    (:func:`outer_iteration`) may sync.
    """
    active = _active
    if active is None:
        return _NOTHING
    return active.iterations[deferred]


def steps(iterable: Iterable[Any], deferred: bool = False) -> Iterable[Any]:
    """Wrap the iterable of a ``for`` loop the rewriter chose: each item is an iteration.

    Each iteration is a step when nothing syncs (as :func:`iteration`, which a ``while`` loop's
    body calls instead).

    The first iterations report to the step tracker, a marker each. A loop over a built-in
    container (a ``range``, a list …: nothing to wait for between items) whose steps the
    tracker finds short goes on in C: :func:`itertools.chain` hands on the container's own
    iterator, whose position the tracker reads at the sampler's looks and the loop's end
    (:func:`_taken`), nothing per step; over a dict or set (whose iterator cannot say where
    it is), ``map`` and ``zip`` append each step's start (``time.time_ns()``) to the tracker's
    list. The per-step cost of ``--steps`` on tiny steps is then about that of the ``for``
    statement itself (``python -m bench tiny-steps``). Items, exceptions and
    ``StopIteration`` pass through unchanged.
    """
    active = _active
    if active is None:
        return iterable
    ready = isinstance(iterable, _READY) and not deferred
    it = iter(iterable)
    taken = _taken(iterable, it) if ready else None
    return itertools.chain.from_iterable(_parts(it, active.tracker, deferred, ready, taken))


def _taken(iterable: Any, it: Iterator[Any]) -> Callable[[], int] | None:
    """How many items ``it``, the iterator of a built-in container, has given, read untouched.

    Its ``__length_hint__`` (the items left: 0 once it ran out) from the container's length,
    which a list or bytearray reads anew (items appended while the loop runs). None for a dict
    or set (changed, its iterator raises and forgets where it was), or a subclass's iterator.
    """
    kind = type(iterable)
    if kind not in _SIZED or type(it) not in _COUNTED:
        return None
    left: Callable[[], int] = getattr(it, "__length_hint__")  # noqa: B009 (not in Iterator)
    if kind is list or kind is bytearray:
        size = iterable.__len__
        return lambda: size() - left()
    try:
        fixed = len(iterable)
    except OverflowError:  # a range longer than sys.maxsize
        return None
    return lambda: fixed - left()


class _Open:
    """Whether an iteration the loop reported is still open.

    A ``break`` or an exception in it leaves it open: the loop's end closes it.
    """

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open = False


def _parts(
    it: Iterator[Any],
    tracker: StepTracker,
    deferred: bool,
    ready: bool,
    taken: Callable[[], int] | None = None,
) -> Iterator[Iterator[Any]]:
    """The loop's items in parts, each an iterator.

    Reported ones come :data:`FAST_AFTER` at a time, until the tracker lets the rest be recorded
    in C (see :func:`steps`): ``it`` itself where ``taken`` counts its items (:func:`_taken`),
    else ``it`` with each item's start appended.
    """
    __tracebackhide__ = True
    state = _Open()
    fast: list[int] | None = None
    try:
        while True:
            left = _Left(it)
            yield _reported(left, tracker, deferred, state, FAST_AFTER if ready else -1)
            if left.empty:
                return
            with contextlib.suppress(Exception):
                fast = tracker.go_fast(taken)
            if fast is not None and taken is not None:
                yield it
                return
            if fast is not None:
                stamped = map(fast.append, iter(time.time_ns, None))
                yield map(operator.itemgetter(0), zip(it, stamped, strict=False))
                return
    finally:
        end = time.time_ns()
        if state.open:
            state.open = False
            with contextlib.suppress(Exception):
                tracker.iteration_ended()
        if fast is not None:
            with contextlib.suppress(Exception):
                tracker.fast_done(end)


class _Left:
    """The loop's iterator, and whether it has run out."""

    __slots__ = ("empty", "it")

    def __init__(self, it: Iterator[Any]) -> None:
        self.it, self.empty = it, False


def _reported(
    left: _Left, tracker: StepTracker, deferred: bool, state: _Open, count: int
) -> Iterator[Any]:
    """Up to ``count`` items (all of them when negative), each iteration reported."""
    __tracebackhide__ = True
    started, ended = tracker.iteration_started, tracker.iteration_ended
    it = left.it
    while count:
        count -= 1
        try:
            item = next(it)
        except StopIteration:
            left.empty = True
            return
        with contextlib.suppress(Exception):
            started(deferred)
        state.open = True
        yield item
        state.open = False
        with contextlib.suppress(Exception):
            ended()
    return


def outer_iteration() -> _Hook | _Nothing:
    """One iteration of an outer loop that holds a deferred inner loop."""
    active = _active
    if active is None:
        return _NOTHING
    return _Hook(_nothing, active.tracker.outer_iteration_ended)


def loops_ahead() -> None:
    """The cell has loops for steps: the first step starts at the first one, not here."""
    active = _active
    if active is not None:
        with contextlib.suppress(Exception):
            active.tracker.disarm()


class _Loop:
    """The cell's loop: its first entry is where the first step starts.

    Entered, it gives this module, which the rewritten loop binds (``as``) so that each
    iteration's hook is one attribute away, not an ``__import__`` (1.8 µs an iteration).
    """

    __slots__ = ("_tracker",)

    def __init__(self, tracker: StepTracker | None) -> None:
        self._tracker = tracker

    def __enter__(self) -> ModuleType:
        if self._tracker is not None:
            with contextlib.suppress(Exception):
                self._tracker.arm(by_loop=True)
        return sys.modules[__name__]

    def __exit__(self, *exc: object) -> None:
        return None


def loop() -> _Loop:
    """The cell's loop: its first entry is where the first step starts (:class:`_Loop`)."""
    active = _active
    return _Loop(None if active is None else active.tracker)


def keep(value: Any) -> Any:
    """Hold the cell's final value for the capture to return as Out[n]."""
    active = _active
    if active is not None:
        active.recorder.value = value
        active.recorder.has_value = True
    return value


def inputs(iterable: Any, name: str) -> Any:
    """Wrap the iterable of one of the cell's loops so that each ``next()`` is timed as ``name``.

    The label (``next(batches)``) holds the time the loop waits for its next item, which the
    diagnosis counts as input. When the items' shapes change (and for the first), a marker
    ``xprof.shapes (16, 8), (16,)`` inside that label records them.

    ``iter()`` is called here, as the ``for`` statement would; items, exceptions and
    ``StopIteration`` pass through unchanged. Outside a capture, outside a label, or for a
    built-in container (a list, a dict …: its items are ready, and a long one would cost an
    event each), the iterable is returned as it is.
    """
    active = _active
    if active is None or not _path.get() or isinstance(iterable, _READY):
        return iterable
    return _Inputs(iter(iterable), active, name)


_READY = (list, tuple, dict, set, frozenset, str, bytes, bytearray, range)
_SIZED = frozenset((list, tuple, frozenset, str, bytes, bytearray, range))
"""The containers whose loops are counted, not stamped (:func:`_taken`): exactly these types."""
_EMPTY: tuple[Iterable[Any], ...] = (
    [],
    (),
    frozenset(),
    "",
    "\u0100",
    b"",
    bytearray(),
    range(0),
    range(1 << 64),
)
_COUNTED = frozenset(type(iter(empty)) for empty in _EMPTY)
"""Their iterators' types, whose ``__length_hint__`` says how many items are left."""


class _Inputs:
    """An iterator that times each ``next()`` of the one it wraps (see :func:`inputs`)."""

    __slots__ = ("_active", "_it", "_name", "_shapes")

    def __init__(self, it: Iterator[Any], active: _Active, name: str) -> None:
        self._it, self._active, self._name = it, active, name
        self._shapes: str | None = None

    def __iter__(self) -> _Inputs:
        return self

    def __next__(self) -> Any:
        active = self._active
        block = _Block(active.recorder, active.tracker, self._name)
        block.__enter__()
        try:
            item = next(self._it)
        except BaseException as error:
            block.__exit__(type(error), error, error.__traceback__)
            raise
        with contextlib.suppress(Exception):
            shapes = _shapes_of(item)
            if shapes and shapes != self._shapes:
                self._shapes = shapes
                marker = active.recorder.make_event(SHAPES_EVENT + shapes)
                marker.__enter__()
                marker.__exit__(None, None, None)
        block.__exit__(None, None, None)
        return item


def _shapes_of(item: Any, depth: int = 0) -> str:
    """The shapes in an item, e.g. ``(16, 8), (16,)``: its own, or its first few parts'.

    A dict's are given by key, ``input_ids (8, 20), labels (8,)``, so that a change names its
    input.
    """
    shape: Any = getattr(item, "shape", None)
    if isinstance(shape, tuple) or type(shape).__name__ == "Size":
        return str(tuple(int(n) for n in shape))
    if depth == 0 and isinstance(item, dict):
        named = ((_KEY.sub("_", str(k))[:40], _shapes_of(v, 1)) for k, v in item.items())
        return ", ".join(f"{k} {s}" for k, s in itertools.islice(named, 4) if s)
    if depth == 0 and isinstance(item, tuple | list):
        found = [_shapes_of(part, 1) for part in itertools.islice(item, 4)]
        return ", ".join(f for f in found if f)
    return ""


_KEY = re.compile(r"[^\w.\-]")
