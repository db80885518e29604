"""JAX behind the :class:`~xprof_magic._backends.Backend` interface, with ``jax.profiler``.

Imported only when a capture first needs it. JAX has no lazy graph and no sync: work is
dispatched asynchronously as each jitted call (or eager op) runs, so ``--steps`` marks the
iterations of the cell's loop, and waiting for the device means waiting for the arrays that
are alive (which include those the cell bound to names, and its value).

Compilations are counted from ``jax.monitoring`` duration events, by a listener registered
only while a capture runs (:meth:`JaxBackend.watch`) and removed afterwards, leaving the
user's own listeners alone. Nothing of the user's is intercepted: the cell's own
``jax.profiler.start_trace`` fails while the capture traces (one trace per process), as it
does inside any trace, and JAX starts no worker processes of its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import jax
import jax.monitoring
import jax.profiler
from jax._src import profiler as _profiler_state

from xprof_magic._backends import Backend, MetricsSnapshot
from xprof_magic._backends.base import ProfilerBackend, patched
from xprof_magic._backends.jax_vocabulary import (
    BACKEND_COMPILE,
    CACHE_EVENTS,
    FUNCTION_COMPILE,
    LIBRARY_COMPILE,
    LOWER,
    TRACE,
)

__all__ = ["JaxBackend", "create"]


def _library_names() -> frozenset[str]:
    """Names of JAX's primitives and of its library functions.

    An eager op compiles as ``jit(<primitive>)``, and ``jax.numpy`` helpers (``unstack`` when a loop
    iterates over an array) as ``jit(<helper>)``, once per shape, which is no recompile of the
    user's code. A function of the user's named like one of them is counted among them.
    """
    import jax.lax
    import jax.nn
    import jax.numpy
    import jax.random

    names = set(dir(jax.numpy)) | set(dir(jax.lax)) | set(dir(jax.nn)) | set(dir(jax.random))
    with contextlib.suppress(ImportError):
        import jax.extend.core.primitives as primitives

        found = (getattr(getattr(primitives, n), "name", None) for n in dir(primitives))
        names.update(n for n in found if isinstance(n, str))
    return frozenset(n for n in names if not n.startswith("__"))


def _unregister(callback: Callable[..., None]) -> None:
    """Remove exactly our listener.

    With the public call where the version has it (jax 0.8+), else the private one of jax 0.7
    (``_unregister_event_duration_listener_by_callback``).
    """
    public = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if public is not None:
        public(callback)
        return
    from jax._src import monitoring

    private = getattr(monitoring, "_unregister_event_duration_listener_by_callback", None)
    if private is None:
        raise RuntimeError(f"jax {jax.__version__} offers no way to remove one listener")
    private(callback)


def _event_unregister() -> Callable[[Callable[..., None]], None] | None:
    """How to remove one event listener, or None: then none is registered."""
    public = getattr(jax.monitoring, "unregister_event_listener", None)
    if public is not None:
        return public  # type: ignore[no-any-return]
    from jax._src import monitoring

    return getattr(monitoring, "_unregister_event_listener_by_callback", None)


class JaxBackend(ProfilerBackend):
    """``jax.profiler``'s trace and server, ``jax.monitoring``'s compile events, the device."""

    name = "jax"
    server = "JAX's profiler server"
    packages = ("jax", "jaxlib", "xprof", "ipython", "xprof_magic")
    server_refusals = (Exception,)  # one server per process: the user may have started one

    def __init__(self) -> None:
        super().__init__(_profiler_state)
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self._metrics: dict[str, tuple[int, float]] = {}
        self._library = _library_names()
        self._notes: list[str] = []

    def _serve(self, port: int) -> None:
        jax.profiler.start_server(port)

    def _start(self, log_dir: str) -> None:
        jax.profiler.start_trace(log_dir, **_options())

    def _stop(self) -> None:
        jax.profiler.stop_trace()

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        if stats and "#" not in name and all(type(v) is int for v in stats.values()):
            # The profiler's own encoding of an event's stats, written here: a third
            # cheaper than its keywords, which a loop of tiny steps pays each step.
            encoded = ",".join(f"{key}={value}" for key, value in stats.items())
            event: AbstractContextManager[Any] = jax.profiler.TraceAnnotation(f"{name}#{encoded}#")
        else:
            event = jax.profiler.TraceAnnotation(name, **stats)
        return event

    def wait_for_device(self) -> None:
        """Wait for every live array: the cell's names', its value, and any other still referenced.

        ``jax.effects_barrier()`` alone waits only for effects. Never starts the runtime (on a TPU
        that torch_xla holds, starting it would fail).
        """
        if not self.runtime_started():
            return
        arrays = [a for a in jax.live_arrays() if not a.is_deleted()]
        try:
            jax.block_until_ready(arrays)
        except Exception:
            # One array's failed computation must not hide the others' wait.
            for array in arrays:
                with contextlib.suppress(Exception):
                    array.block_until_ready()
        jax.effects_barrier()

    def runtime_started(self) -> bool:
        from jax._src import xla_bridge

        started = getattr(xla_bridge, "backends_are_initialized", None)
        return bool(started()) if started is not None else bool(xla_bridge._backends)

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        """Report where the user's ``StepTraceAnnotation`` markers begin and end.

        Only those on the cell's thread. JAX never syncs, so only these are reported; otherwise a
        step is one iteration of the cell's loop.
        """
        owner = threading.get_ident()
        step_class = jax.profiler.StepTraceAnnotation
        init, exit_ = step_class.__init__, step_class.__exit__

        def hooked_init(annotation: Any, name: str, **kwargs: Any) -> None:
            init(annotation, name, **kwargs)
            if threading.get_ident() == owner:
                with contextlib.suppress(Exception):
                    on_user_step(True)

        def hooked_exit(annotation: Any, *exc: Any) -> Any:
            try:
                return exit_(annotation, *exc)
            finally:
                if threading.get_ident() == owner:
                    with contextlib.suppress(Exception):
                        on_user_step(False)

        return patched(
            [(step_class, "__init__", hooked_init), (step_class, "__exit__", hooked_exit)]
        )

    def sync(self) -> None:
        """No lazy graph to cut: wait for the dispatched work instead."""
        self.wait_for_device()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Count compilations, traces and cache events while one capture runs."""

        def on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
            if event not in (BACKEND_COMPILE, TRACE, LOWER):
                return
            name = str(kwargs.get("fun_name", ""))
            with self._lock:
                self._add(event, duration_secs)
                if event == BACKEND_COMPILE and name:
                    inner = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
                    prefix = LIBRARY_COMPILE if inner in self._library else FUNCTION_COMPILE
                    self._add(prefix + name, duration_secs)

        def on_event(event: str, **kwargs: str | int) -> None:
            if event in CACHE_EVENTS:
                with self._lock:
                    self._counters[event] = self._counters.get(event, 0) + 1

        unregister_event = _event_unregister()
        explaining = self._explaining()
        explaining.__enter__()
        jax.monitoring.register_event_duration_secs_listener(on_duration)
        if unregister_event is not None:
            jax.monitoring.register_event_listener(on_event)
        try:
            yield
        finally:
            try:
                _unregister(on_duration)
            finally:
                try:
                    if unregister_event is not None:
                        unregister_event(on_event)
                finally:
                    explaining.__exit__(None, None, None)

    @contextlib.contextmanager
    def _explaining(self) -> Iterator[None]:
        """Collect JAX's explanations of why a function traced and compiled again.

        They explain its tracing-cache misses; ``jax_explain_cache_misses`` is turned on for the
        capture when the user had not. Then its log records are kept from the cell's output, which
        stays as it would be without the magic; when the user had, they are also shown as usual.
        """
        handler = _Explanations(self._notes, self._lock)
        loggers = [logging.getLogger(name) for name in _EXPLAINING_LOGGERS]
        config = jax.config
        users = bool(getattr(config, "jax_explain_cache_misses", False))
        propagates = [logger.propagate for logger in loggers]
        for logger in loggers:
            logger.addHandler(handler)
            if not users:
                logger.propagate = False
        if not users:
            config.update("jax_explain_cache_misses", True)
        try:
            yield
        finally:
            if not users:
                config.update("jax_explain_cache_misses", False)
            for logger, propagate in zip(loggers, propagates, strict=True):
                logger.removeHandler(handler)
                logger.propagate = propagate

    def _add(self, name: str, duration: float) -> None:
        count, total = self._metrics.get(name, (0, 0.0))
        self._metrics[name] = (count + 1, total + duration)

    def metrics(self) -> MetricsSnapshot:
        with self._lock:
            return MetricsSnapshot(dict(self._counters), dict(self._metrics), tuple(self._notes))

    def device(self) -> str:
        if not self.runtime_started():
            return "unknown"
        try:
            platform = str(jax.devices()[0].platform)
        except Exception:
            return "unknown"
        return {"cuda": "GPU", "rocm": "GPU", "gpu": "GPU"}.get(platform, platform.upper())

    def device_name(self) -> str:
        if not self.runtime_started():
            return ""
        try:
            return str(jax.devices()[0].device_kind)
        except Exception:
            return ""

    def memory(self) -> tuple[float, float, float] | None:
        """``Device.memory_stats()`` of the first device (None on the CPU backend)."""
        if not self.runtime_started():
            raise LookupError("the runtime has not started: no memory figures yet")
        try:
            stats = jax.devices()[0].memory_stats()
        except Exception:
            return None
        if not stats or "bytes_in_use" not in stats:
            return None
        used = float(stats["bytes_in_use"])
        return used, float(stats.get("peak_bytes_in_use", used)), float(stats.get("bytes_limit", 0))


