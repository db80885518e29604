"""The kernel route: the viewer's replies carried through the kernel.

It is for a browser that cannot open the viewer's port (VS Code over Remote-SSH, Colab in VS
Code, Kaggle, Positron, a JupyterLab reached through an SSH tunnel).

The browser asks for a path below the viewer's root (``/data/plugin/profile/...``, never
the secret: the kernel adds its own); the kernel forwards it to its own loopback viewer, so
the request meets the same guard, the same secret and the same refusals as a request on the
port (:mod:`xprof_magic._viewer.app.guard`). Nothing else is reachable: the host and port
are the viewer's, never the browser's to choose, and a path outside the viewer's own routes
(:data:`ROUTES`), or one that could mean another (``..``, ``//``, a backslash, a scheme),
is refused here before any connection (:func:`route_refusal`).

A reply is read and handed on in chunks of :data:`CHUNK` bytes (:func:`answer`): the kernel
holds one chunk of a reply at a time, never a whole trace. :func:`serve` turns one request
of a widget's (a custom message) into its answer's messages, for both fronts' widgets; the
browser's side, which both fronts' frames load, is ``route_page.js`` (:data:`PAGE_JS`).
Standard library only.
"""

from __future__ import annotations

import functools
import http.client
import importlib.metadata
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from xprof_magic._viewer.app.graph import GRAPH_ROUTE
from xprof_magic._viewer.app.guard import HEALTH_ROUTE, PROFILE_ROUTE
from xprof_magic._viewer.process.client import KERNEL_ROUTE, PROXY_ENV, Viewer, proxy_template

__all__ = [
    "ANSWER",
    "ASK",
    "CHUNK",
    "MAX_PATH",
    "PAGE_JS",
    "ROUTES",
    "Head",
    "RouteChoice",
    "Send",
    "answer",
    "forced_route",
    "route_notes",
    "route_refusal",
    "serve",
    "xprof_version",
]

RouteChoice = Literal["auto", "direct", "kernel"]

ASK = "xprof-ask"
ANSWER = "xprof-answer"
PAGE_JS = (Path(__file__).resolve().parent / "route_page.js").read_text(encoding="utf-8")
"""The frame's side: the route chosen in the browser, and pages loaded through the kernel."""

CHUNK = 1 << 20
"""The most bytes of a reply one widget message carries (and the kernel holds at a time)."""
MAX_PATH = 16_384
ROUTES = (PROFILE_ROUTE + "/", GRAPH_ROUTE + "/", HEALTH_ROUTE)
"""The viewer's own routes, below its secret: XProf's pages, files and data, the graph
viewer's renderer, the health check. A path must start with one of them (or be the last)."""
# Headers handed to the browser: what XProf's pages read of a reply.
_KEPT = ("content-type", "content-encoding", "content-length", "cache-control", "etag")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True)
class Head:
    """A reply's status line and the headers the browser gets."""

    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)


def route_refusal(path: str) -> str | None:
    """Why ``path`` is not sent to the viewer, if so.

    ``path`` is the browser's, below the viewer's root, with its query.
    """
    if not isinstance(path, str) or not path.startswith("/") or len(path) > MAX_PATH:
        return "a path below the viewer's root, starting with /, is expected"
    route, _, _ = path.partition("?")
    if _UNSAFE.search(route) or _CONTROL.search(path) or "//" in route or "://" in route:
        return "the path must be plain (no spaces, control characters, backslashes, // or a scheme)"
    if "%" in route and re.search(r"%(2e|2f|5c|00)", route, re.IGNORECASE):
        return "the path must not encode dots, slashes or NUL"
    if any(part in (".", "..") for part in route.split("/")):
        return "the path must not hold . or .. segments"
    if not (route == HEALTH_ROUTE or route.startswith(ROUTES[:2])):
        return "only the viewer's own routes are served through the kernel"
    return None


def answer(viewer: Viewer, path: str, timeout: float = 300.0) -> Iterator[Head | bytes]:
    """The viewer's reply to a GET of ``path``: its :class:`Head` first, then its body.

    The body comes in chunks of at most :data:`CHUNK` bytes, as they are read (gzip left as the
    viewer sent it, for the browser to undo). A refused path is a 403 that says why, sent to no
    server; a viewer that does not answer, a 502 that says so.
    """
    reason = route_refusal(path)
    if reason is not None:
        yield from _said(403, "Forbidden", f"Forbidden: {reason}.")
        return
    connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=timeout)
    try:
        try:
            connection.request("GET", viewer.base_path + path, headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            yield from _said(502, "Bad Gateway", f"The viewer did not answer: {error}.")
            return
        kept = {k.lower(): v for k, v in response.getheaders() if k.lower() in _KEPT}
        yield Head(response.status, response.reason, kept)
        while True:
            chunk = response.read(CHUNK)
            if not chunk:
                break
            yield chunk
    finally:
        connection.close()


def _said(status: int, reason: str, text: str) -> Iterator[Head | bytes]:
    body = text.encode()
    yield Head(status, reason, {"content-type": "text/plain; charset=utf-8"})
    yield body


Send = Callable[[dict[str, Any], list[bytes]], None]


def serve(viewer: Viewer, content: Any, send: Send) -> None:
    """Answer one request of the browser's (``content``, a custom message) with ``send``.

    It sends ``taken`` at once, then the reply's head and body chunks as they are read, then
    ``last``. Anything else than a request is ignored.
    """
    if not isinstance(content, dict) or content.get("type") != ASK:
        return
    ident, path = content.get("id"), content.get("path")
    send({"type": ANSWER, "id": ident, "taken": True}, [])
    try:
        for part in answer(viewer, path if isinstance(path, str) else ""):
            if isinstance(part, Head):
                head = {"status": part.status, "reason": part.reason, "headers": part.headers}
                send({"type": ANSWER, "id": ident, "head": head}, [])
            else:
                send({"type": ANSWER, "id": ident}, [part])
    finally:
        send({"type": ANSWER, "id": ident, "last": True}, [])


def forced_route(environ: Mapping[str, str] | None = None) -> RouteChoice:
    """The route the user's settings force, else ``auto``: the browser chooses.

    ``kernel`` for ``XPROF_MAGIC_PROXY_URL=kernel``; ``direct`` for a proxy template
    (``XPROF_MAGIC_PROXY_URL``, ``TENSORBOARD_PROXY_URL``).
    """
    environ = os.environ if environ is None else environ
    if environ.get(PROXY_ENV, "").strip().lower() == KERNEL_ROUTE:
        return "kernel"
    return "direct" if proxy_template(environ) else "auto"


@functools.cache
def xprof_version() -> str:
    """XProf's version: the key its static files are cached under in the browser."""
    try:
        return importlib.metadata.version("xprof")
    except importlib.metadata.PackageNotFoundError:
        return ""


def route_notes(viewer: Viewer, where: tuple[str, str]) -> dict[str, Any]:
    """What a front's frame needs for the route from the browser to ``viewer``.

    That is the viewer's root as the browser sees it (``where``: ``(origin, prefix)``), the route
    a setting forces, XProf's version (the browser's cache key), whether its pages can cross the
    kernel (XProf's all can; TensorBoard's cannot) and the frame's code (:data:`PAGE_JS`).
    """
    origin, prefix = where
    return {
        "base": origin + prefix + viewer.base_path,
        "route": forced_route(),
        "version": xprof_version(),
        "kernel": viewer.kind == "xprof",
        "page_js": PAGE_JS,
    }
