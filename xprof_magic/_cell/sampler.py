"""Which line of the cell the cell's thread runs, sampled while a capture runs.

The timeline says when the framework works on the Python thread (JAX's ``PjitFunction``, a
sync, a copy), and the labels which statement of the cell runs; neither says which statement
inside a loop's body holds the time, nor whether the Python running there is the user's own
(numpy, a tokenizer, a log line) or the framework's (an op traced from Python, torch_xla's
lazy tensors leave no event). A thread that looks at the cell's thread every
:data:`INTERVAL_S` does. For each look: the wall-clock time (the timeline's clock); the
cell's line that runs, read from the frame of the cell's own ``code`` (else the outermost
frame of its file), so the statement of the cell, not a line inside a function it calls
(IPython's frame that runs the magic has the cell's file name too, so that tracebacks show
the user's lines); whether the innermost Python frame is the framework's (a file under one
of ``frameworks``' folders); and whether the framework made ops since the last look.

What a look costs the cell is mostly not the look but the hand-off of the interpreter's lock
to this thread and back (``python -m bench tiny-steps``: a thread that wakes as often and does
nothing cost a loop of tiny steps about as much as the looks). While the step tracker records a
loop's steps in C (its steps are tiny, its body repeats), the looks come :data:`SPARSE` times
less often and each says so (its weight in the flags), so that the analysis counts it as the
looks it stands for; the tracker keeps each look's time and step count (``steps``), between
which it spreads a counted loop's steps. Standard library only.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import CodeType, FrameType

__all__ = [
    "FRAMEWORKS",
    "GREW",
    "INTERVAL_S",
    "MANY_OPS",
    "MOST",
    "RAN_NS",
    "SPARSE",
    "STALLED",
    "WEIGHT",
    "LineSampler",
    "Sample",
    "framework_folders",
]

FRAMEWORKS = ("jax", "jaxlib", "torch", "torch_xla", "torch_tpu", "flax", "optax", "xprof_magic")
"""The packages whose Python is the framework's (or the profiler's own), not the user's."""

INTERVAL_S = 0.002
"""Seconds between two looks, on average (each wait is drawn between half and one and a half
of it): 500 a second, so that the 5 looks the analysis needs fit in the 10 ms under which a
cell gets no verdict."""
SWITCH_S = 0.0001
"""The interpreter's switch interval while the sampler looks (see :meth:`LineSampler.start`)."""
SPARSE = 5
"""While a loop's steps are recorded in C (``fast``), the looks come this many times less
often, each one standing for this many (its flags say so, :data:`WEIGHT`): over a loop of
thousands of repeating tiny steps, a fifth of the looks still tell which statement holds the
time, and the hand-offs of the interpreter's lock cost the loop a fifth as much."""
WEIGHT = 8
"""The flags of a look, divided by this: how many looks it stands for (0: one)."""
MOST = 40_000
"""The most looks one capture keeps: past them (80 s at 500 a second) every other look is
dropped and the looks come half as often, so a long cell keeps looks from end to end."""
GREW = 2
"""The flag of a look after which the framework's count of ops made had grown by at least
:data:`MANY_OPS`."""
MANY_OPS = 3
"""Ops made between two looks that say the framework was tracing: one or two are a tensor
moved to the device (``.to(dev)`` makes one) in a line of the user's own NumPy."""
STALLED = 4
"""The flag of a look before which the cell's thread had run less than :data:`RAN_NS` of CPU
since the look before, and made no ops: on a busy machine the sampler often wakes while the
cell's thread waits for a core (3 CPU hogs on 2 cores: 3 pairs of looks in 4 at a line
tracing ops, none ran in between), so that no ops made then says nothing of its line.
Set only where the framework counts its ops and the system reads another thread's CPU
clock (``time.pthread_getcpuclockid``: Linux, not macOS or Windows)."""
RAN_NS = 200_000
"""The CPU time (ns) the cell's thread must run between two looks for the ops it made to
speak for its line: a tenth of :data:`INTERVAL_S`, some tens of ops traced (between
looks 0.3 ms or more apart every pair at a line tracing ops made some)."""
Sample = tuple[int, int, int, int]
"""When (wall-clock ns), the cell's line then (the editor's numbering, as the cell's code is
compiled; 0: none), and flags: 1 when the innermost Python frame was the framework's,
:data:`GREW` when ops were made since the look before, :data:`STALLED` when neither they
nor the thread's CPU time moved; the steps ended by then (``steps``:
the step tracker's count), which tells two looks of one step from two of the same line in
two steps. ``flags // WEIGHT``, when not 0: the look stands for as many (:data:`SPARSE`)."""


