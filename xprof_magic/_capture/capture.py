"""Run one capture: start the trace, let the caller run its code, stop, store, report.

IPython-free: the magic and the script API (:func:`capture`) share this machinery. A
:class:`Capture` never lets its own troubles replace the outcome of the user's code: if the
code raised, that exception is what the caller sees; if storing the run fails, the code's
result still stands and the problem is reported in one line.

What a capture opens (staging folder, the backend's watch, the trace, the hooks around the
cell) sits on one ``ExitStack``, so a failure anywhere closes just what was opened. The
capture owns its trace (:mod:`xprof_magic._capture.trace_window`), step tracker and label
recorder; the tracker asks its step window, which switches the trace: nothing calls back
into its owner.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from types import FrameType, TracebackType
from typing import Any, TypeVar

from xprof_magic._backends import Backend, CaptureWords, MetricsSnapshot
from xprof_magic._backends.registry import capabilities, get_backend, get_vocabulary
from xprof_magic._capture.plan import (
    DEFAULT_PORT,
    NO_SERVER_ENV,
    Options,
    Plan,
    between,
    hand_started,
    parsed,
    with_block,
)
from xprof_magic._capture.result import CaptureResult, size_warning
from xprof_magic._capture.run_record import ChildrenCpu, Ended, run_metadata
from xprof_magic._capture.trace_window import Trace, TraceWindow, collect_workers
from xprof_magic._cell import labels as _labels
from xprof_magic._cell import sampler as _sampler
from xprof_magic._cell.step_tracker import StepTracker
from xprof_magic._cell.step_window import end_messages, parse_steps
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store
from xprof_magic._units import wrapped

__all__ = [
    "DEFAULT_PORT",
    "NO_SERVER_ENV",
    "Capture",
    "CaptureResult",
    "Plan",
    "capture",
    "last",
    "parse_steps",
]

_last: CaptureResult | None = None
# What each backend's profiler server said already, so that each thing is said once.
_server_said: dict[str, set[str]] = {}


def last() -> CaptureResult | None:
    """The last capture's result in this process, or None."""
    return _last


Notify = Callable[[str], None]
T = TypeVar("T")


def _to_stderr(message: str) -> None:
    print(wrapped(message), file=sys.stderr)


@dataclass
class _Running:
    """What a started capture holds until it stops."""

    backend: Backend
    words: CaptureWords
    staging: _store.Staging
    before: MetricsSnapshot
    recorder: _labels.Recorder
    tracker: StepTracker
    trace: Trace
    stack: ExitStack
    cell: ExitStack


@dataclass
class _Hand:
    """Where a script's ``start()`` by hand was called: its frame, line, and file's lines then."""

    frame: FrameType
    line: int
    lines: list[str]
    tree: ast.Module | None
    thread: int

    def stopped_in(self, frame: FrameType) -> bool:
        """Whether a ``stop()`` called in ``frame`` ends the code this ``start()`` began.

        In its frame; or, started at a module's top level, at that module's top level on the
        same thread (IPython runs each statement of a notebook cell as code of its own).
        """
        if frame is self.frame:
            return True
        began, ended = self.frame.f_code, frame.f_code
        return (
            began.co_name == ended.co_name == "<module>"
            and began.co_filename == ended.co_filename
            and threading.get_ident() == self.thread
        )