# Where JAX logs its explanations of cache misses: the tracing cache (jax 0.8+ and 0.7), the
# compiler and the persistent compilation cache.
_EXPLAINING_LOGGERS = (
    "jax._src.interpreters.partial_eval",
    "jax._src.pjit",
    "jax._src.compiler",
    "jax._src.compilation_cache",
)
_MISS = "TRACING CACHE MISS"
_BOILERPLATE = ("all previously seen cache keys differ", "for the closest previous key")


class _Explanations(logging.Handler):
    """Keeps ``<function>: <why>`` for each tracing-cache miss of a function seen before."""

    def __init__(self, notes: list[str], lock: threading.Lock) -> None:
        super().__init__(logging.DEBUG)
        self._notes, self._lock = notes, lock

    def emit(self, record: logging.LogRecord) -> None:
        try:
            note = explanation(record.getMessage())
        except Exception:
            return
        if note:
            with self._lock:
                self._notes.append(note)


def explanation(message: str) -> str:
    """What JAX's ``TRACING CACHE MISS`` message says changed; "" for others and first compiles.

    As ``train_step: different input types: at w, now f32[4] and before f32[3]``.
    """
    lines = [line.strip() for line in message.splitlines()]
    if not lines or not lines[0].startswith(_MISS) or len(lines) < 3:
        return ""
    head = lines[1]
    if not head.startswith("for ") or " defined at " not in head:
        return ""  # "never seen function": its first compilation
    name = head[len("for ") : head.index(" defined at ")]
    parts = []
    for line in lines[2:]:
        text = line.lstrip("* ").rstrip(".:")
        if text and not text.lower().startswith(_BOILERPLATE):
            parts.append(text)
    return f"{name}: {'; '.join(parts)}" if parts else ""


def _options() -> dict[str, Any]:
    """The profiler's options: no Python tracer (torch_xla's default too).

    The Python tracer records every Python call (tens of thousands of events for a small cell, and
    the magic's own frames), burying the labels.
    """
    make = getattr(jax.profiler, "ProfileOptions", None)
    if make is None:
        return {}
    options = make()
    options.python_tracer_level = 0
    return {"profiler_options": options}


def create() -> Backend:
    return JaxBackend()
