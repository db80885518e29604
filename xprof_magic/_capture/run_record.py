"""What a stopped capture records about its run: the ``xprof_magic.json`` it stores.

:class:`~xprof_magic._capture.capture.Capture` hands over its plan, its backend and what its trace,
step tracker and label recorder hold; this module turns them into the one
:class:`~xprof_magic._runs.metadata.RunMetadata`, with the cell's share of the backend's counters.
IPython-free, and free of any profiler.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone

from xprof_magic._backends import Backend, MetricsSnapshot
from xprof_magic._capture.plan import Plan
from xprof_magic._capture.trace_window import Trace
from xprof_magic._cell import labels as _labels
from xprof_magic._cell.step_tracker import StepTracker
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs.metadata import MetricTotal, RunMetrics

__all__ = ["ChildrenCpu", "Ended", "metrics_delta", "run_metadata"]


@dataclass(frozen=True)
class Ended:
    """How the capture's code ended: its wall time, its cell span's clock, its exception."""

    wall_s: float
    start_ns: int
    end_ns: int
    error: BaseException | None
    children: ChildrenCpu | None = None
    """The child processes' CPU when the capture started (:meth:`ChildrenCpu.now`)."""


@dataclass(frozen=True)
class ChildrenCpu:
    """The CPU seconds of this process's child processes (a DataLoader's workers) at one time.

    ``reaped_s``: those of the children it has waited for (``os.times()``: a DataLoader's
    workers once its iterator is done); ``live``: each live descendant's own (``/proc``), by pid.
    """

    reaped_s: float
    live: tuple[tuple[int, float], ...]

    @classmethod
    def now(cls) -> ChildrenCpu | None:
        """This process's children's CPU now; None where ``/proc`` does not say (not Linux)."""
        if not os.path.isdir("/proc/self/task"):
            return None
        times = os.times()
        tick = os.sysconf("SC_CLK_TCK")
        live = []
        for pid in _descendants():
            used = _cpu_of(pid, tick)
            if used is not None:
                live.append((pid, used))
        return cls(times.children_user + times.children_system, tuple(live))

    def since(self, before: ChildrenCpu) -> float:
        """The CPU seconds the children used from ``before`` to this time.

        A child live at both times counts its difference; one started since, all of its own; the
        ones waited for meanwhile, what they used (all of it: they ran while the capture did).
        """
        was = dict(before.live)
        live = sum(used - was.get(pid, 0.0) for pid, used in self.live)
        return max(0.0, self.reaped_s - before.reaped_s) + max(0.0, live)


def _descendants() -> list[int]:
    """The pids of this process's live descendants (``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    pending = [os.getpid()]
    while pending and len(found) < 1000:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(kids)
            pending.extend(kids)
    return found


def _cpu_of(pid: int, tick: int) -> float | None:
    """A process's user and system CPU seconds (``/proc/<pid>/stat``); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError, IndexError):
        return None


def run_metadata(
    plan: Plan,
    backend: Backend,
    before: MetricsSnapshot,
    trace: Trace,
    tracker: StepTracker,
    recorder: _labels.Recorder,
    ended: Ended,
    messages: list[str],
) -> _metadata.RunMetadata:
    """The run's metadata; ``before`` is the backend's counters when the capture started."""
    from xprof_magic._version import __version__

    exc = ended.error
    error = None if exc is None else _metadata.RunError(type(exc).__name__, _message(exc))
    start_ns, end_ns = trace.span(ended.start_ns, ended.end_ns)
    steps = tuple(tracker.durations())
    return _metadata.RunMetadata(
        run=plan.name or "",
        cell=plan.cell,
        cell_number=plan.cell_number,
        cell_first_line=plan.cell_first_line if plan.cell else None,
        labels=tuple(recorder.labels()),
        steps=steps,
        options=plan.options,
        start=_iso(start_ns),
        end=_iso(end_ns),
        start_ns=start_ns,
        end_ns=end_ns,
        wall_s=ended.wall_s,
        status="error" if exc is not None else "partial" if trace.partial else "ok",
        error=error,
        backend=backend.name,
        device=backend.device(),
        device_name=backend.device_name(),
        cpus=usable_cpus(),
        children_cpu_s=_children_cpu(ended.children),
        memory=tuple(
            _metadata.MemoryFigure(t, path, used, peak, limit)
            for t, path, used, peak, limit in recorder.samples
        ),
        cell_file=plan.cell_file,
        # The cell's code is compiled at the editor's lines (the magic is line 1).
        lines=tuple(recorder.lines),
        host=socket.gethostname(),
        pid=os.getpid(),
        versions={**backend.versions(), "xprof_magic": __version__},
        metrics=metrics_delta(before, backend.metrics()),
        step_rule=tracker.rule if steps else None,
        step_window=None if tracker.window is None else str(tracker.window),
        steps_first=tracker.first if steps else None,
        steps_spread=tuple((a, b) for a, b, _ in tracker.spread()) if steps else (),
        messages=tuple(messages),
    )


def metrics_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> RunMetrics:
    """One cell's share of the counters; unchanged entries are left out."""
    counters = {
        name: value - before.counters.get(name, 0)
        for name, value in after.counters.items()
        if value != before.counters.get(name, 0)
    }
    metrics: dict[str, MetricTotal] = {}
    for name, (count, total) in after.metrics.items():
        count0, total0 = before.metrics.get(name, (0, 0.0))
        if count != count0:
            metrics[name] = MetricTotal(count - count0, total - total0)
    return RunMetrics(counters, metrics, after.notes[len(before.notes) :])


def _children_cpu(before: ChildrenCpu | None) -> float | None:
    """The CPU seconds the capture's child processes used since ``before``; None unknown."""
    after = ChildrenCpu.now() if before is not None else None
    return None if before is None or after is None else round(after.since(before), 6)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose message could not be read>"


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).astimezone().isoformat()


def usable_cpus() -> int:
    """The cores this process may run on (its affinity; the machine's where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