class Capture:
    """One capture: :meth:`start`, :meth:`run` the code, :meth:`stop`; or a ``with`` block.

    ``start`` checks the log directory, starts the profiler server (once per process) and
    the trace, and refuses with nothing written; ``run`` times the code; ``stop`` waits for
    the device, stops the trace and stores the run; ``result`` then holds it. The magic
    uses the three steps, so that setting up its display between start and run is not
    counted as the cell's time; scripts use ``with``, or ``start()`` and ``stop()`` by hand
    (``run`` is then optional). Raises ``ValueError`` for a run name with no usable character.
    """

    def __init__(
        self, plan: Plan, notify: Notify = _to_stderr, namespace: dict[str, Any] | None = None
    ) -> None:
        self.plan = plan.with_name()
        self._asked = self.plan  # as made: each start by hand or with block plans from it
        self._hand: _Hand | None = None
        self.notify = notify
        # The user's names, so that profiler functions they imported by name are guarded too.
        self.namespace = namespace
        self.result: CaptureResult | None = None
        self._run: _Running | None = None
        self._messages: list[str] = []
        self._start_ns = 0
        self._t0 = 0.0
        self._children: ChildrenCpu | None = None

    def start(self) -> Capture:
        """Check the log directory, start the server and the trace (or arm the window).

        A script's capture (:func:`capture`) started by hand counts its time from here, and the
        code between this call and :meth:`stop`, in the same frame (the same function, the same
        notebook cell), is the run's cell: the summary names its statement that holds the time,
        as for a ``with`` block. Stopped from another frame (another function, another cell), or
        where the source cannot be read, the run has no cell.

        Raises :class:`~xprof_magic._runs.store.LogdirError` or
        :class:`~xprof_magic._backends.TraceAlreadyRunning` with nothing written.
        """
        asked = self._asked
        if asked.options.get("api") is True and not asked.cell:
            frame = sys._getframe(1)
            code = frame.f_code
            lines = linecache.getlines(code.co_filename, frame.f_globals)
            tree = parsed(code.co_filename, lines)  # before the trace: not the run's time
            self._hand = _Hand(frame, frame.f_lineno or 0, lines, tree, threading.get_ident())
            self.plan = hand_started(asked, frame)
            del frame
            try:
                self._start()
            except BaseException:
                self._hand = None
                raise
            self._begin()
            return self
        self._start()
        return self

    def _start(self) -> None:
        plan = self.plan
        with ExitStack() as stack:
            staging = _logdir.stage(plan.logdir)
            stack.callback(_store.discard, staging)
            backend = get_backend(plan.backend)
            _enter_quietly(stack, backend.watch())
            before = backend.metrics()
            recorder = _labels.Recorder(backend.event)
            recorder.tracing = plan.step_window is None
            recorder.sampler = backend.memory
            trace = Trace(backend, staging.path, recorder, self._messages)
            stack.callback(trace.abandon)
            if plan.step_window is None:
                trace.begin()
            if plan.server:
                self._start_server(backend)
            words = get_vocabulary(backend.name).capture
            tracker = self._tracker(backend, recorder, trace, words)
            cell = stack.enter_context(ExitStack())
            run = _Running(backend, words, staging, before, recorder, tracker, trace, stack, cell)
            self._hook_cell(run)
            run.stack = stack.pop_all()
        self._run = run
        self._t0 = 0.0

    def _tracker(
        self, backend: Backend, recorder: _labels.Recorder, trace: Trace, words: CaptureWords
    ) -> StepTracker:
        steps = self.plan.step_window
        window = None
        if steps is not None:
            window = TraceWindow(steps, trace, words.stop_trace, self._messages)
        return StepTracker(
            backend.event,
            recorder,
            watch_syncs=self.plan.steps,
            window=window,
            defer_nested=capabilities(backend.name).lazy_graph,
        )

    def _hook_cell(self, run: _Running) -> None:
        """Open what watches the cell: its labels and steps, the user's own tracing."""
        backend, trace, cell = run.backend, run.trace, run.cell
        cell.enter_context(_labels.recording(run.recorder, run.tracker))

        def workers(start_method: str, traceable: bool) -> str | None:
            return trace.worker_folder(start_method, traceable, run.words.workers)

        _enter_quietly(cell, backend.user_hooks(self._user_trace, workers, self.namespace))
        if self.plan.cell_file:
            made = backend.ops_made
            lines = _sampler.LineSampler(
                threading.get_ident(),
                self.plan.cell_file,
                _sampler.framework_folders(),
                made if made() >= 0 else None,
                run.tracker.look,
                self.plan.cell_code,
                lambda: run.tracker.fast,
            )
            lines.start()
            cell.callback(lambda: run.recorder.lines.extend(lines.stop()))
        if self.plan.steps:
            tracker = run.tracker
            _enter_quietly(cell, backend.step_hooks(tracker.synced, tracker.user_step))

    def run(self, code: Callable[[], T]) -> T:
        """Run the traced code and return its value; the capture's wall time starts here.

        The value is the one the rewritten cell kept, if it kept one.
        """
        __tracebackhide__ = True
        if not self._t0:  # started by hand, the cell's time already runs
            self._begin()
        value = code()
        recorder = self._running().recorder
        return recorder.value if recorder.has_value else value

    def stop(self, error: BaseException | None = None) -> CaptureResult | None:
        """Wait for the device, stop the trace and store the run; ``error`` is how the code ended.

        An interrupt while stopping is re-raised once the trace is stopped (unless the code itself
        already failed). Returns :attr:`result` (None if nothing was stored).
        """
        hand, self._hand = self._hand, None
        at = sys._getframe(1)
        stop_line = (at.f_lineno or 0) if hand is not None and hand.stopped_in(at) else 0
        del at
        self._stop(error, None if hand is None else (hand, stop_line))
        return self.result

    def __enter__(self) -> Capture:
        if self._asked.options.get("api") is True and not self._asked.cell:
            # The script API's block (``with xprof_magic.capture(...)``) is the run's cell.
            self.plan = with_block(self._asked, sys._getframe(1))
        self._start()
        self._begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop(exc)

    def _running(self) -> _Running:
        if self._run is None:
            raise RuntimeError("the capture is not running; call start() first")
        return self._run

    def _begin(self) -> None:
        """The cell's wall time starts now, and steps are counted from here."""
        self._start_ns = time.time_ns()
        self._t0 = time.perf_counter()
        self._children = ChildrenCpu.now()
        run = self._running()
        run.recorder.sample(())
        run.tracker.arm()

    def _user_trace(self, call: str) -> None:
        """The user's code starts its own trace: stop the capture's, keep what it holds.

        One profiling session per process, and the user's wins: their call goes ahead as it
        would without the capture, and the run, cut here, is marked ``partial``.
        """
        run = self._running()
        if not run.trace.running:
            return
        run.trace.pause(f"stopping the trace for your {call}()")
        run.trace.partial = True
        run.tracker.release()
        self._messages.append(
            f"your own {call}() started a trace, so the magic stopped its own there (one "
            "trace per process): this run is partial, and the rest of the cell is in yours"
        )

    def _start_server(self, backend: Backend) -> None:
        status = backend.start_server(self.plan.port)
        said = _server_said.setdefault(backend.name, set())
        if status.message and status.message not in said:
            said.add(status.message)
            self.notify(f"xprof: {status.message}")

    def _stop(self, exc: BaseException | None, hand: tuple[_Hand, int] | None = None) -> None:
        run, self._run = self._running(), None
        with run.stack:
            interrupt, wall_s = self._end_cell(run, exc)
            if hand is not None:
                self._hand_cell(run, *hand)
            if not run.trace.running and run.tracker.state in ("before", "failed"):
                for message in self._messages:
                    self.notify(f"xprof: {message}")
            else:
                interrupt = self._wait_for_device(run) or interrupt
                try:
                    self._store(run, exc or interrupt, wall_s)
                except BaseException as error:  # KeyboardInterrupt: the trace is stopped
                    interrupt = interrupt or error
        if interrupt is not None and exc is None:
            raise interrupt

    def _end_cell(
        self, run: _Running, exc: BaseException | None
    ) -> tuple[BaseException | None, float]:
        """Close what watched the cell (after ``--sync``, which is part of it).

        Returns an interrupt of the sync, to raise once the trace is stopped, and the cell's wall
        time.
        """
        interrupt: BaseException | None = None
        if exc is None and self.plan.sync and run.backend.runtime_started():
            # Part of the cell: in its wall time, and a block of its own, so that the
            # compile and run of the work it launches land in a labelled block.
            try:
                with _labels.label(run.words.sync_label):
                    run.backend.sync()
            except Exception as error:
                self._messages.append(f"--sync failed: {error}")
            except BaseException as error:  # KeyboardInterrupt: stop the trace all the same
                interrupt = error
        wall_s = time.perf_counter() - self._t0
        run.recorder.sample(())
        run.cell.close()
        run.tracker.finish()
        self._messages.extend(end_messages(run.tracker, self.plan.steps, run.words.no_steps))
        return interrupt, wall_s

    def _hand_cell(self, run: _Running, hand: _Hand, stop_line: int) -> None:
        """The cell of a start by hand: the code to the ``stop()`` at ``stop_line`` (0: none).

        Its frame's looks outside the cell's lines (a loop around both calls) name no line;
        with no cell (stopped from another frame, the source unread) the run keeps no looks,
        as a capture without a cell.
        """
        plan = None
        if stop_line:
            with contextlib.suppress(Exception):  # never a failure of the run: no cell
                plan = between(self.plan, hand.lines, hand.tree, hand.line, stop_line)
        if plan is None or not plan.cell:
            self.plan = replace(self.plan, cell_file="", cell_code=None)
            run.recorder.lines.clear()
            return
        self.plan = plan
        first = plan.cell_first_line
        last = first + len(plan.cell.splitlines()) - 1
        run.recorder.lines[:] = [
            (t, line if first <= line <= last else 0, flags, ended)
            for t, line, flags, ended in run.recorder.lines
        ]

    def _wait_for_device(self, run: _Running) -> BaseException | None:
        """Wait for the device work the trace should hold; an interrupt, to raise later."""
        try:
            if run.trace.running and run.backend.runtime_started():
                run.backend.wait_for_device()
        except Exception as error:
            self._messages.append(f"waiting for the device failed: {error}")
        except BaseException as error:  # KeyboardInterrupt: stop the trace all the same
            return error
        return None

    def _write_python_steps(self, run: _Running) -> None:
        """Put the steps recorded in Python (a loop of tiny steps) into the saved timeline."""
        steps = run.tracker.python_steps()
        if not steps:
            return
        from xprof_magic._capture.step_events import write_steps  # numpy: only when needed

        try:
            written = write_steps(run.staging.path, steps, run.tracker.spread())
        except Exception as error:
            written, reason = 0, f": {error}"
        else:
            reason = ": the timeline holds no step marker to find the cell's thread by"
        if written < len(steps):
            self._messages.append(
                f"{len(steps)} steps were recorded without a marker each (tiny steps), and "
                f"could not be added to the timeline{reason}"
            )

    def _store(self, run: _Running, exc: BaseException | None, wall_s: float) -> None:
        """Stop the trace and store the run; a failure is told in one line, never raised."""
        plan = self.plan
        assert plan.name is not None
        try:
            try:
                run.trace.stop()
            finally:
                run.tracker.release()
            said = collect_workers(run.staging.path, len(run.trace.workers))
            if said:
                self._messages.append(said)
            self._write_python_steps(run)
            ended = Ended(wall_s, self._start_ns, time.time_ns(), exc, self._children)
            metadata = run_metadata(
                plan,
                run.backend,
                run.before,
                run.trace,
                run.tracker,
                run.recorder,
                ended,
                self._messages,
            )
            stored = _logdir.store(plan.logdir, run.staging, plan.name, metadata.to_json())
        except Exception as error:
            failure = _logdir.StoreError.of(plan.logdir, error)
            self.notify(f"xprof: {failure}. The cell's own result is unaffected.")
            return
        if stored.upload:
            self._messages.append(stored.upload)
        warning = size_warning(_store.xplane_bytes(stored.run_dir), run.words.shrink)
        if warning:
            self._messages.append(f"warning: {warning}")
        self.result = CaptureResult.stored(
            stored.run_dir,
            plan.logdir.local.absolute(),
            metadata,
            run.recorder.labels(),
            self._messages,
        )
        global _last
        _last = self.result


