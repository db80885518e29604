"""The viewer server manager: one loopback XProf server per log directory, reused across kernels.

The magic begins starting a viewer while the user's cell runs (:func:`begin_viewer`) and waits
for it afterwards (:meth:`ViewerStart.wait`). The server is a separate process (the file
``_viewer/process/server.py``, started by :mod:`xprof_magic._viewer.process.os_process`) that
records itself in a 0600 info file in a per-user folder, TensorBoard-style, so that a later
kernel finds and reuses it (:func:`find_viewer`) and any kernel can stop it
(:func:`stop_viewer`). Starting returns a typed outcome instead of raising, so that the front
end can tell the user what happened and what to do next. Talking to a viewer (its URLs, its
JSON) is :mod:`xprof_magic._viewer.process.client`. No IPython here.

Info files carry ``"format": 2``. A file without ``format`` was written by the earlier layout
(``xprof_magic/_viewer_server.py``, ``"version": 1``, the same fields and the same routes): its
viewer is found, reused, listed and stopped like any other. A file of a newer format, from a
newer xprof_magic, is left alone: not read, not removed, its pid never signalled.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from xprof_magic._viewer.process.client import (
    KINDS,
    Viewer,
    ViewerError,
    ViewerKind,
    answers,
    label,
)
from xprof_magic._viewer.process.info import (
    DEFAULT_GRACE_S,
    info_path,
    read_info,
    records,
    register_client,
)
from xprof_magic._viewer.process.os_process import (
    LaunchError,
    drop_record,
    exit_message,
    forget,
    is_viewer_process,
    pid_alive,
    port_busy_message,
    port_free,
    spawn,
    terminate,
    viewer_dir,
)

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_IDLE_TIMEOUT",
    "Failed",
    "Launched",
    "Restarted",
    "Reused",
    "ViewerOutcome",
    "ViewerStart",
    "begin_viewer",
    "ensure_viewer",
    "find_viewer",
    "list_viewers",
    "stop_viewer",
]

DEFAULT_IDLE_TIMEOUT = 3600.0
# Starts not yet concluded, by (logdir, kind): after a timed-out wait, the next cell joins the
# server already on its way up instead of starting a second one.
_starting: dict[tuple[str, str], ViewerStart] = {}


@dataclass(frozen=True)
class Reused:
    """A viewer for this log directory was already running and answered."""

    viewer: Viewer

    @property
    def message(self) -> str:
        v = self.viewer
        return (
            f"Reusing the {label(v.kind)} for {v.logdir} (pid {v.pid}, port {v.port}). "
            f"Use '!kill {v.pid}' to stop it."
        )


@dataclass(frozen=True)
class Launched:
    """A new viewer was started and answers."""

    viewer: Viewer

    @property
    def message(self) -> str:
        v = self.viewer
        return f"Started the {label(v.kind)} for {v.logdir} (pid {v.pid}, port {v.port})."


@dataclass(frozen=True)
class Restarted:
    """The previous viewer for this log directory had died; a new one answers."""

    viewer: Viewer
    reason: str

    @property
    def message(self) -> str:
        v = self.viewer
        reason = self.reason[:1].upper() + self.reason[1:]
        return f"{reason}; started a new one (pid {v.pid}, port {v.port})."


@dataclass(frozen=True)
class Failed:
    """No viewer is available; ``message`` says why and what to do."""

    message: str
    log_path: str | None = None


ViewerOutcome = Reused | Launched | Restarted | Failed


def _problem(viewer: Viewer) -> str | None:
    """None if the viewer is alive and answers, else what is wrong with it."""
    name = label(viewer.kind)
    if not pid_alive(viewer.pid):
        return f"the previous {name} (pid {viewer.pid}) is no longer running"
    if not answers(viewer):
        return f"the previous {name} (pid {viewer.pid}, port {viewer.port}) stopped answering"
    return None


def _resolve(logdir: str | os.PathLike[str]) -> str:
    return str(Path(logdir).expanduser().resolve())


def _scan(directory: Path, logdir: str, kind: str) -> tuple[Viewer | None, str | None]:
    """The newest live viewer for (logdir, kind), and why a recorded one was dropped, if so.

    Info files of dead or silent viewers are removed; a silent process is left alone (it may
    be a recycled pid) and exits at its idle timeout.
    """
    live: Viewer | None = None
    dropped: str | None = None
    for path, viewer in records(directory):
        if viewer.logdir != logdir or viewer.kind != kind:
            continue
        problem = _problem(viewer)
        if problem is None:
            if live is None or viewer.started > live.started:
                live = viewer
        else:
            drop_record(path)
            dropped = problem
    return live, dropped


def find_viewer(logdir: str | os.PathLike[str], kind: ViewerKind = "xprof") -> Viewer | None:
    """The live viewer serving ``logdir`` (pid alive and answering with its secret), if any."""
    try:
        directory = viewer_dir()
    except ViewerError:
        return None
    return _scan(directory, _resolve(logdir), kind)[0]


def list_viewers(kind: ViewerKind | None = None) -> list[Viewer]:
    """Every live viewer of this user, oldest first; stale info files are removed."""
    try:
        directory = viewer_dir()
    except ViewerError:
        return []
    live = []
    for path, viewer in records(directory):
        if kind is not None and viewer.kind != kind:
            continue
        if _problem(viewer) is None:
            live.append(viewer)
        else:
            drop_record(path)
    return sorted(live, key=lambda v: v.started)


def stop_viewer(viewer: Viewer, timeout: float = 5.0) -> bool:
    """Stop a viewer (SIGTERM, then SIGKILL); True if it was running.

    Works for viewers started by an earlier kernel too. A pid that now belongs to another
    program is never signalled; only the stale info file goes.
    """
    running = pid_alive(viewer.pid) and is_viewer_process(viewer)
    if running:
        terminate(viewer.pid, timeout)
    with contextlib.suppress(ViewerError):
        drop_record(Path(info_path(str(viewer_dir()), viewer.pid)))
    forget(viewer.pid)
    return running


class ViewerStart:
    """A viewer on its way up: begun before a cell runs, awaited after it.

    ``poll`` never blocks; ``wait`` blocks up to a timeout. The first conclusive outcome is
    kept, so waiting twice gives the same answer. A timeout is not conclusive: the server may
    still come up, and a later ``wait`` (or the next :func:`begin_viewer`) will find it.
    """

    def __init__(
        self,
        kind: ViewerKind,
        *,
        outcome: ViewerOutcome | None = None,
        process: subprocess.Popen[bytes] | None = None,
        directory: Path | None = None,
        port: int | None = None,
        log_path: Path | None = None,
        restarted_because: str | None = None,
    ) -> None:
        self.kind = kind
        self._outcome = outcome
        self._process = process
        self._directory = directory
        self._port = port
        self._log_path = log_path
        self._restarted_because = restarted_because

    @property
    def pid(self) -> int | None:
        """The new server's pid, or None when nothing was started."""
        return self._process.pid if self._process is not None else None

    @property
    def port(self) -> int | None:
        """The port asked for; None when any free port will do."""
        return self._port

    def poll(self) -> ViewerOutcome | None:
        """The outcome if known now, else None (the server is still starting)."""
        if self._outcome is not None:
            return self._outcome
        process, directory = self._process, self._directory
        if process is None or directory is None:
            raise RuntimeError("ViewerStart without an outcome or a process")
        exit_code = process.poll()
        if exit_code is not None:
            self._outcome = Failed(
                exit_message(self.kind, exit_code, self._port, self._log_path),
                self._log_text_path(),
            )
            return self._outcome
        viewer = read_info(Path(info_path(str(directory), process.pid)))
        if viewer is None or not answers(viewer, timeout=1.0):
            return None
        if self._restarted_because is not None:
            self._outcome = Restarted(viewer, self._restarted_because)
        else:
            self._outcome = Launched(viewer)
        return self._outcome

    def done(self) -> bool:
        """Whether :meth:`wait` would return at once with a conclusive outcome."""
        return self.poll() is not None

    def wait(self, timeout: float = 60.0) -> ViewerOutcome:
        """Block until the viewer answers, fails, or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while (outcome := self.poll()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Failed(self._timeout_message(timeout), self._log_text_path())
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, 0.05)
        return outcome

    def _log_text_path(self) -> str | None:
        return str(self._log_path) if self._log_path is not None else None

    def _timeout_message(self, timeout: float) -> str:
        pid = self.pid
        return (
            f"The {label(self.kind)} (pid {pid}) did not answer within {timeout:g} s. "
            f"It may still be starting: run the cell again to reuse it, or stop it with "
            f"'!kill {pid}'. Its log: {self._log_path}"
        )


def begin_viewer(
    logdir: str | os.PathLike[str],
    port: int | None = None,
    kind: ViewerKind = "xprof",
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    grace_s: float = DEFAULT_GRACE_S,
) -> ViewerStart:
    """Reuse the live viewer for ``logdir`` or start one, without waiting for it.

    ``port=None`` takes a free loopback port; a given port must be free, or match the running
    viewer's. ``logdir`` is created if missing (the magic is about to write there). This
    process registers with the viewer it gets: the server exits ``grace_s`` seconds after no
    registered process lives and no request came (a restarted kernel within that time reuses
    it), and after ``idle_timeout`` seconds without requests in any case (``<= 0``: never).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    try:
        directory = viewer_dir()
    except ViewerError as error:
        return ViewerStart(kind, outcome=Failed(str(error)))
    resolved = _resolve(logdir)
    try:
        Path(resolved).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        message = f"Cannot create the log directory {resolved}: {error}. Choose a writable folder."
        return ViewerStart(kind, outcome=Failed(message))
    live, dropped = _scan(directory, resolved, kind)
    if live is not None and (port is None or port == live.port):
        register_client(str(directory), live.pid, os.getpid())
        return ViewerStart(kind, outcome=Reused(live))
    pending = _starting.pop((resolved, kind), None)
    if pending is not None and pending.poll() is None and port in (None, pending.port):
        _starting[(resolved, kind)] = pending
        return pending
    refusal = _cannot_start(kind, port)
    if refusal is not None:
        return ViewerStart(kind, outcome=Failed(refusal))
    try:
        process, log_path = spawn(directory, resolved, kind, port, idle_timeout, grace_s)
    except LaunchError as error:
        return ViewerStart(kind, outcome=Failed(str(error), error.log_path))
    start = ViewerStart(
        kind,
        process=process,
        directory=directory,
        port=port,
        log_path=log_path,
        restarted_because=dropped,
    )
    _starting[(resolved, kind)] = start
    return start


def _cannot_start(kind: ViewerKind, port: int | None) -> str | None:
    """Why a new viewer of ``kind`` on ``port`` cannot start (None: it can try)."""
    if kind == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        return (
            "kind='tensorboard' needs TensorBoard and its profile plugin: "
            "pip install tensorboard tensorboard-plugin-profile, then run the cell again."
        )
    if port is not None:
        if not 0 < port < 65536:
            return f"Port {port} is not a TCP port; give one from 1 to 65535, or none."
        if not port_free(port):
            return port_busy_message(port, kind)
    return None


def ensure_viewer(
    logdir: str | os.PathLike[str],
    port: int | None = None,
    kind: ViewerKind = "xprof",
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    grace_s: float = DEFAULT_GRACE_S,
    timeout: float = 60.0,
) -> ViewerOutcome:
    """:func:`begin_viewer` and wait for it."""
    start = begin_viewer(logdir, port, kind, idle_timeout=idle_timeout, grace_s=grace_s)
    return start.wait(timeout)
