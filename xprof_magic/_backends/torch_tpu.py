"""TorchTPU (PyPI ``torch-tpu``) behind the :class:`~xprof_magic._backends.Backend` interface.

Imported only when a capture first needs it. TorchTPU runs PyTorch eagerly on a TPU (the
``tpu`` device, PyTorch's ``PrivateUse1``); it writes the same XProf captures as torch_xla
and JAX. Without a TPU there is no ``tpu`` device: tensors stay on the CPU and only the host
is traced. Nothing here forces the device into existence: forcing it without a TPU aborts
the process and makes libtpu query the cloud metadata server.

Two routes to a capture, and each run's metadata says which one it took
(``versions["profiler route"]``):

- on a TPU, the public one: ``torch.profiler.profile(activities=[PrivateUse1],
  experimental_config=torch.tpu.profiler.TpuProfilerConfig(run_dir=...))``, started and
  stopped around the cell; if it fails to start, the private one with device tracing;
- otherwise TorchTPU's own ``torch_tpu._internal.profiler``: ``_impl.start_trace(log_dir,
  ProfileOptions(...))`` / ``stop_trace()``, the route of TorchTPU's profiling notebook.

Labels and steps are ``torch.profiler.record_function`` events (TorchTPU's own TraceMe
classes are no-ops in the open-source build). TorchTPU turns them, and every aten op, into
timeline events through a RecordFunction callback that only its profiler server's start
registers (``TpuProfilerServer::Start`` calls ``XProfCallbackHandler::Register`` before it
binds the port): that is why they appeared only after ``start_server(port)`` had run. This
module registers that callback itself before each trace, so labels do not depend on the
server, and ``--no-server`` opens no port. Steps carry ``step_num`` and ``_r`` in TraceMe's
own ``name#key=value#`` encoding, which the host tracer turns into the stats XProf reads.

Every private call goes through the one check of :mod:`.torch_tpu_private`: written for
torch-tpu 0.2; on another version that has moved one of them, the capture fails with one line
naming both versions. TorchTPU runs eagerly: no sync cuts a graph, so a step is one
iteration of the cell's loop (or what ``xprof_magic.step()`` marks), and no step hook is
needed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import torch
import torch.profiler

from xprof_magic._backends import Backend, MetricsSnapshot, TraceAlreadyRunning
from xprof_magic._backends.base import (
    OnUserTrace,
    OnWorkers,
    Patch,
    ProfilerBackend,
    guarded,
    once,
    refused_if_running,
)
from xprof_magic._backends.torch_tpu_private import Private, private_api, tpu
from xprof_magic._backends.torch_tpu_vocabulary import (
    CACHE_HITS,
    CACHE_REQUESTS,
    COMPILATION_DURATION,
    COMPILATIONS,
    PRIVATE_ROUTE,
    PUBLIC_ROUTE,
    ROUTE_KEY,
    STEPS_RECOMPILED,
)

__all__ = ["TorchTpuBackend", "create", "step_recompiles"]


def _seconds(value: Any) -> float:
    """A compilation duration as pybind11 gives it (a ``timedelta``) or as a number."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _has_device() -> bool:
    """Whether a ``tpu`` device exists; asks without forcing one."""
    try:
        if not torch.accelerator.is_available():
            return False
        accelerator = torch.accelerator.current_accelerator()
    except Exception:
        return False
    return accelerator is not None and accelerator.type == "tpu"


def step_recompiles(starts: dict[int, int], end: int) -> str:
    """The note for steps after the first that compiled; "" when none did.

    From TorchTPU's compile count at each step's start and at the end: ``starts`` maps a step number
    to ``num_compilations`` when it began. The first step compiling is warm-up; a later one
    compiling means the count grew across steps.
    """
    numbers = sorted(starts)
    grew: list[str] = []
    for i, number in enumerate(numbers[1:], start=1):
        after = starts[numbers[i + 1]] if i + 1 < len(numbers) else end
        compiled = after - starts[number]
        if compiled > 0:
            grew.append(f"+{compiled} in step {number}")
    if not grew:
        return ""
    listed = ", ".join(grew[:8]) + (", …" if len(grew) > 8 else "")
    return f"{STEPS_RECOMPILED}: {COMPILATIONS} grew after step {numbers[0]} ({listed})"


class _Event:
    """A ``record_function`` event, with ``stats`` in TraceMe's ``name#k=v,...#`` encoding.

    A step's event also notes the compile count where it starts.
    """

    def __init__(self, backend: TorchTpuBackend, name: str, stats: dict[str, Any]) -> None:
        self._backend = backend
        encoded = ",".join(f"{key}={value}" for key, value in stats.items())
        self._name = f"{name}#{encoded}#" if encoded else name
        self._step = stats.get("step_num")
        self._record: Any = None

    def __enter__(self) -> None:
        if isinstance(self._step, int):
            self._backend.step_began(self._step)
        self._record = torch.profiler.record_function(self._name)
        self._record.__enter__()

    def __exit__(self, *exc: Any) -> None:
        record, self._record = self._record, None
        if record is not None:
            record.__exit__(*exc)


