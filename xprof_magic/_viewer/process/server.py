"""The viewer's own process: XProf (or TensorBoard) serving one log directory on loopback.

:mod:`xprof_magic._viewer.process.os_process` starts it as
``python -c "import runpy, sys; ..." <package root> <this file> --logdir ...``: the kernel's
package root first on ``sys.path`` (the guard and store here are the kernel's copies, whatever
is installed), this file run as ``__main__`` by path, so that it stays on the command line,
which :func:`~xprof_magic._viewer.process.manager.stop_viewer` checks before it signals a pid.
Apart, it survives kernel restarts (the next kernel reuses it) and keeps XProf's logs out of
the notebook.

The secret arrives on stdin (a command line is readable by every user) and is written only to
a 0600 info file, with the pid, port and format (:mod:`~xprof_magic._viewer.process.info`, what the
process and the kernels share: the kernel never imports this module). Every request goes
through :func:`xprof_magic._viewer.app.guard.guard`. No viewer outlives its use: the process
exits ``DEFAULT_GRACE_S`` after the last kernel that registered with it died (and no request
came meanwhile), and after an idle timeout in any case.

XProf and TensorBoard are imported in :func:`main` only (:mod:`~xprof_magic._viewer.app.apps`);
XProf's runs are converted ahead of the click (:mod:`~xprof_magic._viewer.prepare.queue`),
its replies kept (``memo``)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from xprof_magic._viewer.app.apps import tensorboard_app, xprof_app
from xprof_magic._viewer.app.guard import StartResponse, WSGIApp, guard, origin_form
from xprof_magic._viewer.app.memo import remembered
from xprof_magic._viewer.app.replies import xprof_replies
from xprof_magic._viewer.prepare.waiting_page import ahead
from xprof_magic._viewer.process.client import KINDS
from xprof_magic._viewer.process.info import (
    DEFAULT_GRACE_S,
    EXIT_BAD_CONFIG,
    EXIT_MISSING_DEPENDENCY,
    EXIT_PORT_IN_USE,
    INFO_FORMAT,
    Clients,
    clients_path,
    info_path,
    write_info,
)

if TYPE_CHECKING:
    from cheroot import wsgi

__all__ = ["SECRET_PATTERN", "Activity", "main"]

SECRET_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,128}")


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


def _counted(app: WSGIApp, activity: Activity) -> WSGIApp:
    """``app`` with each request, its body streamed to the end, recorded in ``activity``."""

    def counted(environ: dict[str, Any], start_response: StartResponse) -> Iterator[bytes]:
        activity.begin()
        try:
            body = app(environ, start_response)
            try:
                yield from body
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
        finally:
            activity.end()

    return counted


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[xprof_magic viewer {stamp}] {message}", file=sys.stderr, flush=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="xprof_magic/_viewer/process/server.py",
        description="Serve a log directory with XProf on 127.0.0.1, the secret read from "
        "stdin. Started by xprof_magic._viewer.process.manager, not by hand.",
    )
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--kind", choices=KINDS, default="xprof")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=3600.0)
    parser.add_argument("--client-pid", type=int, action="append", default=[])
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S)
    parser.add_argument("--info-dir", required=True)
    parser.add_argument("--log-path", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until stopped (SIGTERM) or idle; the exit code says why startup failed."""
    args = _parse_args(argv)
    secret = sys.stdin.readline().strip()
    if not SECRET_PATTERN.fullmatch(secret):
        _log(
            "no valid secret on stdin; this server is started by "
            "xprof_magic._viewer.process.manager"
        )
        return EXIT_BAD_CONFIG
    logdir = os.path.realpath(args.logdir)
    if not os.path.isdir(logdir):
        _log(f"log directory {logdir} does not exist")
        return EXIT_BAD_CONFIG
    os.chdir("/")
    prefix = "/" + secret
    try:
        import cheroot.wsgi  # noqa: F401  (a missing cheroot is told here, with the viewer)

        if args.kind == "xprof":
            app, stop_preparing = ahead(xprof_replies(xprof_app(logdir)), logdir)
            app = remembered(app, logdir)
        else:
            app, stop_preparing = tensorboard_app(logdir, prefix), lambda: None
    except ImportError as error:
        _log(f"cannot load the {args.kind} viewer: {error}")
        return EXIT_MISSING_DEPENDENCY

    activity = Activity()
    pid = os.getpid()
    started = time.time()
    health = {"pid": pid, "kind": args.kind, "logdir": logdir, "started": started}
    guarded = guard(
        app, secret=secret, logdir=logdir, kind=args.kind, health=health, info_dir=args.info_dir
    )
    server = _wsgi_server(args.port, _counted(guarded, activity))
    server.shutdown_timeout = 2
    failed = _prepare(server, args.port)
    if failed is not None:
        return failed
    port = int(server.bind_addr[1])
    stop = _stop_on_signals()
    serving = threading.Thread(target=server.serve, name="xprof-viewer", daemon=True)
    serving.start()
    record = info_path(args.info_dir, pid)
    clients = Clients(clients_path(args.info_dir, pid), args.client_pid)
    write_info(record, _info(args, pid, port, logdir, secret, started))
    _log(f"{args.kind} viewer pid {pid} serving {logdir} on 127.0.0.1:{port}")
    try:
        _serve_until_done(args, stop, serving, activity, clients)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(record)
        clients.remove()
        server.stop()
        stop_preparing()
    _log("stopped")
    return 0


