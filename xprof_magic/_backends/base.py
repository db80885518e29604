"""What the backends share, written once: the profiler server's lifecycle, versions, trace guards.

The profiler server's lifecycle, the versions a run records, a second trace refused as
:class:`~xprof_magic._backends.TraceAlreadyRunning`, a failed export forgotten, and the
patch-and-restore of the profiler functions they hook.

A backend subclasses :class:`ProfilerBackend`, names its server and its packages, starts its server
in :meth:`~ProfilerBackend._serve`, and overrides only the hooks it has; each module's
``create() -> Backend`` is where mypy checks the result against the protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from importlib import metadata
from typing import Any

from xprof_magic._backends import ServerStatus, TraceAlreadyRunning
from xprof_magic._backends.ports import server_port

__all__ = [
    "OnUserTrace",
    "OnWorkers",
    "Patch",
    "ProfilerBackend",
    "guarded",
    "hooked",
    "installed_version",
    "once",
    "patched",
    "refused_if_running",
    "reset_profile_state",
]


Patch = tuple[object, str, Any]
"""``(owner, name, value)``: set ``owner.name`` to ``value`` while hooked."""
OnUserTrace = Callable[[str], None]
OnWorkers = Callable[[str, bool], str | None]


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class ProfilerBackend:
    """The parts every backend has alike.

    ``server`` names the profiler server in messages, ``packages`` are the distributions whose
    versions a run records, ``server_refusals`` the errors of :meth:`_serve` that mean the server
    did not start (said, not raised).
    """

    name: str
    server = "the profiler server"
    packages: tuple[str, ...] = ()
    server_refusals: tuple[type[Exception], ...] = ()

    def __init__(self, profiler: Any) -> None:
        """Keep ``profiler``, the module that keeps the running trace in its ``_profile_state``."""
        self._profiler = profiler
        self._server_status: ServerStatus | None = None
        self._asked_port: int | None = None
        self._told_port = False

    def start_server(self, port: int) -> ServerStatus:
        """Start the profiler server on ``port``, once per process, or on the next free port.

        The port is checked first (the servers bind every interface and serve nothing on a busy
        port), and a port another process holds gives way to the next free one, named
        (:func:`~xprof_magic._backends.ports.server_port`); a later ``--port`` is told once that it
        cannot apply.
        """
        running = self._server_status
        if running is not None and running.started:
            if port not in (running.port, self._asked_port) and not self._told_port:
                self._told_port = True
                return ServerStatus(
                    running.port,
                    True,
                    f"{self.server} already runs on port {running.port}; one server per "
                    "process, so --port applies to the first capture only",
                )
            return running
        chosen, said = server_port(port, self.server, self._own_server(port))
        if chosen is None:
            return ServerStatus(port, False, said)
        try:
            self._serve(chosen)
        except self.server_refusals as error:
            return ServerStatus(
                chosen, False, f"{self.server} did not start ({error}); use --no-server"
            )
        self._server_status, self._asked_port = ServerStatus(chosen, True), port
        return ServerStatus(chosen, True, said)

    def _serve(self, port: int) -> None:
        """Start the profiler's server on ``port`` (free, checked)."""
        raise NotImplementedError

    def start_trace(self, log_dir: str) -> None:
        with refused_if_running():
            self._start(log_dir)

    def stop_trace(self) -> None:
        """Stop the trace; one that a failed export (a full disk) left behind is forgotten too.

        Else every later capture in the process would be refused.
        """
        try:
            self._stop()
        finally:
            reset_profile_state(self._profiler)

    def _start(self, log_dir: str) -> None:
        """Start the profiler's trace into ``log_dir``."""
        raise NotImplementedError

    def _stop(self) -> None:
        """Stop the profiler's trace and write it."""
        raise NotImplementedError

    def _own_server(self, port: int) -> str:
        """What to say when this process already serves on ``port`` (the user's own server).

        "" says it as any busy port.
        """
        return ""

    def device_name(self) -> str:
        return ""

    def memory(self) -> tuple[float, float, float] | None:
        return None

    def ops_made(self) -> int:
        return -1

    def versions(self) -> dict[str, str]:
        found = ((dist, installed_version(dist)) for dist in self.packages)
        return {dist: version for dist, version in found if version is not None}

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        """Nothing to hook: nothing syncs and the user has no markers to see.

        A step is one iteration of the cell's loop (or what ``xprof_magic.step()`` marks).
        """
        return contextlib.nullcontext()

    def user_hooks(
        self,
        on_user_trace: Callable[[str], None],
        on_workers: Callable[[str, bool], str | None],
        namespace: dict[str, Any] | None = None,
    ) -> AbstractContextManager[None]:
        """While open, the profiler functions of :meth:`_user_patches` are replaced.

        The user's names bound to them are rebound too (:func:`hooked`).
        """
        return hooked(self._user_patches(on_user_trace, on_workers), namespace)

    def _user_patches(self, on_user_trace: OnUserTrace, on_workers: OnWorkers) -> list[Patch]:
        """The user's calls that start a trace of their own, or worker processes, wrapped.

        Wrapped to tell the capture first (a trace's: :func:`guarded`); none by default.
        """
        return []

    def watch(self) -> AbstractContextManager[None]:
        """The runtime counts everything itself."""
        return contextlib.nullcontext()


