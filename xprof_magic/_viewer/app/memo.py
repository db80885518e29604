"""XProf's data replies kept for the next identical request: :func:`remembered`.

A run's data does not change while its capture does not, yet XProf makes each reply again:
a 30 MB run's trace data in 0.25 s, its op profile in 4 to 5 s. The same request comes back
whenever the run is shown again: ``%xprof view`` of the run under a cell, the runs dropdown
switched back, a notebook page reloaded, and two widgets of one run, whose surveys ask the
same questions at the same moment (they then converted the op profile twice at once).

So a ``data`` reply (200, not a page, for a run named by ``run``: its preview's too) is kept,
keyed by its request and the run's timelines (each ``<host>.xplane.pb``'s inode, size and
time: a run removed and captured again under its name is another run). An identical request
made while the first is being answered waits for that answer rather than ask XProf again.
The newest replies are kept, up to :data:`MAX_BYTES` together.

Standard library only: run in the viewer's process, in front of XProf's app.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from xprof_magic._runs import store as _store
from xprof_magic._viewer.app.guard import PROFILE_ROUTE, StartResponse, WSGIApp
from xprof_magic._viewer.app.replies import whole_reply

__all__ = ["MAX_BYTES", "remembered"]

MAX_BYTES = 64_000_000
"""The replies kept, together (a 30 MB run's trace data is 0.6 MB gzipped)."""
_UNCHANGING = frozenset({"xprof_magic_background"})
"""Parameters that change how a reply is made (its priority), not what it says."""
_Reply = tuple[str, list[tuple[str, str]], bytes]


def _key(environ: dict[str, Any], logdir: str) -> tuple[Any, ...] | None:
    """What a reply is kept under, or None for a request whose reply is not kept."""
    if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") != (
        PROFILE_ROUTE + "/data"
    ):
        return None
    pairs = parse_qsl(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    names = {k for k, _ in pairs}
    runs = [v for k, v in pairs if k == "run"]
    if len(runs) != 1 or names & {"session_path", "run_path"}:
        return None
    timelines = []
    for path in _store.xplanes(_store.run_path(logdir, runs[0])):
        try:
            found = path.stat()
        except OSError:
            return None
        timelines.append((path.name, found.st_ino, found.st_size, found.st_mtime_ns))
    if not timelines:
        return None
    asked = sorted((k, v) for k, v in pairs if k not in _UNCHANGING)
    return urlencode(asked), tuple(timelines), environ.get("HTTP_ACCEPT_ENCODING", "")


def _keeps(status: str, headers: list[tuple[str, str]]) -> bool:
    """Whether a reply is kept: a success, and data rather than a page.

    Not a page: the graph viewer's page says whether this machine has its renderer, which an
    install changes.
    """
    kind = next((v for k, v in headers if k.lower() == "content-type"), "")
    return status.startswith("200") and not kind.lower().startswith("text/html")


def remembered(app: WSGIApp, logdir: str, max_bytes: int = MAX_BYTES) -> WSGIApp:
    """``app`` whose data replies are kept and given again (see the module)."""
    kept: OrderedDict[tuple[Any, ...], _Reply] = OrderedDict()
    asked: dict[tuple[Any, ...], threading.Event] = {}
    lock = threading.Lock()

    def answer(reply: _Reply, start_response: StartResponse) -> Iterable[bytes]:
        start_response(reply[0], list(reply[1]))
        return [reply[2]]

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        key = _key(environ, logdir)
        if key is None:
            return app(environ, start_response)
        while True:
            with lock:
                if (reply := kept.get(key)) is not None:
                    kept.move_to_end(key)
                    return answer(reply, start_response)
                if (answering := asked.get(key)) is None:
                    asked[key] = threading.Event()
                    break
            answering.wait()  # the same request, answered now: kept, or failed (asked again)
        try:
            status, headers, exc_info, data = whole_reply(app, environ)
            if _keeps(status, headers) and len(data) <= max_bytes:
                with lock:
                    kept[key] = (status, headers, data)
                    while sum(len(r[2]) for r in kept.values()) > max_bytes:
                        kept.popitem(last=False)
            start_response(status, list(headers), *exc_info)
            return [data]
        finally:
            with lock:
                asked.pop(key).set()

    return serve