def _info(
    args: argparse.Namespace, pid: int, port: int, logdir: str, secret: str, started: float
) -> dict[str, Any]:
    """What the info file says: how a kernel finds, reaches and recognises this server."""
    return {
        "format": INFO_FORMAT,
        "pid": pid,
        "port": port,
        "logdir": logdir,
        "secret": secret,
        "kind": args.kind,
        "log_path": args.log_path,
        "started": started,
        "idle_timeout": args.idle_timeout,
        "grace": args.grace,
    }


def _wsgi_server(port: int, app: WSGIApp) -> wsgi.Server:
    """A cheroot server on loopback that reads each request-target in origin form first.

    See :func:`~xprof_magic._viewer.app.guard.origin_form`: cheroot answers a path starting with
    ``//`` with 400 "Absolute URI not allowed" before any WSGI code sees it.
    """
    from cheroot import server as http
    from cheroot import wsgi

    class RequestLine:
        """``rfile`` for the request line only: its target collapsed, the rest as read."""

        def __init__(self, rfile: Any) -> None:
            self._rfile = rfile

        def readline(self, *args: Any) -> bytes:
            line: bytes = self._rfile.readline(*args)
            method, space, rest = line.partition(b" ")
            target, space_after, protocol = rest.partition(b" ")
            return method + space + origin_form(target) + space_after + protocol

    class Request(http.HTTPRequest):
        def read_request_line(self) -> bool:
            rfile = self.rfile
            self.rfile = RequestLine(rfile)
            try:
                return bool(super().read_request_line())
            finally:
                self.rfile = rfile

    class Connection(http.HTTPConnection):
        RequestHandlerClass = Request

    server = wsgi.Server(("127.0.0.1", port), app, numthreads=8)
    server.ConnectionClass = Connection
    return server


def _prepare(server: wsgi.Server, port: int) -> int | None:
    """Bind the server's socket; the exit code if that failed (the port in use: its own)."""
    try:
        server.prepare()
    except OSError as error:
        cause = error.__cause__
        in_use = os.strerror(errno.EADDRINUSE) in str(error)
        if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
            in_use = True
        _log(f"cannot listen on 127.0.0.1:{port}: {error}")
        return EXIT_PORT_IN_USE if in_use else 1
    return None


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT; SIGHUP (the kernel's terminal going) is ignored."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return stop


def _serve_until_done(
    args: argparse.Namespace,
    stop: threading.Event,
    serving: threading.Thread,
    activity: Activity,
    clients: Clients,
) -> None:
    """Return when stopped, when the server thread ends, or after a time without a request.

    After ``idle_timeout`` without a request, or after ``grace`` without a request and without a
    kernel using the server.
    """
    timeout = args.idle_timeout
    tick = min(0.5, timeout / 4) if timeout > 0 else 0.5
    while not stop.wait(tick):
        if not serving.is_alive():
            _log("the server thread ended")
            return
        idle = activity.idle_for()
        if timeout > 0 and idle > timeout:
            _log(f"no request for {timeout:g} s; exiting")
            return
        gone = clients.gone_for()
        if gone is not None and min(gone, idle) > args.grace:
            _log(f"no kernel using it, and no request, for {args.grace:g} s; exiting")
            return


if __name__ == "__main__":
    sys.exit(main())
