"""The one small interface between xprof_magic and a profiler.

Everything that touches torch_xla lives behind :class:`Backend`. JAX (``jax.profiler``) and
TorchTPU write the same XProf captures; each plugs in as one more module registered in
:data:`BACKENDS`, without touching the magic, the viewer or the analysis.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from xprof_magic._metadata import MetricTotal, RunMetrics

__all__ = [
    "BACKENDS",
    "Backend",
    "MetricsSnapshot",
    "ServerStatus",
    "TraceAlreadyRunning",
    "get_backend",
    "metrics_delta",
]


class TraceAlreadyRunning(RuntimeError):
    """A trace was already running when a capture tried to start one."""


@dataclass(frozen=True)
class ServerStatus:
    """The outcome of asking for the profiler's on-demand capture server."""

    port: int | None
    started: bool
    message: str = ""


@dataclass(frozen=True)
class MetricsSnapshot:
    """Process-wide runtime counters at one moment; subtract two to get one cell's share.

    ``metrics`` maps a name to ``(samples, total)``; a total is in seconds when the name
    ends in ``Time``.
    """

    counters: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, tuple[int, float]] = field(default_factory=dict)


class Backend(Protocol):
    """What a capture needs from a profiler."""

    name: str

    def start_server(self, port: int) -> ServerStatus:
        """Start the on-demand capture server once per process; report what happened."""

    def start_trace(self, log_dir: str) -> None:
        """Start tracing into ``log_dir``; raise :class:`TraceAlreadyRunning` if one is."""

    def stop_trace(self) -> None:
        """Stop tracing and write ``<log_dir>/plugins/profile/<session>/<host>.xplane.pb``."""

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        """A timeline event that never changes what the traced code does."""

    def wait_for_device(self) -> None:
        """Block until device work already launched has finished."""

    def sync(self) -> None:
        """Cut and run the pending lazy graph (only when the user asked for it)."""

    def metrics(self) -> MetricsSnapshot:
        """The runtime's counters now."""

    def device(self) -> str:
        """The kind of device that runs the work, e.g. ``TPU`` or ``CPU``."""

    def versions(self) -> dict[str, str]:
        """Versions of the libraries that made the capture."""


BACKENDS: dict[str, str] = {"torch_xla": "xprof_magic._backends.torch_xla"}
_loaded: dict[str, Backend] = {}


def get_backend(name: str = "torch_xla") -> Backend:
    """The process-wide backend ``name``, imported on first use (torch_xla is slow to load)."""
    if name not in _loaded:
        try:
            module_name = BACKENDS[name]
        except KeyError:
            known = ", ".join(sorted(BACKENDS))
            raise ValueError(f"unknown backend {name!r}; choose one of: {known}") from None
        module = importlib.import_module(module_name)
        _loaded[name] = module.create()
    return _loaded[name]


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
    return RunMetrics(counters, metrics)