def _enter_quietly(stack: ExitStack, manager: AbstractContextManager[Any]) -> None:
    """Open ``manager`` and close it with ``stack``, dropping its own failure to close.

    Dropped so that it never replaces the outcome of the user's code.
    """
    manager.__enter__()

    def close() -> None:
        with contextlib.suppress(Exception):
            manager.__exit__(None, None, None)

    stack.callback(close)


def capture(
    logdir: str | os.PathLike[str] | None = None,
    name: str | None = None,
    *,
    steps: bool | str = False,
    sync: bool = False,
    server: bool | None = None,
    port: int = DEFAULT_PORT,
    backend: str = "auto",
) -> Capture:
    """Trace a block of a script into one run, with the magic's machinery.

    ``with xprof_magic.capture(logdir="logs", name="train") as cap: ...`` then
    ``cap.result`` (also :func:`xprof_magic.last`) describes the run; or ``cap.start()`` …
    ``cap.stop()`` by hand, whose code between them, in one frame, is the run's cell as the
    block is (see :meth:`Capture.start`). Label blocks by hand with :func:`xprof_magic.label`;
    ``steps``/``sync`` mean what ``--steps``/``--sync`` do: ``steps=True`` marks steps,
    ``steps="100:103"`` traces only steps 100 to 102 (raises ``ValueError`` for a window that is
    not one, and
    :class:`~xprof_magic._runs.store.LogdirError` for a ``gs://`` location that is not one).
    ``backend="auto"``, as for a cell, is the framework the calling module has imported.
    """
    checked = Options.parse(
        logdir=logdir,
        name=name,
        steps=steps,
        sync=sync,
        labels=False,
        server=server,
        port=port,
        backend=backend,
    )
    options = {"api": True, "steps": steps, "sync": sync}
    plan = checked.plan("", sys._getframe(1).f_globals, options=options)
    return Capture(plan)
