"""The capture's one trace, the step window that switches it, and the workers' timelines.

IPython-free, and free of any profiler: the trace asks its :class:`~xprof_magic._backends.
Backend`. A :class:`~xprof_magic._capture.capture.Capture` owns the trace and the step tracker; the
tracker asks its :class:`TraceWindow`, which starts and stops the trace mid-cell.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Protocol

from xprof_magic._backends import Backend
from xprof_magic._cell import labels as _labels
from xprof_magic._cell.step_window import StepWindow
from xprof_magic._runs import store as _store
from xprof_magic._units import seconds

__all__ = ["WORKERS", "Trace", "TraceSwitch", "TraceWindow", "collect_workers"]

WORKERS = "workers"
"""The staging folder's subfolder where traced workers write their own timelines."""


class TraceSwitch(Protocol):
    """The capture's trace, as a step window turns it on and off."""

    def start(self) -> None:
        """Start tracing now; raise when the trace cannot start."""

    def pause(self, doing: str) -> None:
        """Stop tracing mid-cell once the device is done with what was launched.

        A failure is told as ``<doing> failed: <why>``, never raised.
        """


class TraceWindow:
    """``--steps A:B``: starts the trace where step A starts and stops it where step B-1 ends.

    ``state`` is ``before`` the window, ``inside`` it, ``after`` it, or ``failed`` (the trace
    could not start). What the user should know is appended to ``messages``.
    """

    def __init__(
        self,
        steps: StepWindow,
        trace: TraceSwitch,
        stop_hint: str = "the profiler's stop_trace()",
        messages: list[str] | None = None,
    ) -> None:
        self.steps = steps
        self.state = "before"
        self.messages: list[str] = [] if messages is None else messages
        self._trace = trace
        self._stop_hint = stop_hint

    def __str__(self) -> str:
        return str(self.steps)

    def step_starts(self, number: int) -> bool:
        """Step ``number`` starts: the trace starts at the window's first; whether it is traced."""
        if self.state == "before" and number >= self.steps.start:
            try:
                self._trace.start()
            except Exception as error:
                self.state = "failed"
                self.messages.append(
                    f"--steps {self}: the trace could not start: {error}; stop the trace that "
                    f"runs ({self._stop_hint}) and run the cell again"
                )
            else:
                self.state = "inside"
        return self.state == "inside"

    def is_last(self, number: int) -> bool:
        """Whether step ``number`` is the window's last one."""
        stop = self.steps.stop
        return self.state == "inside" and stop is not None and number >= stop - 1

    def stop_after(self, number: int) -> None:
        """Stop the trace after step ``number``, the device done with it.

        The cell waits here for the device to finish the steps launched, then for the profiler to
        write.
        """
        self.state = "after"
        t0 = time.perf_counter()
        self._trace.pause("stopping the trace after the window")
        paused = seconds(time.perf_counter() - t0)
        self.messages.append(
            f"the trace stopped after step {number}; the cell went on untraced "
            f"(it paused {paused} to stop)"
        )


class Trace:
    """The capture's one trace into the staging folder.

    Started with the cell or by a step window, cut by a window's end or the user's own trace,
    stopped at the cell's end.
    """

    def __init__(
        self, backend: Backend, folder: Path, recorder: _labels.Recorder, messages: list[str]
    ) -> None:
        self.running = False
        self.partial = False
        self.started_ns: int | None = None
        self.stopped_ns: int | None = None
        self.workers: list[str] = []
        self._backend, self._folder, self._recorder = backend, folder, recorder
        self._messages = messages
        self._workers_said = False

    def begin(self) -> None:
        """Start tracing with the cell."""
        self._backend.start_trace(str(self._folder))
        self.running = True

    def start(self) -> None:
        """Start tracing mid-cell (a step window's first step)."""
        self.begin()
        self.started_ns = time.time_ns()
        self._recorder.tracing = True

    def pause(self, doing: str) -> None:
        """Stop tracing mid-cell, once the device is done with what was launched.

        Only when the user's code started the runtime: the magic never starts it.
        """
        self._recorder.tracing = False
        try:
            if self._backend.runtime_started():
                self._backend.wait_for_device()
            self._backend.stop_trace()
        except Exception as error:
            self._messages.append(f"{doing} failed: {error}")
        self.running = False
        if self.stopped_ns is None:
            self.stopped_ns = time.time_ns()

    def stop(self) -> None:
        """Stop tracing at the capture's end, writing the capture; raises when it cannot."""
        if self.running:
            self.running = False
            self._backend.stop_trace()

    def abandon(self) -> None:
        """Stop a trace still running after a failure; never raises."""
        if self.running:
            self.running = False
            with contextlib.suppress(Exception):
                self._backend.stop_trace()

    def span(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """Where the trace began and ended, within the cell from ``start_ns`` to ``end_ns``."""
        return self.started_ns or start_ns, self.stopped_ns or end_ns

    def worker_folder(self, start_method: str, traceable: bool, how: str) -> str | None:
        """The folder the code's worker processes trace themselves into, when they can.

        They can when forked, while this trace runs; else say, once, that the run lacks them.
        """
        if traceable and self.running:
            self.workers.append(start_method)
            return str(self._folder / WORKERS / str(len(self.workers)))
        if not self._workers_said:
            self._workers_said = True
            self._messages.append(
                f"the cell started worker processes (start method {start_method!r}); their "
                f"own timelines are not in this run, which holds this process only. {how}"
            )
        return None


def collect_workers(staging: Path, spawns: int) -> str:
    """Move the workers' timelines into the run's session, one host ``rank<N>`` each.

    Returns what the user should know of them ("" when the cell traced no workers).
    """
    folder = staging / WORKERS
    if not spawns:
        return ""
    sessions = [p for p in _store.profile_dir(staging).glob("*") if p.is_dir()]
    hosts: list[str] = []
    ranks = sorted(folder.glob("*/rank*"), key=lambda p: (int(p.parent.name), p.name))
    for rank in ranks if len(sessions) == 1 else []:
        for xplane in sorted(rank.glob("plugins/profile/*/*.xplane.pb")):
            host, taken = rank.name, 1
            while host in hosts:
                taken += 1
                host = f"{rank.name}-{taken}"
            with contextlib.suppress(OSError):
                xplane.rename(sessions[0] / f"{host}.xplane.pb")
                hosts.append(host)
    shutil.rmtree(folder, ignore_errors=True)
    if hosts:
        return (
            f"the workers' timelines are in this run as hosts {', '.join(hosts)} "
            "(XProf's host menu; the summary's hosts table compares them)"
        )
    return (
        "the cell started worker processes, but none wrote its timeline (killed, "
        "or its trace could not start), so this run holds this process only"
    )
