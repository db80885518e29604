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

__all__ = ["LabelStat", "Recorder", "keep", "label", "recording", "step"]

EventFactory = Callable[..., AbstractContextManager[Any]]


@dataclass(frozen=True)
class LabelStat:
    """Host time spent in one labelled block, summed over its entries."""

    path: tuple[str, ...]
    count: int
    total_s: float

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "count": self.count, "total_s": self.total_s}


class Recorder:
    """Collects one capture's label times, step times and final value."""

    def __init__(self, make_event: EventFactory) -> None:
        self.make_event = make_event
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], list[int]] = {}
        self._step_ns: list[int] = []
        self._next_step = 0
        self.value: Any = None
        self.has_value = False

    def add(self, path: tuple[str, ...], elapsed_ns: int) -> None:
        with self._lock:
            entry = self._totals.setdefault(path, [0, 0])
            entry[0] += 1
            entry[1] += elapsed_ns

    def take_step(self) -> int:
        with self._lock:
            number = self._next_step
            self._next_step += 1
            return number

    def add_step(self, elapsed_ns: int) -> None:
        with self._lock:
            self._step_ns.append(elapsed_ns)

    def labels(self) -> list[LabelStat]:
        """Label totals, in the order the blocks were first entered."""
        with self._lock:
            return [LabelStat(p, c, t / 1e9) for p, (c, t) in self._totals.items()]

    def steps(self) -> list[float]:
        with self._lock:
            return [ns / 1e9 for ns in self._step_ns]


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
    """

    __slots__ = ("_event", "_name", "_path", "_recorder", "_start", "_stats", "_token")

    def __init__(self, recorder: Recorder, name: str, stats: dict[str, Any]) -> None:
        self._recorder = recorder
        self._name = name
        self._stats = stats
        self._event: AbstractContextManager[Any] | None = None
        self._token: contextvars.Token[tuple[str, ...]] | None = None
        self._path: tuple[str, ...] = (name,)
        self._start = 0

    def __enter__(self) -> None:
        try:
            self._event = self._recorder.make_event(self._name, **self._stats)
            self._event.__enter__()
        except Exception:
            self._event = None
        if not self._stats:
            self._path = (*_path.get(), self._name)
            self._token = _path.set(self._path)
        self._start = time.perf_counter_ns()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter_ns() - self._start
        if self._stats:
            self._recorder.add_step(elapsed)
        else:
            self._recorder.add(self._path, elapsed)
            if self._token is not None:
                with contextlib.suppress(ValueError, RuntimeError):
                    _path.reset(self._token)
        if self._event is not None:
            with contextlib.suppress(Exception):
                self._event.__exit__(exc_type, exc, tb)


class _Nothing:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()


def label(name: str) -> _Block | _Nothing:
    """A labelled block: a profiler event plus its host time."""
    recorder = _active
    if recorder is None:
        return _NOTHING
    return _Block(recorder, name, {})


def step() -> _Block | _Nothing:
    """One loop iteration as a step, carrying the markers XProf's step tools look for."""
    recorder = _active
    if recorder is None:
        return _NOTHING
    return _Block(recorder, "step", {"_r": 1, "step_num": recorder.take_step()})


def keep(value: Any) -> Any:
    """Hold the cell's final value for the magic to return as Out[n]."""
    recorder = _active
    if recorder is not None:
        recorder.value = value
        recorder.has_value = True
    return value
