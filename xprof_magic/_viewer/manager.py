"""The viewer server manager: one loopback XProf server per log directory, reused across kernels.

The magic begins starting a viewer while the user's cell runs (:func:`begin_viewer`) and waits
for it afterwards (:meth:`ViewerStart.wait`). The server is a separate process
(:mod:`xprof_magic._viewer.server`) that records itself in a 0600 info file in a per-user
folder, TensorBoard-style, so that a later kernel finds and reuses it (:func:`find_viewer`).
Starting returns a typed outcome instead of raising, so that the front end can tell the user
what happened and what to do next. No IPython here.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

from xprof_magic._viewer import server

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "TRACE_VIEWER_TOOL",
    "VIEWER_DIR_ENV",
    "Failed",
    "Launched",
    "Restarted",
    "Reused",
    "Viewer",
    "ViewerError",
    "ViewerKind",
    "ViewerOutcome",
    "ViewerRequestError",
    "ViewerStart",
    "begin_viewer",
    "ensure_viewer",
    "fetch_json",
    "find_viewer",
    "list_viewers",
    "stop_viewer",
    "viewer_dir",
]

ViewerKind = Literal["xprof", "tensorboard"]

DEFAULT_IDLE_TIMEOUT = 3600.0
VIEWER_DIR_ENV = "XPROF_MAGIC_VIEWER_DIR"
TRACE_VIEWER_TOOL = "trace_viewer@"
_LOG_RETENTION_S = 7 * 24 * 3600
_HEALTH_TIMEOUT_S = 2.0
_SERVER_SCRIPT = str(Path(server.__file__).resolve())
# What a viewer's command line holds: this layout's server script, and the earlier layout's.
_SERVER_MARKERS = (b"_viewer/server.py", b"_viewer_server")
_LABELS = {"xprof": "XProf viewer", "tensorboard": "TensorBoard viewer"}

# Our own server processes, so that their exit is reaped and a zombie is not taken for alive.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Starts not yet concluded, by (logdir, kind): after a timed-out wait, the next cell joins the
# server already on its way up instead of starting a second one.
_starting: dict[tuple[str, str], ViewerStart] = {}


class ViewerError(Exception):
    """The viewer cannot be used; the message names the problem and the next step."""


class ViewerRequestError(ViewerError):
    """A request to a running viewer failed."""


@dataclass(frozen=True)
class Viewer:
    """A running viewer, as recorded in its info file.

    Paths are server-relative and start with the secret prefix; ``prefix`` arguments prepend
    whatever the browser needs in front (a proxy's ``/proxy/<port>``). The secret stays out of
    ``repr`` so that printing a viewer in a notebook does not publish it.
    """

    pid: int
    port: int
    logdir: str
    secret: str = field(repr=False)
    kind: ViewerKind
    log_path: str
    started: float

    @property
    def base_path(self) -> str:
        """``/<secret>``: the only path prefix this server answers under."""
        return f"/{self.secret}"

    @property
    def origin(self) -> str:
        """Where the kernel (not necessarily the browser) reaches the server."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """A kernel-side URL for a path returned by the methods below."""
        return self.origin + path

    def ui_path(self, *, prefix: str = "") -> str:
        """The full UI with its own sidebar of runs, tools and hosts."""
        if self.kind == "tensorboard":
            return f"{prefix}{self.base_path}/#profile"
        return f"{prefix}{self.base_path}{server.PROFILE_ROUTE}/"

    def tool_path(self, run: str, tool: str, host: str | None = None, *, prefix: str = "") -> str:
        """The full UI opened on one tool of one run (``tool`` as ``run_tools`` lists it)."""
        if self.kind == "tensorboard":
            query = _query(run=run, tool=tool, host=host)
            return f"{prefix}{self.base_path}/?{query}#profile"
        query = _query(run=run, tag=tool, host=host)
        return f"{prefix}{self.base_path}{server.PROFILE_ROUTE}/{quote(tool, safe='@')}?{query}"

    def trace_viewer_path(
        self,
        run: str,
        host: str,
        *,
        prefix: str = "",
        view_start: float | None = None,
        view_end: float | None = None,
    ) -> str:
        """The timeline alone, without XProf's sidebar: the compact view under a cell.

        The page fetches ``trace_data_url`` from ``location.origin`` + that value, so the value
        is an absolute path that must carry ``prefix`` too.
        """
        data = self.data_path("data", prefix=prefix, run=run, tag=TRACE_VIEWER_TOOL, host=host)
        params: dict[str, str | float | None] = {
            "is_streaming": "true",
            "is_oss": "true",
            "trace_data_url": data,
        }
        if view_start is not None and view_end is not None:
            params.update(view_start=view_start, view_end=view_end)
        page = f"{prefix}{self.base_path}{server.PROFILE_ROUTE}/trace_viewer_index.html"
        return f"{page}?{_query(**params)}"

    def data_path(self, route: str, *, prefix: str = "", **params: str | float | None) -> str:
        """A data route of the profile plugin: ``runs``, ``run_tools``, ``hosts``, ``data``."""
        return self._route_path(route, prefix, params)

    def _route_path(self, route: str, prefix: str, params: Mapping[str, str | float | None]) -> str:
        path = f"{prefix}{self.base_path}{server.PROFILE_ROUTE}/{route}"
        query = _query(**params)
        return f"{path}?{query}" if query else path


def _query(**params: str | float | None) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def _label(kind: str) -> str:
    return _LABELS.get(kind, "viewer")


@dataclass(frozen=True)
class Reused:
    """A viewer for this log directory was already running and answered."""

    viewer: Viewer

    @property
    def message(self) -> str:
        v = self.viewer
        return (
            f"Reusing the {_label(v.kind)} for {v.logdir} (pid {v.pid}, port {v.port}). "
            f"Use '!kill {v.pid}' to stop it."
        )


@dataclass(frozen=True)
class Launched:
    """A new viewer was started and answers."""

    viewer: Viewer

    @property
    def message(self) -> str:
        v = self.viewer
        return f"Started the {_label(v.kind)} for {v.logdir} (pid {v.pid}, port {v.port})."


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


def viewer_dir() -> Path:
    """The private folder for info files and logs, created with mode 0700.

    ``$XPROF_MAGIC_VIEWER_DIR`` if set, else ``$XDG_RUNTIME_DIR/xprof_magic/viewers`` (per user,
    cleared at logout), else ``~/.cache/xprof_magic/viewers``.
    """
    configured = os.environ.get(VIEWER_DIR_ENV)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if configured:
        path = Path(configured).expanduser().absolute()
    elif runtime and Path(runtime).is_dir():
        path = Path(runtime) / "xprof_magic" / "viewers"
    else:
        path = Path.home() / ".cache" / "xprof_magic" / "viewers"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        status = path.stat()
        if hasattr(os, "getuid") and status.st_uid != os.getuid():
            raise ViewerError(
                f"The viewer folder {path} belongs to another user. "
                f"Set {VIEWER_DIR_ENV} to a folder of your own."
            )
        if status.st_mode & 0o077:
            path.chmod(0o700)
    except OSError as error:
        raise ViewerError(
            f"Cannot use the viewer folder {path}: {error}. "
            f"Set {VIEWER_DIR_ENV} to a writable folder of your own."
        ) from error
    return path


def _read_info(path: Path) -> Viewer | None:
    try:
        info = json.loads(path.read_text())
        return Viewer(
            pid=int(info["pid"]),
            port=int(info["port"]),
            logdir=str(info["logdir"]),
            secret=str(info["secret"]),
            kind=info["kind"] if info["kind"] in server.KINDS else "xprof",
            log_path=str(info["log_path"]),
            started=float(info["started"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _records(directory: Path) -> list[tuple[Path, Viewer]]:
    found = []
    for path in directory.glob(f"{server.INFO_PREFIX}*{server.INFO_SUFFIX}"):
        viewer = _read_info(path)
        if viewer is not None:
            found.append((path, viewer))
    return found


def _pid_alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_viewer_process(viewer: Viewer) -> bool:
    """Guards signals against a recycled pid: the command line must be our server's."""
    try:
        cmdline = Path(f"/proc/{viewer.pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return _pid_alive(viewer.pid) and _healthy(viewer)
    except OSError:
        return False
    return any(marker in cmdline for marker in _SERVER_MARKERS)


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """GET on loopback, gzip decoded; http.client ignores ``http_proxy``, which must not apply."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Accept-Encoding": "gzip"})
        response = connection.getresponse()
        body = response.read()
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, body
    finally:
        connection.close()


def _healthy(viewer: Viewer, timeout: float = _HEALTH_TIMEOUT_S) -> bool:
    """Whether this exact server answers: the secret is right and it reports the same pid."""
    try:
        status, body = _get(viewer.port, viewer.base_path + server.HEALTH_ROUTE, timeout)
        answer = json.loads(body) if status == 200 else {}
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return bool(answer.get("pid") == viewer.pid and answer.get("logdir") == viewer.logdir)


def _problem(viewer: Viewer) -> str | None:
    """None if the viewer is alive and answers, else what is wrong with it."""
    label = _label(viewer.kind)
    if not _pid_alive(viewer.pid):
        return f"the previous {label} (pid {viewer.pid}) is no longer running"
    if not _healthy(viewer):
        return f"the previous {label} (pid {viewer.pid}, port {viewer.port}) stopped answering"
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
    for path, viewer in _records(directory):
        if viewer.logdir != logdir or viewer.kind != kind:
            continue
        problem = _problem(viewer)
        if problem is None:
            if live is None or viewer.started > live.started:
                live = viewer
        else:
            path.unlink(missing_ok=True)
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
    for path, viewer in _records(directory):
        if kind is not None and viewer.kind != kind:
            continue
        if _problem(viewer) is None:
            live.append(viewer)
        else:
            path.unlink(missing_ok=True)
    return sorted(live, key=lambda v: v.started)


def stop_viewer(viewer: Viewer, timeout: float = 5.0) -> bool:
    """Stop a viewer (SIGTERM, then SIGKILL); True if it was running.

    Works for viewers started by an earlier kernel too. A pid that now belongs to another
    program is never signalled; only the stale info file goes.
    """
    running = _pid_alive(viewer.pid) and _is_viewer_process(viewer)
    if running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(viewer.pid, signal.SIGTERM)
        if not _wait_exit(viewer.pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(viewer.pid, signal.SIGKILL)
            _wait_exit(viewer.pid, 2.0)
    with contextlib.suppress(ViewerError):
        server_info = Path(server.info_path(str(viewer_dir()), viewer.pid))
        server_info.unlink(missing_ok=True)
    _children.pop(viewer.pid, None)
    return running


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound, the way the server will bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_busy_message(port: int, kind: str) -> str:
    return (
        f"Port {port} on 127.0.0.1 is already in use, so the {_label(kind)} cannot start there. "
        "Choose another port, or leave the port unset to get a free one."
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        with path.open("rb") as stream:
            stream.seek(0, os.SEEK_END)
            stream.seek(max(0, stream.tell() - 8192))
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _prune_logs(directory: Path) -> None:
    """Logs of viewers gone for a week are of no use; keep the folder small."""
    cutoff = time.time() - _LOG_RETENTION_S
    for log in directory.glob("viewer-*.log"):
        with contextlib.suppress(OSError):
            if log.stat().st_mtime < cutoff:
                log.unlink()


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    for inherited in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(inherited, None)
    return env


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
            self._outcome = Failed(self._exit_message(exit_code), self._log_text_path())
            return self._outcome
        viewer = _read_info(Path(server.info_path(str(directory), process.pid)))
        if viewer is None or not _healthy(viewer, timeout=1.0):
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

    def _exit_message(self, code: int) -> str:
        label = _label(self.kind)
        tail = _tail(self._log_path) if self._log_path is not None else ""
        if code == server.EXIT_PORT_IN_USE and self._port is not None:
            return _port_busy_message(self._port, self.kind)
        if code == server.EXIT_MISSING_DEPENDENCY:
            package = (
                "tensorboard tensorboard-plugin-profile" if self.kind == "tensorboard" else "xprof"
            )
            return (
                f"The {label} could not load its packages:\n{tail}\n"
                f"Install them in the kernel's environment (pip install {package}) "
                "and run the cell again."
            )
        return (
            f"The {label} exited during startup (exit code {code}). "
            f"Last lines of its log {self._log_path}:\n{tail}\n"
            "Fix the problem shown there and run the cell again."
        )

    def _timeout_message(self, timeout: float) -> str:
        pid = self.pid
        return (
            f"The {_label(self.kind)} (pid {pid}) did not answer within {timeout:g} s. "
            f"It may still be starting: run the cell again to reuse it, or stop it with "
            f"'!kill {pid}'. Its log: {self._log_path}"
        )


def begin_viewer(
    logdir: str | os.PathLike[str],
    port: int | None = None,
    kind: ViewerKind = "xprof",
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> ViewerStart:
    """Reuse the live viewer for ``logdir`` or start one, without waiting for it.

    ``port=None`` takes a free loopback port; a given port must be free, or match the running
    viewer's. ``logdir`` is created if missing (the magic is about to write there). The server
    exits after ``idle_timeout`` seconds without requests (``<= 0``: never).
    """
    if kind not in server.KINDS:
        raise ValueError(f"kind must be one of {server.KINDS}, not {kind!r}")
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
        return ViewerStart(kind, outcome=Reused(live))
    pending = _starting.pop((resolved, kind), None)
    if pending is not None and pending.poll() is None and port in (None, pending.port):
        _starting[(resolved, kind)] = pending
        return pending
    if kind == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        message = (
            "kind='tensorboard' needs TensorBoard and its profile plugin: "
            "pip install tensorboard tensorboard-plugin-profile, then run the cell again."
        )
        return ViewerStart(kind, outcome=Failed(message))
    if port is not None:
        if not 0 < port < 65536:
            message = f"Port {port} is not a TCP port; give one from 1 to 65535, or none."
            return ViewerStart(kind, outcome=Failed(message))
        if not _port_free(port):
            return ViewerStart(kind, outcome=Failed(_port_busy_message(port, kind)))
    _prune_logs(directory)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = directory / f"viewer-{kind}-{stamp}-{secrets.token_hex(3)}.log"
    secret = secrets.token_urlsafe(24)
    command = [
        sys.executable,
        "-c",
        "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')",
        _SERVER_SCRIPT,
        "--logdir",
        resolved,
        "--kind",
        kind,
        "--port",
        str(port or 0),
        "--idle-timeout",
        repr(float(idle_timeout)),
        "--info-dir",
        str(directory),
        "--log-path",
        str(log_path),
    ]
    try:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as error:
        message = f"Cannot write the viewer's log {log_path}: {error}. Free some space or set "
        return ViewerStart(kind, outcome=Failed(message + f"{VIEWER_DIR_ENV} to another folder."))
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=log_fd,
            stderr=log_fd,
            cwd="/",
            env=_child_environment(),
            start_new_session=True,
        )
    except OSError as error:
        message = f"Cannot start the {_label(kind)} ({sys.executable}): {error}."
        return ViewerStart(kind, outcome=Failed(message, str(log_path)))
    finally:
        os.close(log_fd)
    _children[process.pid] = process
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(secret.encode() + b"\n")
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
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


def ensure_viewer(
    logdir: str | os.PathLike[str],
    port: int | None = None,
    kind: ViewerKind = "xprof",
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    timeout: float = 60.0,
) -> ViewerOutcome:
    """:func:`begin_viewer` and wait for it."""
    return begin_viewer(logdir, port, kind, idle_timeout=idle_timeout).wait(timeout)


def fetch_json(
    viewer: Viewer, route: str, *, timeout: float = 60.0, **params: str | float | None
) -> Any:
    """GET a profile data route (``runs``, ``run_tools``, ``hosts``, ``data``) as JSON."""
    label = _label(viewer.kind)
    try:
        status, body = _get(viewer.port, viewer._route_path(route, "", params), timeout)
    except (OSError, http.client.HTTPException) as error:
        raise ViewerRequestError(
            f"The {label} on port {viewer.port} did not answer ({error}). "
            "It may have exited; run the cell again to restart it."
        ) from error
    if status != 200:
        detail = body[:300].decode("utf-8", "replace").strip()
        raise ViewerRequestError(
            f"The {label} answered {status} for {route}: {detail}. See its log: {viewer.log_path}"
        )
    try:
        return json.loads(body)
    except ValueError as error:
        raise ViewerRequestError(
            f"The {label} sent something other than JSON for {route}: {error}."
        ) from error
