"""The one small interface between xprof_magic and a profiler.

May import nothing of xprof_magic: the profilers are imported by their registry entries'
factories only. Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from xprof_magic._backends.words import (
    NEUTRAL,
    NEUTRAL_FIXES,
    Advice,
    CaptureWords,
    Headings,
    MetricNames,
    TimelineNames,
    Vocabulary,
)

__all__ = [
    "NEUTRAL",
    "NEUTRAL_FIXES",
    "Advice",
    "Backend",
    "CaptureWords",
    "Headings",
    "MetricNames",
    "MetricsSnapshot",
    "ServerStatus",
    "TimelineNames",
    "TraceAlreadyRunning",
    "Vocabulary",
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
    ends in ``Time``. ``notes`` are the backend's explanations so far, oldest first (a cell's
    are those after the first snapshot's).
    """

    counters: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, tuple[int, float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


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

    def runtime_started(self) -> bool:
        """Whether the user's code has started the device runtime (never starts it)."""

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        """While open, report each sync and the user's own step markers.

        Must not start the runtime.

        Args:
            on_sync: called at each sync, at any depth, after it launched the pending work (``True``
                when there was work to launch).
            on_user_step: called where the user's own step markers begin (``True``) and end
                (``False``).
        """

    def user_hooks(
        self,
        on_user_trace: Callable[[str], None],
        on_workers: Callable[[str, bool], str | None],
        namespace: dict[str, Any] | None,
    ) -> AbstractContextManager[None]:
        """While open, tell the capture before the user's own trace starts and when workers start.

        Names in ``namespace`` (the user's) bound to the hooked functions are hooked too. A backend
        that intercepts nothing opens nothing.

        Args:
            on_user_trace: called as ``on_user_trace(call)`` before the user's own trace starts (one
                trace per process: the capture stops its own).
            on_workers: called as ``on_workers(start_method, traceable)`` when the code starts
                worker processes; a folder it returns is where the workers trace themselves.
        """

    def sync(self) -> None:
        """Cut and run the pending lazy graph (only when the user asked for it)."""

    def metrics(self) -> MetricsSnapshot:
        """The runtime's counters now."""

    def device(self) -> str:
        """The kind of device that runs the work, e.g. ``TPU``, ``GPU`` or ``CPU``."""

    def device_name(self) -> str:
        """The device's own name as the runtime reports it (``NVIDIA H200``, ``TPU v6 lite``).

        "" where unknown or not started. Must not start the runtime.
        """

    def memory(self) -> tuple[float, float, float] | None:
        """The first device's memory now, as its runtime counts it: in use, peak, limit.

        Bytes in use, the process's peak, and the limit (0 where unknown); None where the runtime
        keeps no such figures (the CPU client). Raises ``LookupError`` while the runtime has not
        started (a first cell's start): it may have them later. Cheap: no sync, no device work.
        """

    def ops_made(self) -> int:
        """How many ops the framework made so far in this process, where its timeline shows none.

        Counted where the timeline shows no event for making them (torch_xla's lazy tensors: its
        ``CreateXlaTensor`` counter); -1 where the timeline shows them itself (JAX's dispatch).
        Cheap: the line sampler asks it 500 times a second, from its own thread.
        """

    def versions(self) -> dict[str, str]:
        """Versions of the libraries that made the capture."""

    def watch(self) -> AbstractContextManager[None]:
        """While open, gather what :meth:`metrics` reports that the runtime does not count itself.

        Open for one capture, from before its first metrics to after its last.
        """