@contextlib.contextmanager
def refused_if_running() -> Iterator[None]:
    """A profiler's refusal to start a second trace, as ``TraceAlreadyRunning``.

    The refusal says "... already ..." and is raised as
    :class:`~xprof_magic._backends.TraceAlreadyRunning`; other errors as they are.
    """
    try:
        yield
    except RuntimeError as error:
        if "already" in str(error):
            raise TraceAlreadyRunning(str(error)) from None
        raise


def reset_profile_state(module: Any) -> None:
    """Forget a trace that a failed export left behind in ``module._profile_state``.

    torch_xla's, JAX's and TorchTPU's profiler modules keep one such state; after a failed
    ``stop_trace`` (a full disk) it still says a trace runs, and every later capture in the
    process would be refused.
    """
    state = getattr(module, "_profile_state", None)
    if state is not None and getattr(state, "profile_session", None) is not None:
        with state.lock:
            state.reset()


_ABSENT = object()


@contextlib.contextmanager
def patched(patches: Sequence[Patch]) -> Iterator[None]:
    """Replace each ``(owner, name, value)`` while open, and put back exactly what was there.

    That is the owner's own value, or none where it inherited the name (a class's base method).
    """
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextlib.contextmanager
def hooked(patches: Sequence[Patch], namespace: dict[str, Any] | None) -> Iterator[None]:
    """:func:`patched`, with the user's names bound to a replaced function rebound while open.

    The user's names in ``namespace`` bound to a replaced function
    (``from torch_xla.debug.profiler import start_trace`` in an earlier cell) are rebound to its
    replacement while open; those still bound to it after are given back.
    """
    replacements = {id(getattr(owner, name)): value for owner, name, value in patches}
    with patched(patches), _rebound(namespace, replacements):
        yield


@contextlib.contextmanager
def _rebound(
    namespace: dict[str, Any] | None, replacements: Mapping[int, Callable[..., Any]]
) -> Iterator[None]:
    names: dict[str, Any] = namespace if namespace is not None else {}
    rebound: dict[str, Any] = {}
    for key, value in list(names.items()):
        replacement = replacements.get(id(value))
        if replacement is not None and not key.startswith("_"):
            rebound[key] = value
            names[key] = replacement
    try:
        yield
    finally:
        for key, value in rebound.items():
            if names.get(key) is replacements[id(value)]:
                names[key] = value


def once(on_user_trace: OnUserTrace) -> OnUserTrace:
    """``on_user_trace`` told on the first call only: a capture's guards share one."""
    told = False

    def first(call: str) -> None:
        nonlocal told
        if not told:
            told = True
            with contextlib.suppress(Exception):
                on_user_trace(call)

    return first


def guarded(
    call: str,
    original: Callable[..., Any],
    on_user_trace: OnUserTrace,
    applies: Callable[[tuple[Any, ...], dict[str, Any]], bool] | None = None,
) -> Callable[..., Any]:
    """``original``, a call that starts the user's own trace, telling ``on_user_trace`` first.

    It tells ``on_user_trace(call)`` where ``applies`` to its arguments (always without it); a
    capture's guards share one :func:`once`, so that it is told once per capture.
    """

    def guard(*args: Any, **kwargs: Any) -> Any:
        if applies is None or applies(args, kwargs):
            on_user_trace(call)
        return original(*args, **kwargs)

    return guard