class TorchTpuBackend(ProfilerBackend):
    """TorchTPU's profiler (public route on a TPU, private otherwise), server and counters."""

    name = "torch_tpu"
    server = "TorchTPU's profiler server"
    packages = ("torch", "torch-tpu", "libtpu", "xprof", "ipython", "xprof_magic")
    server_refusals = (ValueError,)  # one server per process: the user's own runs

    def __init__(self, private: Private | None = None) -> None:
        self._api = private or private_api()
        super().__init__(self._api.impl)
        self._public: Any = None
        self._pushed_on: int | None = None
        self._route = ""
        self._lock = threading.Lock()
        self._step_starts: dict[int, int] = {}
        self._notes: list[str] = []
        self._watching = False

    def _serve(self, port: int) -> None:
        """Start TorchTPU's profiler server (tsl's gRPC server), which binds ``[::]:port``.

        That is every interface.
        """
        self._api.start_server(port)

    def _own_server(self, port: int) -> str:
        return (
            f"this process already serves on-demand capture on port {port} (your own "
            "start_server?); %%xprof does not need the magic's, so it was not started"
        )

    def _start(self, log_dir: str) -> None:
        self._api.register_labels()
        failed = ""
        if _has_device():
            try:
                self._start_public(log_dir)
                return
            except TraceAlreadyRunning:
                raise
            except Exception as error:
                failed = f" (the public route failed: {error})"
        options = self._api.options(
            host_tracer_level=2, device_tracer_level=1 if failed else 0, python_tracer_level=0
        )
        self._api.start_trace(log_dir, options, worker_rank=None)
        self._route = PRIVATE_ROUTE + failed
        # As TorchTPU's own profile() does, on the thread that traces.
        with contextlib.suppress(Exception):
            self._api.push_enable()
            self._pushed_on = threading.get_ident()

    def _start_public(self, log_dir: str) -> None:
        """Not verified without a TPU: TorchTPU's documented route."""
        config = tpu().profiler.TpuProfilerConfig(
            run_dir=log_dir, host_tracer_level=2, device_tracer_level=1, python_tracer_level=0
        )
        profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.PrivateUse1],
            experimental_config=config,
        )
        with refused_if_running():
            profile.start()
        self._public = profile
        self._route = PUBLIC_ROUTE

    def stop_trace(self) -> None:
        public, self._public = self._public, None
        if public is not None:
            public.stop()
        else:
            super().stop_trace()

    def _stop(self) -> None:
        pushed, self._pushed_on = self._pushed_on, None
        if pushed == threading.get_ident():
            with contextlib.suppress(Exception):
                self._api.pop_enable()
        self._api.stop_trace()

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        return _Event(self, name, stats)

    def step_began(self, number: int) -> None:
        """Note TorchTPU's compile count where step ``number`` begins (the first time)."""
        count = self._compilations()
        with self._lock:
            self._step_starts.setdefault(number, count)

    def wait_for_device(self) -> None:
        if _has_device():
            torch.accelerator.synchronize()

    def runtime_started(self) -> bool:
        """Whether the TPU runtime is up; never without a ``tpu`` device."""
        if not _has_device():
            return False
        try:
            return bool(tpu().is_initialized())
        except Exception:
            return True

    def _user_patches(self, on_user_trace: OnUserTrace, on_workers: OnWorkers) -> list[Patch]:
        """The cell's own ``_impl.start_trace``, wrapped to call ``on_user_trace`` first.

        It is also behind TorchTPU's ``profile()``. ``on_user_trace`` stops the capture's trace: one
        trace per process, and the user's goes ahead as without the capture. The capture's own
        starts use the original. Worker processes are not intercepted.
        """
        impl, call = self._api.impl, "torch_tpu._internal.profiler._impl.start_trace"
        return [(impl, "start_trace", guarded(call, impl.start_trace, once(on_user_trace)))]

    def sync(self) -> None:
        """``torch.accelerator.synchronize()`` where a device exists; nothing otherwise."""
        self.wait_for_device()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Note the compile count at each step of this capture (none before it)."""
        with self._lock:
            self._step_starts, self._watching = {}, True
        try:
            yield
        finally:
            end = self._compilations()
            with self._lock:
                note = step_recompiles(self._step_starts, end)
                if note:
                    self._notes.append(note)
                self._step_starts, self._watching = {}, False

    def _stats(self) -> Any:
        try:
            return self._api.cache_stats()
        except Exception:
            return None

    def _compilations(self) -> int:
        stats = self._stats()
        return int(getattr(stats, "num_compilations", 0) or 0) if stats is not None else 0

    def metrics(self) -> MetricsSnapshot:
        """TorchTPU's compile counts and time, and the note of steps that compiled after the first.

        ``torch.tpu._get_cache_stats()``'s counts (zero without a TPU) and the compile time its
        entries report.
        """
        stats = self._stats()
        counters: dict[str, int] = {}
        metrics: dict[str, tuple[int, float]] = {}
        if stats is not None:
            for key in (COMPILATIONS, CACHE_HITS, CACHE_REQUESTS):
                counters[key] = int(getattr(stats, key, 0) or 0)
            entries = getattr(stats, "per_entry_stats", ()) or ()
            total = sum(_seconds(getattr(e, "compilation_duration", 0)) for e in entries)
            metrics[COMPILATION_DURATION] = (counters[COMPILATIONS], total)
        with self._lock:
            notes = tuple(self._notes)
            if self._watching:
                end = counters.get(COMPILATIONS, 0)
                note = step_recompiles(self._step_starts, end)
                notes += (note,) if note else ()
            return MetricsSnapshot(counters, metrics, notes)

    def device(self) -> str:
        return "TPU" if _has_device() else "CPU"

    def versions(self) -> dict[str, str]:
        found = super().versions()
        if self._route:
            found[ROUTE_KEY] = self._route
        return found


def create() -> Backend:
    return TorchTpuBackend()
