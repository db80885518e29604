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

Every private call is here, behind one check (:func:`_private_api`): written for torch-tpu
0.2; on another version that has moved one of them, the capture fails with one line naming
both versions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from typing import Any

import torch
import torch.profiler

from xprof_magic._backends import (
    MetricsSnapshot,
    ServerStatus,
    TraceAlreadyRunning,
    port_refusal,
    reset_profile_state,
)
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

TRIED = "0.2"
"""The torch-tpu release line whose private API this module was written against."""
_VERSIONED = ("torch", "torch-tpu", "libtpu", "xprof", "ipython", "xprof_magic")
_REGISTER_SYMBOL = "_ZN9torch_tpu20XProfCallbackHandler8RegisterEv"
_GLUE = "libpywrap_"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class _Private:
    """TorchTPU's private calls this backend makes, looked up once."""

    impl: Any
    start_trace: Callable[..., None]
    stop_trace: Callable[[], None]
    options: Callable[..., Any]
    start_server: Callable[[int], Any]
    push_enable: Callable[[], None]
    pop_enable: Callable[[], None]
    register_labels: Callable[[], None]
    cache_stats: Callable[[], Any]


def _label_callback() -> Callable[[], None]:
    """``torch_tpu::XProfCallbackHandler::Register()`` in TorchTPU's already loaded glue
    library: it adds the RecordFunction callback that turns labels and aten ops into
    timeline events, once per process (a static inside). Nothing else is loaded."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = {line.split()[-1] for line in maps if _GLUE in line and "torch_tpu" in line}
    for path in sorted(paths):
        if not path.endswith("_common.so"):
            continue
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        register = getattr(library, _REGISTER_SYMBOL)
        register.restype = None
        register.argtypes = []
        return register  # type: ignore[no-any-return]
    raise AttributeError("no loaded libpywrap_*_common.so holds XProfCallbackHandler::Register")


def _private_api() -> _Private:
    """The one version check: every private call, found or the one-line reason why not."""
    version = _version("torch-tpu")
    try:
        import torch_tpu  # noqa: F401  (torch loads it itself unless autoload is off)
        from torch_tpu._internal.profiler import _impl, _profiler_backend

        return _Private(
            impl=_impl,
            start_trace=_impl.start_trace,
            stop_trace=_impl.stop_trace,
            options=_impl.ProfileOptions,
            start_server=_impl.start_server,
            push_enable=_profiler_backend._push_enable_profiler,
            pop_enable=_profiler_backend._pop_enable_profiler,
            register_labels=_label_callback(),
            cache_stats=_tpu()._get_cache_stats,
        )
    except (ImportError, AttributeError, OSError) as error:
        raise RuntimeError(
            f"torch-tpu {version}: its private profiler API moved ({error}); xprof_magic's "
            f"torch_tpu backend was written for torch-tpu {TRIED}: pip install "
            f"'torch-tpu=={TRIED}.0', or profile with --backend torch_xla or jax"
        ) from None


def _tpu() -> Any:
    """``torch.tpu``, TorchTPU's device module, which torch's stubs do not know."""
    return torch.tpu  # type: ignore[attr-defined]


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
    """The note for steps after the first that compiled, from TorchTPU's compile count at
    each step's start and at the end; "" when none did.

    ``starts`` maps a step number to ``num_compilations`` when it began. The first step
    compiling is warm-up; a later one compiling means the count grew across steps.
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
    """A ``record_function`` event, with ``stats`` in TraceMe's ``name#k=v,...#`` encoding;
    a step's event also notes the compile count where it starts."""

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


