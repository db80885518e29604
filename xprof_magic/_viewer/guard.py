"""The secret-path guard: the WSGI middleware in front of XProf (or TensorBoard).

Loopback is shared by every user of a JupyterHub host, so a viewer answers only under
``/<secret>``; everything else is a 404. Inside the prefix, requests that could read or write
outside the log directory are refused with a 403 that says why (:func:`refusal`).

Standard library only at the top (werkzeug is imported when the first request arrives):
the kernel imports this module for the route names, and must not pay for a web stack.
"""

from __future__ import annotations

import hmac
import json
import os
import posixpath
from collections.abc import Callable, Iterable
from typing import Any

from xprof_magic import _store

__all__ = ["HEALTH_ROUTE", "PROFILE_ROUTE", "StartResponse", "WSGIApp", "guard", "refusal"]

PROFILE_ROUTE = "/data/plugin/profile"
HEALTH_ROUTE = "/xprof_magic/health"

_PATH_PARAMS = ("session_path", "run_path")
_NAME_PARAMS = ("host", "hosts", "module_name", "tag")
_REFUSED_ROUTES = ("capture_profile",)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _inside(path: str, root: str) -> bool:
    """Whether ``path``, symlinks resolved, is ``root`` or below it."""
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _run_dir(run: str, logdir: str) -> str:
    """The folder XProf opens for a run name (``[<tb run>/]<session>``), as it computes it."""
    tb_run, session = posixpath.split(run.rstrip("/"))
    base = logdir if tb_run in ("", ".") else os.path.join(logdir, tb_run)
    return str(_store.run_path(base, session))


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


def guard(app: WSGIApp, *, secret: str, logdir: str, kind: str, health: dict[str, Any]) -> WSGIApp:
    """Wrap ``app`` so that it answers only under ``/<secret>`` and only inside ``logdir``.

    ``HEALTH_ROUTE`` below the prefix answers ``health`` as JSON, so that a kernel can tell
    this exact server (pid, log directory) from whatever else now listens on the port.
    For ``kind="xprof"`` the prefix moves from ``PATH_INFO`` to ``SCRIPT_NAME`` (XProf routes
    on ``/data/plugin/profile``; its front end keeps whatever precedes that as its base).
    TensorBoard strips its own ``--path_prefix``, so its paths pass through unchanged.
    """
    prefix = "/" + secret
    secret_bytes = secret.encode("ascii")
    health_body = json.dumps(health).encode()
    ui_below = PROFILE_ROUTE[1:] + "/" if kind == "xprof" else ""

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
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

    return guarded
