"""What the viewer changes in XProf's replies: the thread with the cell's labels first.

XProf's trace viewer orders a process's threads by their ``thread_sort_index`` metadata,
which XProf sets to the thread id; the ``python`` thread, where ``# xprof:`` labels and
``TraceAnnotation`` spans land, then often comes last, below the runtime's threads and out
of view. The viewer's process moves it to the top of its process in the trace data reply
(:func:`label_threads_first`); the other threads stay, in their order.

Standard library only: run in the viewer's process, in front of XProf's app.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from typing import Any

from xprof_magic._viewer.guard import PROFILE_ROUTE, StartResponse, WSGIApp

__all__ = ["LABEL_THREADS", "TOP_SORT_INDEX", "label_threads_first", "trace_replies"]

LABEL_THREADS = ("python",)
"""The thread names that hold a cell's labels: the interpreter's main thread, for torch_xla
and JAX alike."""
TOP_SORT_INDEX = -(2**31)
"""Below every thread id XProf uses as a sort index, so the label thread is drawn first."""

_TRACE_TAGS = ("tag=trace_viewer%40", "tag=trace_viewer@", "tag=trace_viewer&")
_NAME = re.compile(
    rb'\{"args":\{"name":"(?P<name>[^"\\]*)"\},"name":"thread_name","ph":"M",'
    rb'"pid":(?P<pid>-?\d+),"tid":(?P<tid>-?\d+)\}'
)


def label_threads_first(body: bytes) -> bytes:
    """The trace JSON ``body`` (XProf's ``trace_viewer@`` reply) with each thread named in
    :data:`LABEL_THREADS` given :data:`TOP_SORT_INDEX`: its sort-index event rewritten, or
    one added after its name event when XProf sent none. Anything else is left as sent."""
    found = [m for m in _NAME.finditer(body) if m["name"].decode() in LABEL_THREADS]
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


def _is_trace_data(environ: dict[str, Any]) -> bool:
    query = str(environ.get("QUERY_STRING", "")) + "&"
    path = str(environ.get("PATH_INFO", ""))
    return path == PROFILE_ROUTE + "/data" and any(tag in query for tag in _TRACE_TAGS)


def trace_replies(app: WSGIApp) -> WSGIApp:
    """``app`` with its trace data replies passed through :func:`label_threads_first`
    (gzip as XProf sends them, or plain); every other reply untouched."""

    def rewritten(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not _is_trace_data(environ):
            return app(environ, start_response)
        held: list[Any] = []

        def hold(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            held[:] = [status, headers, exc_info]
            return lambda data: None

        body = app(environ, hold)
        try:
            data = b"".join(body)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
        status, headers, exc_info = held
        if status.startswith("200"):
            data = _rewrite(data, headers)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(data))))
        start_response(status, headers, *exc_info)
        return [data]

    return rewritten


def _rewrite(data: bytes, headers: list[tuple[str, str]]) -> bytes:
    encoding = next((v for k, v in headers if k.lower() == "content-encoding"), "").lower()
    if encoding == "gzip":
        return gzip.compress(label_threads_first(gzip.decompress(data)), compresslevel=1)
    if encoding in ("", "identity"):
        return label_threads_first(data)
    return data
