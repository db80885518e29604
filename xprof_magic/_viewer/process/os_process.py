"""A viewer's server as an OS process: starting it, telling it from a recycled pid, ending it.

The server is ``_viewer/process/server.py`` run by path in a fresh Python (see
:data:`_BOOTSTRAP`), in its own session so that it outlives the kernel, with its secret
written to its stdin and its output in a 0600 log file in the viewer folder
(:func:`viewer_dir`), next to the info files.
Before a pid is signalled its command line must name a server script (:data:`SERVER_MARKERS`),
so that a pid recycled by another program is never touched. Whether to start, reuse or stop a
viewer is :mod:`xprof_magic._viewer.process.manager`'s decision. No IPython here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from xprof_magic._viewer.process.client import Viewer, ViewerError, answers, label
from xprof_magic._viewer.process.info import (
    DEFAULT_GRACE_S,
    EXIT_MISSING_DEPENDENCY,
    EXIT_PORT_IN_USE,
    INFO_PREFIX,
    INFO_SUFFIX,
    alive,
    clients_path,
)

__all__ = [
    "SERVER_MARKERS",
    "VIEWER_DIR_ENV",
    "LaunchError",
    "drop_record",
    "exit_message",
    "forget",
    "is_viewer_process",
    "pid_alive",
    "port_busy_message",
    "port_free",
    "spawn",
    "terminate",
    "viewer_dir",
]

VIEWER_DIR_ENV = "XPROF_MAGIC_VIEWER_DIR"
_LOG_RETENTION_S = 7 * 24 * 3600
_SERVER_SCRIPT = str(Path(__file__).resolve().with_name("server.py"))
# The folder holding this copy of xprof_magic: first on the server's sys.path, so that the
# server imports the same guard and store as the kernel, installed or not.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
# Run by path, not ``-m``: the command line then names ``_viewer/process/server.py``, which
# ``stop_viewer`` checks before it signals a pid, and a test can substitute a stub script.
_BOOTSTRAP = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_path(sys.argv.pop(1), run_name='__main__')"
)
# What a viewer's command line holds: this layout's server script, and the earlier layouts'
# (``xprof_magic/_viewer/server.py``, ``xprof_magic/_viewer_server.py``), so that viewers
# they started can still be stopped.
SERVER_MARKERS = (b"_viewer/process/server.py", b"_viewer/server.py", b"_viewer_server")
# Our own server processes, so that their exit is reaped and a zombie is not taken for alive.
_children: dict[int, subprocess.Popen[bytes]] = {}


class LaunchError(ViewerError):
    """The server process could not be started; ``log_path`` is its log, if one was made."""

    def __init__(self, message: str, log_path: str | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


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


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound, the way the server will bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_busy_message(port: int, kind: str) -> str:
    return (
        f"Port {port} on 127.0.0.1 is already in use, so the {label(kind)} cannot start there. "
        "Choose another port, or leave the port unset to get a free one."
    )


def spawn(
    directory: Path,
    logdir: str,
    kind: str,
    port: int | None,
    idle_timeout: float,
    grace_s: float = DEFAULT_GRACE_S,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start a server for ``logdir`` (resolved) recording itself in ``directory``.

    This process is registered as its first client (it exits ``grace_s`` after its clients are
    gone).

    Returns the process and its log file without waiting; raises :class:`LaunchError` when
    the log cannot be written or Python cannot be started.
    """
    _prune_logs(directory)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = directory / f"viewer-{kind}-{stamp}-{secrets.token_hex(3)}.log"
    secret = secrets.token_urlsafe(24)
    command = _command(directory, logdir, kind, port, idle_timeout, grace_s, log_path)
    try:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as error:
        raise LaunchError(
            f"Cannot write the viewer's log {log_path}: {error}. Free some space or set "
            f"{VIEWER_DIR_ENV} to another folder."
        ) from error
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
        message = f"Cannot start the {label(kind)} ({sys.executable}): {error}."
        raise LaunchError(message, str(log_path)) from error
    finally:
        os.close(log_fd)
    _children[process.pid] = process
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(secret.encode() + b"\n")
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
    return process, log_path


def _command(
    directory: Path,
    logdir: str,
    kind: str,
    port: int | None,
    idle_timeout: float,
    grace_s: float,
    log_path: Path,
) -> list[str]:
    """The server's command line: this Python, the package root first on its path."""
    return [
        sys.executable,
        "-c",
        _BOOTSTRAP,
        _PACKAGE_ROOT,
        _SERVER_SCRIPT,
        "--logdir",
        logdir,
        "--kind",
        kind,
        "--port",
        str(port or 0),
        "--idle-timeout",
        repr(float(idle_timeout)),
        "--client-pid",
        str(os.getpid()),
        "--grace",
        repr(float(grace_s)),
        "--info-dir",
        str(directory),
        "--log-path",
        str(log_path),
    ]


def pid_alive(pid: int) -> bool:
    """Whether the process runs; a zombie does not, and our own children are reaped."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    return alive(pid)


def is_viewer_process(viewer: Viewer) -> bool:
    """Guards signals against a recycled pid: the command line must be our server's."""
    try:
        cmdline = Path(f"/proc/{viewer.pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return pid_alive(viewer.pid) and answers(viewer)
    except OSError:
        return False
    return any(marker in cmdline for marker in SERVER_MARKERS)


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; check :func:`is_viewer_process` first."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_exit(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_exit(pid, 2.0)


def forget(pid: int) -> None:
    """Drop a stopped server from our children."""
    _children.pop(pid, None)


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def exit_message(kind: str, code: int, port: int | None, log_path: Path | None) -> str:
    """Why a server that exited during startup failed, from its exit code and its log."""
    name = label(kind)
    tail = _tail(log_path) if log_path is not None else ""
    if code == EXIT_PORT_IN_USE and port is not None:
        return port_busy_message(port, kind)
    if code == EXIT_MISSING_DEPENDENCY:
        package = "tensorboard tensorboard-plugin-profile" if kind == "tensorboard" else "xprof"
        return (
            f"The {name} could not load its packages:\n{tail}\n"
            f"Install them in the kernel's environment (pip install {package}) "
            "and run the cell again."
        )
    return (
        f"The {name} exited during startup (exit code {code}). "
        f"Last lines of its log {log_path}:\n{tail}\n"
        "Fix the problem shown there and run the cell again."
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


def drop_record(path: Path) -> None:
    """Remove a viewer's info file and its clients folder (left behind by a killed server)."""
    path.unlink(missing_ok=True)
    pid = path.name[len(INFO_PREFIX) : -len(INFO_SUFFIX)]
    if pid.isdigit():
        shutil.rmtree(clients_path(str(path.parent), int(pid)), ignore_errors=True)
