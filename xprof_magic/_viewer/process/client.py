"""Talking to a running viewer: the :class:`Viewer` record, its URLs, and its JSON routes.

A viewer records itself in an info file (see :mod:`xprof_magic._viewer.process.manager`); the record
gives everything the kernel needs to build the browser's URLs (the full XProf UI, one tool of
one run, the trace viewer alone for the view under a cell) and to ask the server for data over
loopback HTTP. Nothing here starts, finds or stops a process, and nothing imports IPython.
"""

from __future__ import annotations

import gzip
import http.client
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlencode

from xprof_magic._viewer.app.guard import HEALTH_ROUTE, PROFILE_ROUTE
from xprof_magic._viewer.app.inline import INLINE_QUERY

__all__ = [
    "KERNEL_ROUTE",
    "KINDS",
    "NEW_NAV",
    "PROXY_ENV",
    "TRACE_VIEWER_TOOL",
    "Viewer",
    "ViewerError",
    "ViewerKind",
    "ViewerRequestError",
    "answers",
    "fetch_json",
    "http_get",
    "label",
    "locate",
    "proxy_template",
    "server_proxy_template",
]

ViewerKind = Literal["xprof", "tensorboard"]
KINDS: tuple[ViewerKind, ...] = ("xprof", "tensorboard")
# The tool name XProf's ``run_tools`` gives the streaming trace viewer.
TRACE_VIEWER_TOOL = "trace_viewer@"
NEW_NAV = "new_nav=true"
"""XProf's docked navigation (its classic menu covers the tool below 960 px of width)."""
_LABELS = {"xprof": "XProf viewer", "tensorboard": "TensorBoard viewer"}
PROXY_ENV = "XPROF_MAGIC_PROXY_URL"
TENSORBOARD_PROXY_ENV = "TENSORBOARD_PROXY_URL"
_OFF = ("none", "off", "0")
KERNEL_ROUTE = "kernel"
"""``XPROF_MAGIC_PROXY_URL=kernel``: no proxy; the widget shows pages through the kernel."""


class ViewerError(Exception):
    """The viewer cannot be used; the message names the problem and the next step."""


class ViewerRequestError(ViewerError):
    """A request to a running viewer failed."""


def label(kind: str) -> str:
    """What the user calls a viewer of this kind: "XProf viewer", "TensorBoard viewer"."""
    return _LABELS.get(kind, "viewer")


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
        return f"{prefix}{self.base_path}{PROFILE_ROUTE}/"

    def tool_path(self, run: str, tool: str, host: str | None = None, *, prefix: str = "") -> str:
        """The full UI opened on one tool of one run (``tool`` as ``run_tools`` lists it)."""
        if self.kind == "tensorboard":
            query = _query(run=run, tool=tool, host=host)
            return f"{prefix}{self.base_path}/?{query}#profile"
        query = _query(run=run, tag=tool, host=host)
        return f"{prefix}{self.base_path}{PROFILE_ROUTE}/{quote(tool, safe='@')}?{query}"

    def trace_viewer_path(
        self,
        run: str,
        host: str,
        *,
        prefix: str = "",
        view_start: float | None = None,
        view_end: float | None = None,
    ) -> str:
        """The path of the timeline alone, without XProf's sidebar: the compact view under a cell.

        In :mod:`~xprof_magic._viewer.app.inline`'s form.

        The page fetches ``trace_data_url`` from ``location.origin`` + that value, so the value
        is an absolute path that must carry ``prefix`` too. ``view_start`` and ``view_end``
        (milliseconds on the timeline, XProf's own parameters) set the first visible range.
        """
        data = self.data_path("data", prefix=prefix, run=run, tag=TRACE_VIEWER_TOOL, host=host)
        params: dict[str, str | float | None] = {
            "is_streaming": "true",
            "is_oss": "true",
            "trace_data_url": data,
        }
        if view_start is not None and view_end is not None:
            params.update(view_start=f"{view_start:.3f}", view_end=f"{view_end:.3f}")
        page = f"{prefix}{self.base_path}{PROFILE_ROUTE}/trace_viewer_index.html"
        return f"{page}?{_query(**params)}&{INLINE_QUERY}"

    def embedded_path(
        self, run: str, tool: str, host: str | None = None, *, prefix: str = "", **params: str
    ) -> str:
        """The path of one tool of XProf's full UI as the widget embeds it.

        Its docked menu (``new_nav``: its classic one covers the tool below 960 px until clicked),
        then :mod:`~xprof_magic._viewer.app.inline`'s form for under a cell (no toolbar, no menu:
        the widget's dropdowns are the navigation), and ``params`` for the tool (such as the program
        the memory viewer opens on).
        """
        extra = f"&{_query(**params)}" if params else ""
        return f"{self.tool_path(run, tool, host, prefix=prefix)}&{NEW_NAV}&{INLINE_QUERY}{extra}"

    def data_path(self, route: str, *, prefix: str = "", **params: str | float | None) -> str:
        """A data route of the profile plugin: ``runs``, ``run_tools``, ``hosts``, ``data``."""
        return self._route_path(route, prefix, params)

    def _route_path(self, route: str, prefix: str, params: Mapping[str, str | float | None]) -> str:
        path = f"{prefix}{self.base_path}{PROFILE_ROUTE}/{route}"
        query = _query(**params)
        return f"{path}?{query}" if query else path


