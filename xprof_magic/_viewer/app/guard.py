"""The secret-path guard: the WSGI middleware in front of XProf (or TensorBoard).

Loopback is shared by every user of a JupyterHub host, so a viewer answers only under
``/<secret>``; everything else is a 404. Inside the prefix, requests that could read or write
outside the log directory are refused with a 403 that says why (:func:`refusal`).

Standard library only at the top (werkzeug is imported when the first request arrives):
the kernel imports this module for the route names, and must not pay for a web stack.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from xprof_magic._runs import store as _store
from xprof_magic._viewer.app.graph import GRAPH_ROUTE, asset

__all__ = [
    "CAPTURE_ALLOWED_FILE",
    "CAPTURE_ROUTE",
    "HEALTH_ROUTE",
    "PROFILE_ROUTE",
    "StartResponse",
    "WSGIApp",
    "allow_capture",
    "capture_allowed",
    "guard",
    "origin_form",
    "refusal",
]

PROFILE_ROUTE = "/data/plugin/profile"
HEALTH_ROUTE = "/xprof_magic/health"

_PATH_PARAMS = ("session_path", "run_path")
_NAME_PARAMS = ("host", "hosts", "module_name", "tag")
CAPTURE_ROUTE = "capture_profile"
CAPTURE_ALLOWED_FILE = "capture_allowed.json"

_SLASH_RUNS = re.compile("/{2,}")

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


def allow_capture(info_dir: str | os.PathLike[str], addresses: Iterable[str]) -> None:
    """Let viewers of ``info_dir`` capture ``addresses`` too (the kernel captured them).

    The list lives in the viewers' per-user info folder, so every viewer of this user reads
    it at its next capture request; it only grows.
    """
    with _locked(Path(info_dir) / f".{CAPTURE_ALLOWED_FILE}.lock"):
        known = capture_allowed(info_dir)
        added = sorted(known | {_address(a) for a in addresses})
        if added != sorted(known):
            _store.write_json(Path(info_dir) / CAPTURE_ALLOWED_FILE, {"addresses": list(added)})


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between this user's kernels (POSIX ``flock``; none elsewhere).

    So that two kernels adding addresses at once do not lose one's.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no kernels race on one machine's folder there in practice
        yield
        return
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def capture_allowed(info_dir: str | os.PathLike[str] | None) -> frozenset[str]:
    """The addresses the kernels of this user have captured from (empty when unknown)."""
    if info_dir is None:
        return frozenset()
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(info_dir, CAPTURE_ALLOWED_FILE), encoding="utf-8") as f:
            data = json.load(f)
        found = data.get("addresses") if isinstance(data, dict) else None
        if isinstance(found, list):
            return frozenset(_address(a) for a in found if isinstance(a, str))
    return frozenset()


def _address(text: str) -> str:
    return text.strip().removeprefix("grpc://")


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _capture_refusal(query: list[tuple[str, str]], allowed: frozenset[str]) -> str | None:
    """Why a capture request must not run, or None.

    It must not when it names a TPU, or a target that is neither loopback nor one the kernel has
    captured from.
    """
    targets: list[str] = []
    for key, value in query:
        if key == "is_tpu_name" and value == "true":
            return "capture by TPU name is disabled in this viewer; give HOST:PORT addresses"
        if key in ("service_addr", "worker_list"):
            targets += [_address(v) for v in value.split(",") if v.strip()]
    if not targets:
        return "capture_profile needs a service_addr (HOST:PORT)"
    foreign = [t for t in targets if not _loopback(t) and t not in allowed]
    if foreign:
        return (
            f"capture toward {', '.join(foreign)} is refused: this viewer captures only "
            "loopback addresses and those the kernel has captured from; run "
            f"%xprof capture {','.join(foreign)} in the notebook first"
        )
    return None


def origin_form(target: bytes) -> bytes:
    """A request-target (``/path?query``) with each run of slashes in its path made one.

    XProf's front end builds some URLs as origin + ``/`` + its path prefix + ``/`` + route, so
    under the secret prefix it asks for ``//<secret>//data/...``, which an HTTP server takes
    for an absolute URI (``//host/path``) and refuses. Collapsed, the path is the one meant;
    the guard then checks it as any other. A target not starting with ``/`` is left as is,
    for the server to refuse.
    """
    if not target.startswith(b"/"):
        return target
    path, mark, query = target.partition(b"?")
    return _SLASH_RUNS.sub("/", path.decode("latin-1")).encode("latin-1") + mark + query


def refusal(
    path: str,
    query: Iterable[tuple[str, str]],
    logdir: str,
    capture_allowed: frozenset[str] | None = None,
) -> str | None:
    """Why a request (path below the secret prefix, decoded query) must not be served, if so.

    XProf opens any folder named by ``session_path`` or ``run_path``, joins ``run`` to the log
    directory without checking it, and ``capture_profile`` connects to any address and writes
    into the log directory: it is served only toward loopback and ``capture_allowed``
    addresses (None: refused outright).
    """
    query = list(query)
    segments = [s for s in path.split("/") if s]
    if segments and segments[-1] == CAPTURE_ROUTE:
        if capture_allowed is None:
            return f"the {CAPTURE_ROUTE} route is disabled in this viewer"
        reason = _capture_refusal(query, capture_allowed)
        if reason is not None:
            return reason
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
    health: dict[str, Any],
    info_dir: str | None = None,
) -> WSGIApp:
    """Wrap ``app`` so that it answers only under ``/<secret>`` and only inside ``logdir``.

    Capture requests are served toward loopback and toward the addresses listed in
    ``info_dir``'s :data:`CAPTURE_ALLOWED_FILE` (read at each request); without
    ``info_dir`` they are refused.

    ``GRAPH_ROUTE`` below the prefix serves the graph viewer's renderer, when this machine
    has it (:mod:`xprof_magic._viewer.app.graph`). ``HEALTH_ROUTE`` below the prefix answers
    ``health`` as JSON, so that a kernel can tell this exact server (pid, log directory)
    from whatever else now listens on the port.
    For ``kind="xprof"`` the prefix moves from ``PATH_INFO`` to ``SCRIPT_NAME`` (XProf routes
    on ``/data/plugin/profile``; its front end keeps whatever precedes that as its base).
    TensorBoard strips its own ``--path_prefix``, so its paths pass through unchanged.
    Runs of slashes in the path count as one (:func:`origin_form`), before any check.
    """
    prefix = "/" + secret
    secret_bytes = secret.encode("ascii")
    health_body = json.dumps(health).encode()
    ui_below = PROFILE_ROUTE[1:] + "/" if kind == "xprof" else ""

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = _SLASH_RUNS.sub("/", environ.get("PATH_INFO", ""))
        environ["PATH_INFO"] = path
        head, _, rest_tail = path[1:].partition("/")
        given = head.encode("latin-1", "replace")
        if not path.startswith("/") or not hmac.compare_digest(given, secret_bytes):
            return _respond(start_response, "404 Not Found", b"Not Found")
        rest = "/" + rest_tail if path.startswith(prefix + "/") else ""
        if rest == HEALTH_ROUTE:
            return _respond(start_response, "200 OK", health_body, "application/json")
        if rest.startswith(GRAPH_ROUTE + "/"):
            found = asset(rest[len(GRAPH_ROUTE) + 1 :])
            if found is None:
                return _respond(start_response, "404 Not Found", b"Not Found")
            return _respond(start_response, "200 OK", *found)
        if rest == "" or (kind == "xprof" and rest == "/"):
            # Relative, so that a proxy's path prefix in front of ours survives the redirect.
            target = f"{secret}/{ui_below}" if rest == "" else ui_below
            return _respond(start_response, "302 Found", b"", headers=(("Location", target),))
        reason = _request_refusal(environ, rest, logdir, info_dir)
        if reason is not None:
            message = f"Forbidden: {reason}."
            return _respond(start_response, "403 Forbidden", message.encode())
        if kind == "xprof":
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + prefix
            environ["PATH_INFO"] = rest
        return app(environ, start_response)

    return guarded


def _request_refusal(
    environ: dict[str, Any], rest: str, logdir: str, info_dir: str | None
) -> str | None:
    """:func:`refusal` for one request below the prefix.

    Its query is parsed as the viewer will parse it, and for a capture the addresses allowed now
    are given.
    """
    from werkzeug.wrappers import Request

    query = Request(environ).args.items(multi=True)
    allowed = None
    if info_dir is not None and rest.rstrip("/").endswith("/" + CAPTURE_ROUTE):
        allowed = capture_allowed(info_dir)
    return refusal(rest, query, logdir, allowed)