class TorchTpuBackend:
    """TorchTPU's profiler (public route on a TPU, private otherwise), server and counters."""

    name = "torch_tpu"

    def __init__(self, private: _Private | None = None) -> None:
        self._api = private or _private_api()
        self._server_status: ServerStatus | None = None
        self._told_port = False
        self._public: Any = None
        self._pushed_on: int | None = None
        self._route = ""
        self._lock = threading.Lock()
        self._step_starts: dict[int, int] = {}
        self._notes: list[str] = []
        self._watching = False

    def start_server(self, port: int) -> ServerStatus:
        """TorchTPU's profiler server (tsl's gRPC server), which binds ``[::]:port``: every
        interface. Its start logs and serves nothing on a busy port, so the port is
        checked first."""
        if self._server_status is not None and self._server_status.started:
            running = self._server_status.port
            if running != port and not self._told_port:
                self._told_port = True
                return ServerStatus(
                    running,
                    True,
                    f"TorchTPU's profiler server already runs on port {running}; one server "
                    "per process, so --port applies to the first capture only",
                )
            return self._server_status
        own = (
            f"this process already serves on-demand capture on port {port} (your own "
            "start_server?); %%xprof does not need the magic's, so it was not started"
        )
        refused = port_refusal(port, "TorchTPU's profiler server", own)
        if refused is not None:
            return refused
        try:
            self._api.start_server(port)
        except ValueError as error:  # one server per process: the user's own runs
            return ServerStatus(
                port, False, f"TorchTPU's profiler server did not start ({error}); use --no-server"
            )
        self._server_status = ServerStatus(port, True)
        return self._server_status

    def start_trace(self, log_dir: str) -> None:
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
        try:
            self._api.start_trace(
                log_dir,
                self._api.options(
                    host_tracer_level=2,
                    device_tracer_level=1 if failed else 0,
                    python_tracer_level=0,
                ),
                worker_rank=None,
            )
        except RuntimeError as error:
            if "already" in str(error):
                raise TraceAlreadyRunning(str(error)) from None
            raise
        self._route = PRIVATE_ROUTE + failed
        # As TorchTPU's own profile() does, on the thread that traces.
        with contextlib.suppress(Exception):
            self._api.push_enable()
            self._pushed_on = threading.get_ident()

    def _start_public(self, log_dir: str) -> None:
        """Not verified without a TPU: TorchTPU's documented route."""
        config = _tpu().profiler.TpuProfilerConfig(
            run_dir=log_dir, host_tracer_level=2, device_tracer_level=1, python_tracer_level=0
        )
        profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.PrivateUse1],
            experimental_config=config,
        )
        try:
            profile.start()
        except RuntimeError as error:
            if "already" in str(error):
                raise TraceAlreadyRunning(str(error)) from None
            raise
        self._public = profile
        self._route = PUBLIC_ROUTE

    def stop_trace(self) -> None:
        public, self._public = self._public, None
        if public is not None:
            public.stop()
            return
        pushed, self._pushed_on = self._pushed_on, None
        try:
            if pushed == threading.get_ident():
                with contextlib.suppress(Exception):
                    self._api.pop_enable()
            self._api.stop_trace()
        finally:
            reset_profile_state(self._api.impl)

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
            return bool(_tpu().is_initialized())
        except Exception:
            return True

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        """TorchTPU runs eagerly: no sync cuts a graph, so a step is one iteration of the
        cell's loop (or what ``xprof_magic.step()`` marks)."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def user_hooks(
        self,
        on_user_trace: Callable[[str], None],
        on_workers: Callable[[str, bool], str | None],
        namespace: dict[str, Any] | None = None,
    ) -> Iterator[None]:
        """While open, the cell's own ``_impl.start_trace`` (also behind TorchTPU's
        ``profile()``) first calls ``on_user_trace``, which stops the capture's trace: one
        trace per process, and the user's goes ahead as without the capture. The capture's
        own starts use the original. A name in ``namespace`` bound to it is rebound while
        open. Worker processes are not intercepted."""
        impl, original = self._api.impl, self._api.impl.start_trace
        fired = [False]
        call = "torch_tpu._internal.profiler._impl.start_trace"

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not fired[0]:
                fired[0] = True
                with contextlib.suppress(Exception):
                    on_user_trace(call)
            return original(*args, **kwargs)

        names = namespace if namespace is not None else {}
        rebound = [k for k, v in names.items() if v is original and not k.startswith("_")]
        impl.start_trace = guarded
        for key in rebound:
            names[key] = guarded
        try:
            yield
        finally:
            impl.start_trace = original
            for key in rebound:
                if names.get(key) is guarded:
                    names[key] = original

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
        """``torch.tpu._get_cache_stats()``'s counts (zero without a TPU), the compile time
        its entries report, and the note of steps that compiled after the first."""
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
        found = {dist: _version(dist) for dist in _VERSIONED}
        found = {dist: v for dist, v in found.items() if v != "unknown"}
        if self._route:
            found[ROUTE_KEY] = self._route
        return found


def create() -> TorchTpuBackend:
    return TorchTpuBackend()
