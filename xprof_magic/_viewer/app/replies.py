"""What the viewer changes in XProf's replies.

The label thread first, no stuck v2, a graph that draws offline, the embedded pages made for
under a cell.

XProf's trace viewer orders a process's threads by their ``thread_sort_index`` metadata,
which XProf sets to the thread id; the thread where ``# xprof:`` labels and
``TraceAnnotation`` spans land (the interpreter's main thread, named after the program
that started the kernel: ``python``, ``python3``, ``marimo`` for a marimo app; a worker
thread for a cell with top-level ``await``) then often comes below the runtime's threads,
out of view. The viewer's process moves the host's threads that are not the XLA runtime's
(``tf_*`` pools) to the top of their process in the trace data reply
(:func:`label_threads_first`); the other threads stay, in their order.

XProf's full UI opens Trace Viewer v2 when the browser saved that choice (``localStorage``
``use_trace_viewer_v2``); v2 needs WebGPU, and where it has none v2 fails, on every visit,
until "Switch to the old frontend" is found. XProf's page is served with
:data:`FORGET_FAILED_V2` first, which drops that saved choice in a browser without a WebGPU
adapter (:func:`forget_failed_v2`).

The graph viewer's graph page is pointed at the renderer this machine has, and says when it
has none (:func:`xprof_magic._viewer.app.graph.graph_page`). The pages the widget embeds (their
URL says :data:`~xprof_magic._viewer.app.inline.INLINE_QUERY`) get the embedded form of
:mod:`xprof_magic._viewer.app.inline`.

XProf sends its front end's files (the trace viewer's 3 MB script among them) with no word on
caching, so each frame under a cell fetched and compiled them again; they are sent with
:data:`STATIC_CACHE` (:func:`_static`).

Standard library only: run in the viewer's process, in front of XProf's app.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable
from typing import Any

from xprof_magic._viewer.app.graph import graph_page
from xprof_magic._viewer.app.guard import PROFILE_ROUTE, StartResponse, WSGIApp
from xprof_magic._viewer.app.inline import embedded, inline_page, inline_trace_viewer

__all__ = [
    "FORGET_FAILED_V2",
    "RUNTIME_THREADS",
    "STATIC_CACHE",
    "TOP_SORT_INDEX",
    "forget_failed_v2",
    "label_thread",
    "label_threads_first",
    "whole_reply",
    "xprof_replies",
]

RUNTIME_THREADS = "tf_"
"""How the XLA runtime's threads are named (its pools: ``tf_XLAEigen/…``, ``tf_pytorchxla``):
every other thread of the host is Python's, where the cell's labels land."""
HOST_PROCESS = b"/host:"
"""In a process's name: the host's. A device's process (``/device:TPU:0``) keeps its lines'
order; a process without a name counts as a host."""
TOP_SORT_INDEX = -(2**31)
"""Below every thread id XProf uses as a sort index, so the label thread is drawn first."""

FORGET_FAILED_V2 = (
    b"<script>(function(){var k='use_trace_viewer_v2',s=window.localStorage;"
    b"function drop(){try{s.removeItem(k)}catch(e){}}"
    b"try{if(s.getItem(k)!=='true')return}catch(e){return}"
    b"var g=navigator.gpu;if(!g||!g.requestAdapter){drop();return}"
    b"g.requestAdapter().then(function(a){if(!a)drop()},drop)})();</script>"
)
_APP = b"<app></app>"
_DATA_ROUTES = frozenset(
    {
        "data",
        "data_csv",
        "runs",
        "run_tools",
        "hosts",
        "module_list",
        "capture_profile",
        "config",
        "version",
        "local",
        "generate_cache",
    }
)

STATIC_CACHE = "private, max-age=86400"
"""How long a browser keeps XProf's front-end files (:func:`_static`). Their URLs hold the
viewer's secret, new with each viewer, so a browser never keeps one past an upgrade of XProf."""
_STATIC_SUFFIXES = frozenset({"js", "css", "woff", "woff2", "ttf", "png", "svg", "ico", "wasm"})

_TRACE_TAGS = ("tag=trace_viewer%40", "tag=trace_viewer@", "tag=trace_viewer&")
_GRAPH_TAG = "tag=graph_viewer&"
_PROCESS = re.compile(
    rb'\{"args":\{"name":"(?P<name>[^"\\]*)"\},"name":"process_name","ph":"M",'
    rb'"pid":(?P<pid>-?\d+)[,}]'
)
_NAME = re.compile(
    rb'\{"args":\{"name":"(?P<name>[^"\\]*)"\},"name":"thread_name","ph":"M",'
    rb'"pid":(?P<pid>-?\d+),"tid":(?P<tid>-?\d+)\}'
)


def label_thread(name: str) -> bool:
    """Whether a host thread of this name holds labels: it is not the runtime's.

    The runtime's are :data:`RUNTIME_THREADS`, as the summary's timeline reader tells them apart
    too.
    """
    return bool(name) and not name.startswith(RUNTIME_THREADS)


