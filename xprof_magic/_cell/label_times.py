"""One capture's labels as they run: their host times, the blocks open now, the kept value.

:mod:`xprof_magic._cell.labels` (what the rewritten cell calls) reports each labelled block here
as it opens and closes; the capture reads the totals when the cell has ended, and the step
tracker splits and reopens the open blocks at a step's end (:class:`Recorder` is its
:class:`~xprof_magic._cell.step_tracker.LabelBlocks`). Free of torch and IPython.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from xprof_magic._cell.step_tracker import EventFactory

__all__ = ["MAX_MEMORY_SAMPLES", "LabelStat", "MemorySample", "OpenBlock", "Recorder"]

MAX_MEMORY_SAMPLES = 20_000
"""The most device-memory samples one capture keeps (a sample per labelled block's end)."""
MemorySample = tuple[int, tuple[str, ...], float, float, float]
"""When (wall-clock ns), at the end of which block (``()``: the cell's start or end), and the
device's bytes in use, the process's peak and the limit then."""


class OpenBlock(Protocol):
    """A labelled block the recorder holds while it is open.

    One of :class:`xprof_magic._cell.labels`'s.
    """

    number: int
    thread: int

    def open_event(self, **stats: Any) -> None: ...

    def close_event(self) -> None: ...

    def clip(self) -> None: ...


@dataclass(frozen=True)
class LabelStat:
    """Host time spent in one labelled block, summed over its entries."""

    path: tuple[str, ...]
    count: int
    total_s: float

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "count": self.count, "total_s": self.total_s}


class Recorder:
    """Collects one capture's label times and final value.

    ``tracing`` says whether the trace runs now (a label's time counts only when it ran from the
    block's entry to exit).
    """

    def __init__(self, make_event: EventFactory) -> None:
        self.make_event = make_event
        self.tracing = True
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], list[int]] = {}
        self._opened = 0
        self._open: dict[int, OpenBlock] = {}
        self.value: Any = None
        self.has_value = False
        self.sampler: Callable[[], tuple[float, float, float] | None] | None = None
        """The backend's live device-memory figures, asked at each labelled block's end
        (:meth:`sample`); dropped at the first answer of none (the CPU client keeps none),
        asked again at the next block's end where it raises ``LookupError`` (no figures yet:
        the runtime has not started)."""
        self.samples: list[MemorySample] = []
        self.lines: list[tuple[int, int, int, int]] = []
        """Where the cell's thread was, sampled (:mod:`xprof_magic._cell.sampler`)."""

    def sample(self, path: tuple[str, ...]) -> None:
        """The device's memory now, at the end of block ``path``, where the backend has it."""
        sampler = self.sampler
        if sampler is None or len(self.samples) >= MAX_MEMORY_SAMPLES:
            return
        try:
            figures = sampler()
        except LookupError:
            return
        except Exception:
            figures = None
        if figures is None:
            self.sampler = None
            return
        with self._lock:
            self.samples.append((time.time_ns(), path, *figures))

    def add(self, path: tuple[str, ...], elapsed_ns: int) -> None:
        with self._lock:
            entry = self._totals.setdefault(path, [0, 0])
            entry[0] += 1
            entry[1] += elapsed_ns

    def opened(self, block: OpenBlock) -> int:
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

    def split(self, after: int) -> list[OpenBlock]:
        """Close the events of this thread's open blocks numbered above ``after``, innermost first.

        Returns them, outermost first, for :meth:`resume`.
        """
        me = threading.get_ident()
        with self._lock:
            blocks = [b for n, b in sorted(self._open.items()) if n > after and b.thread == me]
        for block in reversed(blocks):
            block.close_event()
        return blocks

    def resume(self, blocks: list[OpenBlock]) -> None:
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