def proxy_template(environ: Mapping[str, str]) -> str | None:
    """The proxy route the user set, with ``%PORT%`` for the port; None if unset or ``none``.

    ``$XPROF_MAGIC_PROXY_URL``, else TensorBoard's ``$TENSORBOARD_PROXY_URL``.
    """
    for name in (PROXY_ENV, TENSORBOARD_PROXY_ENV):
        value = environ.get(name, "").strip()
        if value:
            return None if value.lower() in (*_OFF, KERNEL_ROUTE) else value
    return None


def server_proxy_template(environ: Mapping[str, str]) -> str | None:
    """jupyter-server-proxy's route, when it is installed beside this Python."""
    if environ.get(PROXY_ENV, "").strip().lower() in _OFF:
        return None
    if importlib.util.find_spec("jupyter_server_proxy") is None:
        return None
    base = environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return base.rstrip("/") + "/proxy/%PORT%/"


def locate(port: int, template: str | None) -> tuple[str, str]:
    """``(origin, prefix)`` for a loopback port as the browser reaches it.

    Through a proxy route (``template``, with ``%PORT%``), else the port itself. The browser URL
    of a server path is ``origin + prefix + path``; a path that the page itself puts after
    ``location.origin`` needs the prefix only.
    """
    if template:
        prefix = template.replace("%PORT%", str(port)).rstrip("/")
        if "://" in prefix:
            scheme, rest = prefix.split("://", 1)
            host, _, path = rest.partition("/")
            return f"{scheme}://{host}", f"/{path}" if path else ""
        return "", prefix
    return f"http://127.0.0.1:{port}", ""


def _query(**params: str | float | None) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def http_get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
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


def answers(viewer: Viewer, timeout: float = 2.0) -> bool:
    """Whether this exact server answers: the secret is right and it reports the same pid."""
    try:
        status, body = http_get(viewer.port, viewer.base_path + HEALTH_ROUTE, timeout)
        answer = json.loads(body) if status == 200 else {}
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return bool(answer.get("pid") == viewer.pid and answer.get("logdir") == viewer.logdir)


def fetch_json(
    viewer: Viewer, route: str, *, timeout: float = 60.0, **params: str | float | None
) -> Any:
    """GET a profile data route (``runs``, ``run_tools``, ``hosts``, ``data``) as JSON."""
    name = label(viewer.kind)
    try:
        status, body = http_get(viewer.port, viewer._route_path(route, "", params), timeout)
    except (OSError, http.client.HTTPException) as error:
        raise ViewerRequestError(
            f"The {name} on port {viewer.port} did not answer ({error}). "
            "It may have exited; run the cell again to restart it."
        ) from error
    if status != 200:
        detail = body[:300].decode("utf-8", "replace").strip()
        raise ViewerRequestError(
            f"The {name} answered {status} for {route}: {detail}. See its log: {viewer.log_path}"
        )
    try:
        return json.loads(body)
    except ValueError as error:
        raise ViewerRequestError(
            f"The {name} sent something other than JSON for {route}: {error}."
        ) from error