def label_threads_first(body: bytes) -> bytes:
    """The trace JSON ``body`` with each label thread sorted first (:data:`TOP_SORT_INDEX`).

    ``body`` is XProf's ``trace_viewer@`` reply. Each host thread that :func:`label_thread` names
    is given :data:`TOP_SORT_INDEX`: its sort-index event rewritten, or one added after its name
    event when XProf sent none. Anything else is left as sent.
    """
    devices = {m["pid"] for m in _PROCESS.finditer(body) if HOST_PROCESS not in m["name"]}
    found = [
        m
        for m in _NAME.finditer(body)
        if m["pid"] not in devices and label_thread(m["name"].decode(errors="replace"))
    ]
    for match in reversed(found):
        pid, tid = match["pid"], match["tid"]
        sort_event = re.compile(
            rb'\{"args":\{"sort_index":-?\d+\},"name":"thread_sort_index","ph":"M",'
            rb'"pid":' + pid + rb',"tid":' + tid + rb"\}"
        )
        top = (
            b'{"args":{"sort_index":%d},"name":"thread_sort_index","ph":"M","pid":%s,"tid":%s}'
            % (TOP_SORT_INDEX, pid, tid)
        )
        body, count = sort_event.subn(top, body)
        if not count:
            body = body[: match.end()] + b"," + top + body[match.end() :]
    return body


def forget_failed_v2(page: bytes) -> bytes:
    """XProf's index page with :data:`FORGET_FAILED_V2` at the top of its head.

    Any other page as it is.
    """
    head = page.find(b"<head>")
    if _APP not in page or head < 0:
        return page
    at = head + len(b"<head>")
    return page[:at] + FORGET_FAILED_V2 + page[at:]


def _change(environ: dict[str, Any]) -> tuple[Callable[[bytes], bytes], bool] | None:
    """How a reply to this request is changed, and whether it must be HTML to be.

    Changed are the trace data, XProf's index page and the graph viewer's graph page; None for
    any other.
    """
    query = str(environ.get("QUERY_STRING", "")) + "&"
    path = str(environ.get("PATH_INFO", ""))
    if path == PROFILE_ROUTE + "/data":
        if any(tag in query for tag in _TRACE_TAGS):
            return label_threads_first, False
        if _GRAPH_TAG in query:
            return graph_page, True
        return None
    inline = embedded(query.rstrip("&"))
    if path == PROFILE_ROUTE + "/trace_viewer_index.html":
        return (inline_trace_viewer, True) if inline else None
    if not _may_be_index(environ):
        return None
    if inline:
        return lambda page: inline_page(forget_failed_v2(page)), True
    return forget_failed_v2, True


def xprof_replies(app: WSGIApp) -> WSGIApp:
    """``app`` with its trace data, index page and graph pages changed.

    Trace data replies pass through :func:`label_threads_first`, the index page through
    :func:`forget_failed_v2` and graph pages through ``graph_page`` (gzip as XProf sends them, or
    plain); every other reply is untouched.
    """

    def rewritten(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        how = _change(environ)
        if how is None:
            if _static(environ):
                return app(environ, _kept(start_response))
            return app(environ, start_response)
        change, html_only = how
        status, headers, exc_info, data = whole_reply(app, environ)
        if status.startswith("200") and (not html_only or _is_html(headers)):
            data = _rewrite(data, headers, change)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(data))))
        start_response(status, headers, *exc_info)
        return [data]

    return rewritten


def whole_reply(
    app: WSGIApp, environ: dict[str, Any]
) -> tuple[str, list[tuple[str, str]], tuple[Any, ...], bytes]:
    """``app``'s reply to ``environ`` read whole, its body closed.

    Returns the status, headers, the ``exc_info`` it gave ``start_response``, and the body's
    bytes.
    """
    held: list[Any] = []

    def hold(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        held[:] = [status, list(headers), exc_info]
        return lambda data: None

    body = app(environ, hold)
    try:
        data = b"".join(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    status, headers, exc_info = held
    return status, headers, exc_info, data


def _static(environ: dict[str, Any]) -> bool:
    """Whether a request is for a file of XProf's front end (scripts, styles, fonts, images).

    Such a file is the same bytes for as long as this viewer runs.
    """
    path = str(environ.get("PATH_INFO", ""))
    if not path.startswith(PROFILE_ROUTE + "/") or environ.get("REQUEST_METHOD") != "GET":
        return False
    return path.rpartition(".")[2].lower() in _STATIC_SUFFIXES


def _kept(start_response: StartResponse) -> StartResponse:
    """``start_response`` adding :data:`STATIC_CACHE` to a 200 reply that says nothing of caching.

    XProf sends its files without, so every frame fetched them again.
    """

    def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        said = any(k.lower() in ("cache-control", "expires") for k, _ in headers)
        if status.startswith("200") and not said:
            headers = [*headers, ("Cache-Control", STATIC_CACHE)]
        return start_response(status, headers, *exc_info)

    return start


def _may_be_index(environ: dict[str, Any]) -> bool:
    """A page route of XProf's UI (its root or a tool's), where the index page is served."""
    path = str(environ.get("PATH_INFO", ""))
    if not path.startswith(PROFILE_ROUTE + "/"):
        return False
    name = path[len(PROFILE_ROUTE) + 1 :]
    if name in _DATA_ROUTES:
        return False
    return ("/" not in name and "." not in name) or name == "index.html"


def _is_html(headers: list[tuple[str, str]]) -> bool:
    kind = next((v for k, v in headers if k.lower() == "content-type"), "")
    return kind.lower().startswith("text/html")


def _rewrite(
    data: bytes, headers: list[tuple[str, str]], change: Callable[[bytes], bytes]
) -> bytes:
    encoding = next((v for k, v in headers if k.lower() == "content-encoding"), "").lower()
    if encoding == "gzip":
        return gzip.compress(change(gzip.decompress(data)), compresslevel=1)
    if encoding in ("", "identity"):
        return change(data)
    return data
