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

__all__ = ["Ended", "metrics_delta", "run_metadata"]


@dataclass(frozen=True)
class Ended:
    """How the capture's code ended: its wall time, its cell span's clock, its exception."""

    wall_s: float
    start_ns: int
    end_ns: int
    error: BaseException | None


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
