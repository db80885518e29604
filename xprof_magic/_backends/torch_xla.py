"""PyTorch/XLA behind the :class:`~xprof_magic._backends.Backend` interface.

Imported only when a capture first needs it: ``import torch_xla`` takes seconds.

Never starts the XLA runtime: a started runtime refuses ``xmp.spawn`` and
``torch_xla.launch`` for the rest of the process, so the server, the metrics, the device
kind and every hook use only calls that leave it as the user's code left it. Each hook into
torch_xla's own functions (syncs, step markers, the user's own tracing, worker launches:
:mod:`.torch_xla_workers`) puts back exactly what it replaced (:func:`.base.patched`).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from torch_xla import _XLAC  # type: ignore[attr-defined]

from xprof_magic._backends import Backend, MetricsSnapshot
from xprof_magic._backends.base import (
    OnUserTrace,
    OnWorkers,
    Patch,
    ProfilerBackend,
    guarded,
    once,
    patched,
)
from xprof_magic._backends.ports import listens_here
from xprof_magic._backends.torch_xla_workers import spawning

__all__ = ["TorchXlaBackend", "create"]


class TorchXlaBackend(ProfilerBackend):
    """torch_xla's profiler, server, metrics and device."""

    name = "torch_xla"
    server = "torch_xla's profiler server"
    packages = ("torch", "torch_xla", "xprof", "ipython", "xprof_magic")

    def __init__(self) -> None:
        super().__init__(xp)
        self._server: object | None = None

    def _serve(self, port: int) -> None:
        # The returned object is the server: dropping it shuts the server down. Only on
        # the master would ask xm.is_master_ordinal(), which starts the XLA runtime, and a
        # started runtime refuses xmp.spawn and torch_xla.launch for the rest of the process.
        self._server = xp.start_server(port, only_on_master=False)

    def _own_server(self, port: int) -> str:
        return (
            f"this process already serves on-demand capture on port {port} (your own "
            "xp.start_server?), so capture it through that server, e.g. "
            f"xp.trace('localhost:{port}', logdir); the magic's server was not "
            "started, and %%xprof itself does not need one"
        )

    def _start(self, log_dir: str) -> None:
        _start_trace(log_dir)

    def _stop(self) -> None:
        _stop_trace()

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        # A plain TraceMe: xp.Trace also opens an IR scope, which a sync inside would break.
        event: AbstractContextManager[Any] = _XLAC.profiler.TraceMe(name, **stats)
        return event

    def wait_for_device(self) -> None:
        # Before the user's code starts the runtime there is no device work to wait for,
        # and waiting would start it.
        if self.runtime_started():
            xm.wait_device_ops()

    def runtime_started(self) -> bool:
        return bool(_XLAC._xla_runtime_is_initialized())

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        """Wrap what every sync runs, and the user's step markers.

        ``torch_xla.sync()`` (also behind ``xm.mark_step()``, ``optimizer_step(...,
        barrier=True)``, MpDeviceLoader and ``StepTrace``) launches the pending graph with
        ``_XLAC._xla_step_marker`` and then calls ``xm._run_step_closures()`` once; a sync
        is reported there, so that the user's step closures run in the step that ends. The
        public ``xm.add_step_closure`` would do, but it starts the runtime (it looks up the
        default device), and a closure must be re-added before each sync, including the
        user's first, which is what starts the runtime.

        Only the syncs of the thread that opened the hooks (the cell's) are reported:
        MpDeviceLoader's threads, or the user's, are not the cell's steps. A sync launched
        work when graphs were looked up for launch inside its own ``_xla_step_marker``
        call: the counters are process-wide, so they are read around that call, on the
        cell's thread, rather than from one sync to the next, which would also count the
        graphs of ``.item()`` and of other threads in between.

        MpDeviceLoader's ``next()`` skips its sync when ``xp.get_tracer_marked_step()`` says
        a ``StepTrace`` just synced; nothing clears that flag but the loader, so a
        ``StepTrace`` run earlier in the process (another cell) makes the loader's first
        ``next()`` skip its sync. That skipped sync is reported as a sync that launched
        nothing: without it no sync would come before the first batch's work ended, and
        the loop's steps would be its iterations, leaving the graph's launch and compile,
        in the next ``next()``, outside every step. The flag itself is left as it is, so
        the user's graphs are cut where they would be without the capture.

        The user's markers are ``xp.Trace`` with ``_r`` (``xp.StepTrace`` is one), seen
        where they are made and where they exit.
        """
        owner = threading.get_ident()
        return patched(_sync_hooks(owner, on_sync) + _step_marker_hooks(on_user_step))

    def _user_patches(self, on_user_trace: OnUserTrace, on_workers: OnWorkers) -> list[Patch]:
        """Call ``on_user_trace`` before the user's first own trace, ``on_workers`` for workers.

        The user's ``xp.start_trace``, ``xp.trace`` and ``xp.trace_detached`` (whose thread calls
        ``xp.trace``) would fail, or capture nothing, while the capture's own trace runs: one
        profiling session per process. ``on_user_trace`` stops it, so the user's call goes ahead as
        without the capture.

        ``xmp.spawn`` is what ``torch_xla.launch`` calls too. ``on_workers(start_method, traced)``
        returns a folder when the workers should trace themselves into it: only forked workers can,
        since they inherit this module's hooks; each first drops the profiling session it inherited
        from this process (see :mod:`.torch_xla_workers`). ``nprocs=1`` runs the function here,
        inside this process's trace.

        The user's names bound to these functions, e.g. by
        ``from torch_xla.debug.profiler import start_trace`` in an earlier cell, are rebound to the
        guarded ones while the hooks are open, and given back after.
        """
        tell = once(on_user_trace)
        patches: list[Patch] = [
            (xp, name, guarded(f"xp.{name}", getattr(xp, name), tell, applies))
            for name, applies in (
                ("start_trace", None),
                ("trace", _targets_here),
                ("trace_detached", _targets_here),
            )
        ]
        return [*patches, (xmp, "spawn", spawning(xmp.spawn, on_workers))]

    def sync(self) -> None:
        torch_xla.sync()

    def metrics(self) -> MetricsSnapshot:
        counters = {name: int(met.counter_value(name) or 0) for name in met.counter_names()}
        metrics: dict[str, tuple[int, float]] = {}
        for name in met.metric_names():
            data = met.metric_data(name)
            if not data:
                continue
            total = float(data[1])
            metrics[name] = (int(data[0]), total / 1e9 if name.endswith("Time") else total)
        return MetricsSnapshot(counters, metrics)

    def device(self) -> str:
        return str(xr.device_type() or "unknown")

    def device_name(self) -> str:
        if not self.runtime_started():
            return ""
        try:
            return str(xm.xla_device_kind())
        except Exception:
            return ""

    def ops_made(self) -> int:
        """Every lazy tensor op traced makes an XLA tensor; tracing leaves no event."""
        return int(met.counter_value("CreateXlaTensor") or 0)

    def memory(self) -> tuple[float, float, float] | None:
        """The default device's ``xm.get_memory_info``: bytes used, peak bytes used, bytes limit.

        As ``bytes_used``, ``peak_bytes_used``, ``bytes_limit``.

        The CPU client has none: UNIMPLEMENTED.
        """
        if not self.runtime_started():
            raise LookupError("the runtime has not started: no memory figures yet")
        try:
            info = xm.get_memory_info(torch_xla.device())
        except Exception:
            return None
        if not isinstance(info, dict) or "bytes_used" not in info:
            return None
        figures: dict[str, Any] = dict(info)
        used = float(figures["bytes_used"])
        return (
            used,
            float(figures.get("peak_bytes_used", used)),
            float(figures.get("bytes_limit", 0)),
        )


