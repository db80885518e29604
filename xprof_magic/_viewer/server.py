"""The viewer's own process: XProf (or TensorBoard) serving one log directory on loopback.

Run by :mod:`xprof_magic._viewer.manager` as ``python -m xprof_magic._viewer.server``. A separate
process survives kernel crashes and restarts, so the next kernel can reuse it, and keeps the
per-request logs XProf writes to stderr out of the notebook.

Loopback is shared by every user of a JupyterHub host, so the server answers only under
``/<secret>``; the secret arrives on stdin (a command line is readable by every user) and is
written only to a 0600 info file. Inside the prefix, requests that could read or write
outside the log directory are refused, and the process exits after an idle timeout so that
no viewer outlives its use.

This module imports only the standard library at the top: the kernel imports it for the
shared constants, and must not pay for XProf or TensorBoard.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hmac
import json
import os
import posixpath
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "EXIT_BAD_CONFIG",
    "EXIT_MISSING_DEPENDENCY",
    "EXIT_PORT_IN_USE",
    "HEALTH_ROUTE",
    "INFO_PREFIX",
    "INFO_SUFFIX",
    "KINDS",
    "PROFILE_ROUTE",
    "SECRET_PATTERN",
    "Activity",
    "guard",
    "info_path",
    "main",
    "refusal",
]

KINDS = ("xprof", "tensorboard")
PROFILE_ROUTE = "/data/plugin/profile"
HEALTH_ROUTE = "/xprof_magic/health"
INFO_PREFIX = "viewer-"
INFO_SUFFIX = ".json"
SECRET_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,128}")

EXIT_BAD_CONFIG = 2
EXIT_PORT_IN_USE = 3
EXIT_MISSING_DEPENDENCY = 4

_PATH_PARAMS = ("session_path", "run_path")
_NAME_PARAMS = ("host", "hosts", "module_name", "tag")
_REFUSED_ROUTES = ("capture_profile",)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def info_path(info_dir: str, pid: int) -> str:
    """Where the server with this pid records itself; one file per process, like TensorBoard."""
    return os.path.join(info_dir, f"{INFO_PREFIX}{pid}{INFO_SUFFIX}")


class Activity:
    """When the last request ended, and how many are in flight, for the idle timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._busy = 0

    def begin(self) -> None:
        with self._lock:
            self._busy += 1
            self._last = time.monotonic()

    def end(self) -> None:
        with self._lock:
            self._busy -= 1
            self._last = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last request ended; 0 while a slow conversion is still running."""
        with self._lock:
            return 0.0 if self._busy else time.monotonic() - self._last


def _inside(path: str, root: str) -> bool:
    """Whether ``path``, symlinks resolved, is ``root`` or below it."""
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _run_dir(run: str, logdir: str) -> str:
    """The folder XProf opens for a run name (``[<tb run>/]<session>``), as it computes it."""
    tb_run, session = posixpath.split(run.rstrip("/"))
    base = logdir if tb_run in ("", ".") else os.path.join(logdir, tb_run)
    return os.path.join(base, "plugins", "profile", session)


def refusal(path: str, query: Iterable[tuple[str, str]], logdir: str) -> str | None:
    """Why a request (path below the secret prefix, decoded query) must not be served, if so.

    XProf opens any folder named by ``session_path`` or ``run_path``, joins ``run`` to the log
    directory without checking it, and ``capture_profile`` connects to any address and writes
    into the log directory. ``logdir`` is the resolved log directory.
    """
    segments = [s for s in path.split("/") if s]
    if segments and segments[-1] in _REFUSED_ROUTES:
        return f"the {segments[-1]} route is disabled in this viewer"
    for key, value in query:
        if "\x00" in value:
            return f"{key} contains a NUL byte"
        if key in _PATH_PARAMS and value:
            if not os.path.isabs(value) or "://" in value or "::" in value:
                return f"{key} must be an absolute path inside the log directory"
            if not _inside(value, logdir):
                return f"{key} is outside the log directory"
        elif key == "run" and value:
            parts = value.replace("\\", "/").split("/")
            if value.startswith(("/", "\\")) or ".." in parts or "://" in value:
                return "run must be a run name relative to the log directory"
            if not _inside(_run_dir(value, logdir), logdir):
                return "run resolves outside the log directory"
        elif key in _NAME_PARAMS and ("/" in value or "\\" in value or value == ".."):
            return f"{key} must be a plain name"
    return None


def _respond(
    start_response: StartResponse,
    status: str,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    headers: tuple[tuple[str, str], ...] = (),
) -> list[bytes]:
    start_response(
        status,
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            *headers,
        ],
    )
    return [body]


def guard(
    app: WSGIApp,
    *,
    secret: str,
    logdir: str,
    kind: str,
    activity: Activity,
    health: dict[str, Any],
) -> WSGIApp:
    """Wrap ``app`` so that it answers only under ``/<secret>`` and only inside ``logdir``.

    For ``kind="xprof"`` the prefix moves from ``PATH_INFO`` to ``SCRIPT_NAME`` (XProf routes
    on ``/data/plugin/profile``; its front end keeps whatever precedes that as its base).
    TensorBoard strips its own ``--path_prefix``, so its paths pass through unchanged.
    """
    prefix = "/" + secret
    secret_bytes = secret.encode("ascii")
    health_body = json.dumps(health).encode()
    ui_below = PROFILE_ROUTE[1:] + "/" if kind == "xprof" else ""

    def dispatch(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "")
        head, _, rest_tail = path[1:].partition("/")
        given = head.encode("latin-1", "replace")
        if not path.startswith("/") or not hmac.compare_digest(given, secret_bytes):
            return _respond(start_response, "404 Not Found", b"Not Found")
        rest = "/" + rest_tail if path.startswith(prefix + "/") else ""
        if rest == HEALTH_ROUTE:
            return _respond(start_response, "200 OK", health_body, "application/json")
        if rest == "" or (kind == "xprof" and rest == "/"):
            # Relative, so that a proxy's path prefix in front of ours survives the redirect.
            target = f"{secret}/{ui_below}" if rest == "" else ui_below
            return _respond(start_response, "302 Found", b"", headers=(("Location", target),))
        from werkzeug.wrappers import Request

        query = Request(environ).args.items(multi=True)
        reason = refusal(rest, query, logdir)
        if reason is not None:
            message = f"Forbidden: {reason}."
            return _respond(start_response, "403 Forbidden", message.encode())
        if kind == "xprof":
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + prefix
            environ["PATH_INFO"] = rest
        return app(environ, start_response)

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterator[bytes]:
        activity.begin()
        try:
            body = dispatch(environ, start_response)
            try:
                yield from body
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
        finally:
            activity.end()

    return guarded


def _xprof_app(logdir: str) -> WSGIApp:
    """XProf's own standalone app, without the gRPC worker and wildcard bind of ``xprof server``."""
    from xprof.server import DataProvider, ProfilePluginLoader, TBContext, make_wsgi_app

    context = TBContext(logdir, DataProvider(logdir), TBContext.Flags(False))
    context.hide_capture_profile_button = True
    plugin = ProfilePluginLoader().load(context)
    if plugin is None:
        raise ImportError("XProf's profile plugin did not load; see the lines above")
    app: WSGIApp = make_wsgi_app(plugin)
    return app


