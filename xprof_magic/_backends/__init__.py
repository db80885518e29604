"""The one small interface between xprof_magic and a profiler.

Everything that touches a profiler lives behind :class:`Backend`: torch_xla, JAX
(``jax.profiler``) and TorchTPU (``torch-tpu``), one module each registered in
:data:`BACKENDS`; another plugs in the same way, without touching the magic, the viewer or
the analysis.

The analysis reads runs long after they were made, often in a process that must not pay
for importing a profiler, so a backend's *words* live apart from its code: a
:class:`Vocabulary` (its metric and event names, its advice, its headings) in a light
module registered in :data:`VOCABULARIES`. This module imports neither a profiler nor IPython.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import socket
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from xprof_magic._metadata import MetricTotal, RunMetrics
from xprof_magic._registry import BACKENDS, VOCABULARIES

__all__ = [
    "BACKENDS",
    "NEUTRAL",
    "NEUTRAL_FIXES",
    "VOCABULARIES",
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
    "get_backend",
    "get_vocabulary",
    "listens_here",
    "metrics_delta",
    "port_is_free",
    "port_refusal",
    "reset_profile_state",
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
        """While open, report each sync, at any depth, after it launched the pending work
        (``True`` when there was work to launch), and where the user's own step markers
        begin (``True``) and end (``False``). Must not start the runtime."""

    def user_hooks(
        self,
        on_user_trace: Callable[[str], None],
        on_workers: Callable[[str, bool], str | None],
        namespace: dict[str, Any] | None,
    ) -> AbstractContextManager[None]:
        """While open, call ``on_user_trace(call)`` before the user's own trace starts (one
        trace per process: the capture stops its own), and ``on_workers(start_method,
        traceable)`` when the code starts worker processes; a folder it returns is where
        the workers trace themselves. Names in ``namespace`` (the user's) bound to the
        hooked functions are hooked too. A backend that intercepts nothing opens nothing."""

    def sync(self) -> None:
        """Cut and run the pending lazy graph (only when the user asked for it)."""

    def metrics(self) -> MetricsSnapshot:
        """The runtime's counters now."""

    def device(self) -> str:
        """The kind of device that runs the work, e.g. ``TPU`` or ``CPU``."""

    def versions(self) -> dict[str, str]:
        """Versions of the libraries that made the capture."""

    def watch(self) -> AbstractContextManager[None]:
        """While open (one capture, from before its first metrics to after its last), gather
        what :meth:`metrics` reports that the runtime does not count by itself."""


@dataclass(frozen=True)
class MetricNames:
    """Which of the backend's counters and metrics mean what; "" where it has none.

    Metrics are read from the run's ``metrics.metrics`` (samples and total: seconds for
    times, bytes for data), counters from ``metrics.counters``.
    ``function_compile_prefix`` + a compiled function's name is the metric of that
    function's compilations (count and seconds), where the backend can name them.
    """

    compile_time: str = ""
    compile_cache_hits: str = ""
    execute_time: str = ""
    to_device_time: str = ""
    to_device_bytes: str = ""
    from_device_time: str = ""
    from_device_bytes: str = ""
    fallback_prefix: str = ""
    host_read: str = ""
    function_compile_prefix: str = ""
    host_copy_ns: str = ""
    """A metric, in nanoseconds, of the host's side of copies to the device (torch_xla's
    ``TensorToData``), which the timeline has no event for: the breakdown counts it as
    transfer, not host."""


@dataclass(frozen=True)
class TimelineNames:
    """How the backend's own events and threads look on the timeline."""

    compile_events: tuple[str, ...] = ()
    runtime_names: frozenset[str] = frozenset()
    runtime_prefixes: tuple[str, ...] = ()
    thread_roles: Mapping[str, str] = field(default_factory=dict)
    input_pipeline: frozenset[str] = frozenset()
    """The data loader's own trace names: shown as one input-pipeline row, not as blocks."""


@dataclass(frozen=True)
class Advice:
    """What the summary tells the user, in the backend's terms.

    ``fallback_hints`` maps a fallback counter's full name to a hint; others get
    ``fallback_hint``. ``host_read_how`` lists the user's calls that read a value back.
    """

    fallback_hints: Mapping[str, str] = field(default_factory=dict)
    fallback_hint: str = "ran on the CPU outside the compiled program"
    fallback_effect: str = "Each call leaves the compiled program."
    host_read_how: str = "reading values on the host"
    recompile: str = (
        "Shapes or Python values change between runs; keep shapes fixed (pad or bucket)."
    )
    cpu_device: str = (
        "Ran on the CPU, not on an accelerator: these times say nothing about accelerator speed."
    )
    fixes: Mapping[str, str] = field(default_factory=lambda: dict(NEUTRAL_FIXES))
    """The diagnosis's advice, one sentence per verdict (and per compile cause:
    ``growing graph``, ``changing shapes``, ``warm-up``, ``first run``; per transfer cause:
    ``host offload``), in the backend's words."""
    syncs: bool = False
    """Whether a loop must sync to end its graph (lazy tensors): a loop that compiles each
    step and never syncs grows one graph."""
    eager_compiles: bool = False
    """Whether eager calls compile one small program each (JAX): many compilations in one
    call, or a library helper compiled for several shapes, are then no alarm."""


NEUTRAL_FIXES: Mapping[str, str] = {
    "input": "Prefetch the next batch, or move its decoding off the step (a loader with "
    "worker processes).",
    "host": "Do more per step: fewer, larger ops (vectorize the inner Python loop), or a "
    "compiled function around the step.",
    "compile": "Keep shapes and Python values fixed between steps, so compiled programs are "
    "reused.",
    "changing shapes": "Pad the inputs to a few fixed sizes (bucketing), or drop the last "
    "partial batch.",
    "growing graph": "End each step where it should: the graph grows while nothing ends it.",
    "warm-up": "Only the first steps compiled: later runs of the same shapes reuse them.",
    "first run": "Run the cell again to see it without compiling (compiled programs are reused "
    "for the same shapes); for a loop, profile its steps with --steps after a warm-up run.",
    "transfer": "Keep the data on the device between steps, and copy less (smaller dtypes, "
    "only what the step needs).",
    "sync": "Read values back once, after the loop, instead of in every step.",
    "device": "The device computes most of the time: speed now comes from the model itself "
    "(fusing, a larger batch, a faster chip).",
    "collective": "The chips wait on collectives (all-reduce and the like): overlap them with "
    "compute, shard so that less crosses the chips, or communicate less often.",
    "host offload": "The chip waits for copies between its memory and the host's (host "
    "offload): keep those arrays in HBM if they fit, or start the copies earlier so that "
    "they overlap compute.",
}


@dataclass(frozen=True)
class Headings:
    """Section titles that name the backend."""

    metrics: str = "Runtime, this cell only"
    fallbacks: str = "Ops that fell back to the CPU"


@dataclass(frozen=True)
class CaptureWords:
    """What a capture tells the user, in the backend's terms."""

    stop_trace: str = "the profiler's stop_trace()"
    """The call that stops a trace the user's code left running."""
    sync_label: str = "sync (--sync)"
    """The label of the block ``--sync`` adds at the cell's end: what the backend's sync runs."""
    no_steps: str = (
        "the cell neither synced nor ran a loop; mark steps yourself with xprof_magic.step()"
    )
    """Why ``--steps`` found no step, and how to mark them."""
    shrink: str = "To shrink a capture, profile fewer steps (a shorter loop in the cell)."
    """How to make the next capture smaller."""
    workers: str = "start a profiler server in each worker and capture it with %xprof capture"
    """How to capture worker processes the run does not hold."""


@dataclass(frozen=True)
class Vocabulary:
    """A backend's words, so that the analysis itself names no profiler.

    The defaults (:data:`NEUTRAL`) say nothing backend-specific and read no metric: they
    serve runs whose backend is unknown.
    """

    backend: str = ""
    metrics: MetricNames = field(default_factory=MetricNames)
    timeline: TimelineNames = field(default_factory=TimelineNames)
    advice: Advice = field(default_factory=Advice)
    headings: Headings = field(default_factory=Headings)
    capture: CaptureWords = field(default_factory=CaptureWords)


NEUTRAL = Vocabulary()

_loaded: dict[str, Backend] = {}


def get_vocabulary(backend: str) -> Vocabulary:
    """The words of ``backend`` (a run's ``RunMetadata.backend``); :data:`NEUTRAL` if unknown."""
    module_name = VOCABULARIES.get(backend)
    if module_name is None:
        return NEUTRAL
    vocabulary = importlib.import_module(module_name).VOCABULARY
    assert isinstance(vocabulary, Vocabulary)
    return vocabulary


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
    return RunMetrics(counters, metrics, after.notes[len(before.notes) :])


def reset_profile_state(module: Any) -> None:
    """Forget a trace that a failed export left behind in ``module._profile_state``.

    torch_xla's and JAX's profiler modules keep one such state; after a failed
    ``stop_trace`` (a full disk) it still says a trace runs, and every later capture in the
    process would be refused.
    """
    state = getattr(module, "_profile_state", None)
    if state is not None and getattr(state, "profile_session", None) is not None:
        with state.lock:
            state.reset()


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` on any interface; an unexpected bind error
    (other than the port being in use, or no IPv6) is raised.

    The profiler servers bind the dual-stack wildcard and do not raise on a busy port (they
    log and serve nothing), so the port is checked first, the way they will bind it.
    """
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, port))
            return True
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return False
            if family == socket.AF_INET6:
                continue
            raise
    return True


def port_refusal(port: int, server: str, own: str = "") -> ServerStatus | None:
    """Why the profiler server called ``server`` ("JAX's profiler server") must not start on
    ``port``, or None when the port is free. ``own``: what to say instead when this very
    process already listens there (the user's own server); "" says it as any busy port."""
    try:
        free = port_is_free(port)
    except OSError as error:
        return ServerStatus(
            port,
            False,
            f"cannot use port {port} for {server} ({error.strerror or error}); "
            "use --port N for another port or --no-server to skip it",
        )
    if free:
        return None
    if own and listens_here(port):
        return ServerStatus(port, False, own)
    return ServerStatus(
        port,
        False,
        f"port {port} is busy, so {server} (on-demand capture) was not started; "
        "use --port N for another port or --no-server to skip it",
    )


def listens_here(port: int) -> bool:
    """Whether this very process listens on TCP ``port`` (Linux's ``/proc``; else False).

    A listening socket of ``/proc/self/net/tcp*`` whose inode is one of this process's
    open file descriptors.
    """
    inodes: set[str] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    if not inodes:
        return False
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
    return False
