"""torch_xla's worker launches, traced: forked workers trace themselves into the capture's folder.

``xmp.spawn`` (behind ``torch_xla.launch`` too) is wrapped so that they do.

Part of the torch_xla backend (:mod:`.torch_xla` hooks ``xmp.spawn`` with :func:`spawning` while a
cell runs), apart because a worker's own trace is its own concern: what it inherits from this
process at the fork, and when it starts and stops.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
from torch_xla import _XLAC  # type: ignore[attr-defined]

__all__ = ["spawning"]

# The profiler's own calls, before any capture hooks them.
_start_trace, _stop_trace = xp.start_trace, xp.stop_trace


def spawning(
    spawn: Callable[..., Any], on_workers: Callable[[str, bool], str | None]
) -> Callable[..., Any]:
    """``xmp.spawn``, its workers traced into the folder ``on_workers`` gives (forked only)."""

    def spawn_(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = inspect.signature(spawn).bind(*args, **kwargs)
        except TypeError:
            return spawn(*args, **kwargs)
        arguments = bound.arguments
        if arguments.get("nprocs") == 1:
            return spawn(*args, **kwargs)
        method = str(arguments.get("start_method", "spawn"))
        folder = None
        with contextlib.suppress(Exception):
            folder = on_workers(method, method == "fork")
        if folder is not None:
            arguments["fn"] = _TracedWorker(arguments["fn"], folder)
        return spawn(*bound.args, **bound.kwargs)

    return spawn_


class _TracedWorker:
    """The user's worker function, traced into ``<folder>/rank<N>`` in a forked worker.

    A forked worker inherits this process's profiling session, which makes its own
    ``start_trace`` fail ("Profile has already been started"); stopping that session would
    write a stray capture into this process's staging folder. Dropping it unwritten (its
    C++ destructor releases the profiler) frees the worker to trace itself. One trace per
    worker process, named after the first device index it runs (a process may run one
    thread per device). A class, not a closure: the process pool pickles the function.
    """

    _lock = threading.Lock()
    _running = 0

    def __init__(self, fn: Callable[..., Any], folder: str) -> None:
        self.fn = fn
        self.folder = folder

    def __call__(self, index: int, *args: Any) -> Any:
        started = self._enter(index)
        try:
            return self.fn(index, *args)
        finally:
            if started:
                self._exit()

    def _enter(self, index: int) -> bool:
        cls = type(self)
        with cls._lock:
            cls._running += 1
            if cls._running > 1:
                return True
            state = getattr(xp, "_profile_state", None)
            if state is not None and getattr(state, "profile_session", None) is not None:
                state.reset()
                gc.collect()
            try:
                _start_trace(os.path.join(self.folder, f"rank{index}"))
            except Exception:
                cls._running -= 1
                return False
            return True

    def _exit(self) -> None:
        cls = type(self)
        with cls._lock:
            cls._running -= 1
            if cls._running:
                return
            with contextlib.suppress(Exception):
                if _XLAC._xla_runtime_is_initialized():
                    xm.wait_device_ops()
                _stop_trace()