# The profiler's own calls, before any capture hooks them.
_start_trace, _stop_trace = xp.start_trace, xp.stop_trace


def _sync_hooks(owner: int, on_sync: Callable[[bool], None]) -> list[Patch]:
    """What every sync runs, wrapped to report the syncs of thread ``owner``.

    See :meth:`TorchXlaBackend.step_hooks`.
    """
    step_marker = _XLAC._xla_step_marker
    run_closures = xm._run_step_closures
    marked_step = xp.get_tracer_marked_step
    since_last = [_executions()]
    in_marker: list[bool | None] = [None]

    def mark_step(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != owner:
            return step_marker(*args, **kwargs)
        before = _executions()
        try:
            return step_marker(*args, **kwargs)
        finally:
            in_marker[0] = _executions() != before

    def run_step_closures() -> Any:
        devctx = run_closures()
        if threading.get_ident() != owner:
            return devctx
        count = _executions()
        ran = in_marker[0]
        if ran is None:
            ran = count != since_last[0]
        in_marker[0], since_last[0] = None, count
        with contextlib.suppress(Exception):
            on_sync(ran)
        return devctx

    def get_marked_step() -> bool:
        marked = bool(marked_step())
        if marked and threading.get_ident() == owner:
            with contextlib.suppress(Exception):
                on_sync(False)
        return marked

    return [
        (_XLAC, "_xla_step_marker", mark_step),
        (xm, "_run_step_closures", run_step_closures),
        (xp, "get_tracer_marked_step", get_marked_step),
    ]


def _step_marker_hooks(on_user_step: Callable[[bool], None]) -> list[Patch]:
    """``xp.Trace`` wrapped to report where the user's step markers (``_r``) begin and end."""
    trace_init, trace_exit = xp.Trace.__init__, xp.Trace.__exit__

    def init(trace: Any, name: str, **kwargs: Any) -> None:
        if kwargs.get("_r"):
            trace.__dict__["_xprof_magic_step"] = True
            with contextlib.suppress(Exception):
                on_user_step(True)
        trace_init(trace, name, **kwargs)

    def exit_(trace: Any, *exc: Any) -> Any:
        try:
            return trace_exit(trace, *exc)
        finally:
            if trace.__dict__.pop("_xprof_magic_step", False):
                with contextlib.suppress(Exception):
                    on_user_step(False)

    return [(xp.Trace, "__init__", init), (xp.Trace, "__exit__", exit_)]


def _targets_here(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``xp.trace(service_addr, ...)`` would capture this very process.

    Capturing another process (a worker's server) does not clash with this process's
    trace; an address that cannot be read counts as this process, to be safe.
    """
    address = str(kwargs.get("service_addr", args[0] if args else ""))
    host, _, port = address.removeprefix("grpc://").rpartition(":")
    try:
        number = int(port)
    except ValueError:
        return True
    local = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "", socket.gethostname())
    return host.strip("[]") in local and listens_here(number)


def _executions() -> int:
    """Graphs looked up for launch so far, counted in the launching call.

    The ``ExecuteComputation`` counter moves later, on the thread that runs the graph.
    """
    return sum(int(met.counter_value(name) or 0) for name in ("CachedCompile", "UncachedCompile"))


def create() -> Backend:
    return TorchXlaBackend()