class LineSampler:
    """Looks at thread ``thread`` every :data:`INTERVAL_S` from :meth:`start` to :meth:`stop`.

    ``ops``: the framework's count of the ops it has made, where making one leaves no event
    on the timeline (torch_xla's lazy tensors): a look after which it grew says so
    (:data:`GREW`), wherever the innermost Python frame was (``x * 2`` traced from the cell's
    line); the analysis decides which line made them. ``code``: the code whose frame's line
    is the one taken (the cell's, a profiled function's: a script calling it shares its
    file); without it, the outermost frame of ``cell_file``. ``fast``: whether the cell's loop
    has its steps recorded in C now (:data:`SPARSE`)."""

    def __init__(
        self,
        thread: int,
        cell_file: str,
        frameworks: Sequence[str],
        ops: Callable[[], int] | None = None,
        steps: Callable[[], int] | None = None,
        code: CodeType | None = None,
        fast: Callable[[], bool] | None = None,
    ) -> None:
        self._thread, self._file, self._code = thread, cell_file, code
        self._frameworks = tuple(frameworks)
        self._ops, self._steps, self._fast = ops, steps, fast
        self._made = ops() if ops is not None else 0
        self._clock = _cpu_clock(thread) if ops is not None else None
        self._ran = time.clock_gettime_ns(self._clock) if self._clock is not None else 0
        self._gate = threading.Lock()  # held until stop(): the worker's wait between looks
        self._gate.acquire()
        self._stopped = False
        self._worker: threading.Thread | None = None
        self._interval = 0.005
        self.samples: list[Sample] = []

    def start(self) -> None:
        # A look needs the interpreter's lock, which the cell's thread gives up only at its
        # switch interval (5 ms) or a call that releases it (a jitted call): at 5 ms, pure
        # Python (a tokenizer) is never seen, only the next jitted call. At 0.5 ms, a line
        # of pure Python holding 92% of a 2 ms step between two such calls got 12-50% of
        # the looks here, and a print beside a jitted call of an 0.9 ms step lost the verdict
        # to the call on an idle CPU; at 0.1 ms it gets 68-74%. The interval matters only
        # while another thread waits for the lock: the looks, and the user's own threads.
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._interval, SWITCH_S))
        worker = threading.Thread(target=self._run, name="xprof_magic-lines", daemon=True)
        self._worker = worker
        worker.start()

    def stop(self) -> list[Sample]:
        """Stop looking; the looks taken."""
        if not self._stopped:
            self._stopped = True
            self._gate.release()
        if self._worker is not None:
            self._worker.join(1.0)
            sys.setswitchinterval(self._interval)
        return self.samples

    def _run(self) -> None:
        # Each wait drawn at random around the interval: a fixed one locks onto a loop whose
        # step lasts about as long (or half as long). A look waits for the interpreter's
        # lock, which the cell's thread gives up at its next call that releases it (a jitted
        # call); the next look, one interval later, then finds the loop at the same point
        # of its step, and the next, so that every look lands on that call and none on the
        # pure Python between (print_tensor on an idle CPU: 18 of 19 looks on the jitted
        # call, 1 on the print that held the step's time). The wait is one call in C (the
        # gate, released by stop()), and so is the draw: this thread holds the interpreter's
        # lock, which the cell's thread waits for, only for the look itself.
        interval = INTERVAL_S
        wait, draw, fast = self._gate.acquire, random.Random().random, self._fast
        weight = 1
        while not wait(True, interval * weight * (0.5 + draw())):
            if len(self.samples) >= MOST:  # a long cell: every other look, half as often
                del self.samples[::2]
                interval *= 2
            try:
                self._look(weight)
                weight = SPARSE if fast is not None and fast() else 1
            except Exception:  # a look never fails the cell
                return

    def _look(self, weight: int = 1) -> None:
        frame = sys._current_frames().get(self._thread)
        if frame is None:
            return
        framework = bool(self._frameworks) and frame.f_code.co_filename.startswith(self._frameworks)
        line = 0
        at: FrameType | None = frame
        while at is not None:
            if at.f_code is self._code:
                line = at.f_lineno or 0
                break
            if self._code is None and at.f_code.co_filename == self._file:
                line = at.f_lineno or 0
            at = at.f_back
        del frame
        grew = stalled = False
        if self._ops is not None:
            made = self._ops()
            grew, self._made = made - self._made >= MANY_OPS, made
        if self._clock is not None:
            try:
                ran = time.clock_gettime_ns(self._clock)
            except OSError:  # the thread is gone: no more of its CPU time to read
                self._clock = None
            else:
                stalled, self._ran = not grew and ran - self._ran < RAN_NS, ran
        ended = self._steps() if self._steps is not None else 0
        flags = (
            int(framework)
            | (GREW if grew else 0)
            | (STALLED if stalled else 0)
            | (WEIGHT * weight if weight > 1 else 0)
        )
        self.samples.append((time.time_ns(), line, flags, ended))


def _cpu_clock(thread: int) -> int | None:
    """The clock of ``thread``'s CPU time (its ``threading.get_ident()``); None where none."""
    try:
        clock = time.pthread_getcpuclockid(thread)
        time.clock_gettime_ns(clock)
    except (AttributeError, OSError, OverflowError):
        return None
    return clock


def framework_folders() -> tuple[str, ...]:
    """The folders of the :data:`FRAMEWORKS` imported now, each ending with a separator."""
    found = []
    for name in FRAMEWORKS:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            found.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(found)