def _tensorboard_app(logdir: str, prefix: str) -> WSGIApp:
    """TensorBoard's WSGI app with every installed plugin, profile included.

    TensorBoard builds its app inside ``launch`` and hands it to a ``server_class``; this one
    only keeps it, so that cheroot can serve it on loopback under the guard.
    """
    from tensorboard import default, program

    kept: list[WSGIApp] = []

    class _KeepApp:
        def __init__(self, wsgi_app: WSGIApp, flags: Any) -> None:
            kept.append(wsgi_app)

        def serve_forever(self) -> None:
            return None

        def get_url(self) -> str:
            return ""

    board = program.TensorBoard(plugins=default.get_plugins(), server_class=_KeepApp)
    board.configure(
        argv=[
            "tensorboard",
            "--logdir",
            logdir,
            "--path_prefix",
            prefix,
            "--load_fast",
            "false",
            "--host",
            "127.0.0.1",
        ]
    )
    board.launch()
    return kept[0]


def _write_info(path: str, info: dict[str, Any]) -> None:
    """Write atomically with mode 0600: the file holds the secret."""
    tmp = f"{path}.tmp"
    _remove(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(tmp, flags, 0o600), "w") as stream:
        json.dump(info, stream)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[xprof_magic viewer {stamp}] {message}\n")
    sys.stderr.flush()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m xprof_magic._viewer.server",
        description="Serve a log directory with XProf on 127.0.0.1; the secret is read from stdin.",
    )
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--kind", choices=KINDS, default="xprof")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=3600.0)
    parser.add_argument("--info-dir", required=True)
    parser.add_argument("--log-path", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until stopped (SIGTERM) or idle; the exit code says why startup failed."""
    args = _parse_args(argv)
    secret = sys.stdin.readline().strip()
    if not SECRET_PATTERN.fullmatch(secret):
        _log("no valid secret on stdin; this module is started by xprof_magic._viewer.manager")
        return EXIT_BAD_CONFIG
    logdir = os.path.realpath(args.logdir)
    if not os.path.isdir(logdir):
        _log(f"log directory {logdir} does not exist")
        return EXIT_BAD_CONFIG
    os.chdir("/")
    prefix = "/" + secret
    try:
        from cheroot import wsgi

        app = _xprof_app(logdir) if args.kind == "xprof" else _tensorboard_app(logdir, prefix)
    except ImportError as error:
        _log(f"cannot load the {args.kind} viewer: {error}")
        return EXIT_MISSING_DEPENDENCY

    activity = Activity()
    pid = os.getpid()
    started = time.time()
    health = {"pid": pid, "kind": args.kind, "logdir": logdir, "started": started}
    guarded = guard(
        app, secret=secret, logdir=logdir, kind=args.kind, activity=activity, health=health
    )
    server = wsgi.Server(("127.0.0.1", args.port), guarded, numthreads=8)
    server.shutdown_timeout = 2
    try:
        server.prepare()
    except OSError as error:
        cause = error.__cause__
        in_use = os.strerror(errno.EADDRINUSE) in str(error)
        if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
            in_use = True
        _log(f"cannot listen on 127.0.0.1:{args.port}: {error}")
        return EXIT_PORT_IN_USE if in_use else 1
    port = int(server.bind_addr[1])

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    serving = threading.Thread(target=server.serve, name="xprof-viewer", daemon=True)
    serving.start()
    record = info_path(args.info_dir, pid)
    info = {
        "version": 1,
        "pid": pid,
        "port": port,
        "logdir": logdir,
        "secret": secret,
        "kind": args.kind,
        "log_path": args.log_path,
        "started": started,
        "idle_timeout": args.idle_timeout,
    }
    _write_info(record, info)
    timeout = args.idle_timeout
    _log(f"{args.kind} viewer pid {pid} serving {logdir} on 127.0.0.1:{port}")
    try:
        tick = min(0.5, timeout / 4) if timeout > 0 else 0.5
        while not stop.wait(tick):
            if not serving.is_alive():
                _log("the server thread ended")
                break
            if timeout > 0 and activity.idle_for() > timeout:
                _log(f"no request for {timeout:g} s; exiting")
                break
    finally:
        _remove(record)
        server.stop()
    _log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
