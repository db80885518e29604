"""The page said while a run's timeline is prepared, and the requests that ask for a run.

:func:`ahead` puts a started :class:`~xprof_magic._viewer.prepare.Preparer` in front of
XProf's app (:func:`prepared`). Every request that names a run (``run=``: the widget showing
it, its tools survey, ``%xprof view``, the runs dropdown) asks for it. The embedded trace
viewer page of a run not yet ready is :data:`PREPARING_PAGE`, which asks for the run's state
every 250 ms (the page's own URL with :data:`STATUS_QUERY`), says "preparing the timeline:
4 s so far" (with the time left once a conversion has been timed, or that it is paused while
a cell captures), and reloads into XProf's page when the run is ready. A failed conversion
is said in one line with its reason and a "Try again" link: the next request for the page
tries again. A trace data request for a run being converted waits for it, so XProf never
converts it beside us; another tool's data request (the widget's survey) waits for it too, up
to :data:`OTHER_TOOLS_WAIT_S`, since XProf's conversion for that tool would compete with the
timeline the frame shows first. ``XPROF_MAGIC_PREPARE=0`` turns all of it off.

Standard library only: run in the viewer's process, in front of XProf's app.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from xprof_magic._viewer import convert
from xprof_magic._viewer.guard import PROFILE_ROUTE, StartResponse, WSGIApp
from xprof_magic._viewer.prepare import Preparer

__all__ = [
    "BACKGROUND",
    "PREPARE_ENV",
    "PREPARING_PAGE",
    "STATUS_QUERY",
    "ahead",
    "enabled",
    "prepared",
]

PREPARE_ENV = "XPROF_MAGIC_PREPARE"
"""``0``: the viewer converts nothing ahead; XProf converts on the first request, as it does."""

BACKGROUND = {"xprof_magic_background": "1"}
"""A request's parameter (the widget's tools survey): XProf answers it at nice
:data:`BACKGROUND_NICE`, so what it converts for the survey yields to the user's work (the
next cell, the browser drawing the timeline). XProf ignores parameters it does not read."""
_BACKGROUND_QUERY = urlencode(BACKGROUND)
BACKGROUND_NICE = 10
"""Not 19: the survey's questions still end within their 30 s on a busy machine."""
STATUS_QUERY = "xprof_magic_status=1"
"""Added to the page's own URL: the run's state as JSON, for :data:`PREPARING_PAGE`."""
_TRACE_TAGS = frozenset({convert.TRACE_TOOL, "trace_viewer"})
OTHER_TOOLS_WAIT_S = 20.0
"""How long another tool's data request for a run waits for that run's timeline: under the
30 s the widget's survey gives each of its questions."""

SHOWN_S = 5.0
"""And once the timeline is ready, until XProf has served the frame its data, or for this long
after: the page polls, reloads into XProf's and asks for the data within it."""

PREPARING_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body{font:13px monospace;margin:8px;color:#333}a{color:#1a73e8}
</style></head><body><div class="xprof-preparing" data-state="__STATE__">__LINE__</div>
<script>(function(){
var line=document.querySelector('.xprof-preparing');
var url=location.pathname+location.search+'&__STATUS__';
function say(s){
  line.dataset.state=s.state;
  if(s.state==='failed'){
    line.textContent='xprof: the timeline could not be prepared: '+s.reason+'. ';
    var again=document.createElement('a');again.href='#';again.textContent='Try again';
    again.onclick=function(e){e.preventDefault();location.reload();};
    line.appendChild(again);return false;}
  if(s.state!=='queued'&&s.state!=='converting'){location.reload();return false;}
  var text='xprof: preparing the timeline: '+Math.round(s.seconds)+' s so far';
  if(s.paused)text+='; paused while a cell captures';
  else if(s.left!==null&&s.left!==undefined)text+=', about '+Math.ceil(s.left)+' s left';
  if(s.mb>=1)text+=' ('+s.mb+' MB capture)';
  line.textContent=text;return true;}
function ask(){fetch(url,{cache:'no-store'}).then(function(r){return r.json();})
  .then(function(s){if(say(s))setTimeout(ask,250);})
  .catch(function(){setTimeout(ask,1000);});}
ask();})();</script></body></html>"""
"""The page in place of the embedded trace viewer while its run is prepared."""


def _page(status: dict[str, Any]) -> bytes:
    line = f"xprof: preparing the timeline: {status.get('seconds', 0):.0f} s so far"
    page = (
        PREPARING_PAGE.replace("__STATE__", html.escape(str(status["state"])))
        .replace("__LINE__", html.escape(line))
        .replace("__STATUS__", STATUS_QUERY)
    )
    return page.encode()


def _trace_run(args: dict[str, list[str]]) -> str | None:
    """The run a trace viewer page shows: the ``run`` of its ``trace_data_url``."""
    for url in args.get("trace_data_url", []):
        runs = parse_qs(urlsplit(url).query).get("run", [])
        if runs:
            return runs[0]
    return None


def _reply(start_response: StartResponse, body: bytes, kind: str) -> Iterable[bytes]:
    start_response(
        "200 OK",
        [
            ("Content-Type", kind),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [body]


def prepared(app: WSGIApp, preparer: Preparer) -> WSGIApp:
    """``app`` with :class:`Preparer` in front: every request naming a run asks for it;
    the embedded trace viewer page of a run not yet ready is :data:`PREPARING_PAGE` (its
    state as JSON with :data:`STATUS_QUERY`); trace data waits for the run's conversion."""

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        query = str(environ.get("QUERY_STRING", ""))
        args = parse_qs(query)
        named = args.get("run", [])
        for name in named[:1]:
            preparer.want(name)
        if path == PROFILE_ROUTE + "/trace_viewer_index.html":
            run = _trace_run(args)
            if run is not None:
                if STATUS_QUERY in query.split("&"):
                    body = json.dumps(preparer.status(run)).encode()
                    return _reply(start_response, body, "application/json")
                preparer.want(run)
                status = preparer.status(run)
                if status["state"] in ("queued", "converting"):
                    return _reply(start_response, _page(status), "text/html; charset=utf-8")
        elif path == PROFILE_ROUTE + "/data" and named:
            if _TRACE_TAGS & set(args.get("tag", [])):
                with preparer.xprof_converts(named[0]):
                    return list(app(environ, start_response))
            # Another tool's data (the widget's survey, which has XProf convert the run for
            # that tool at normal priority) waits for the timeline, the page shown first.
            preparer.wait(named[0], OTHER_TOOLS_WAIT_S, shown=SHOWN_S)
        if _BACKGROUND_QUERY in query.split("&"):
            return _background(app, environ, start_response)
        return app(environ, start_response)

    return serve


def _background(
    app: WSGIApp, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """``app``'s reply, made in a thread of its own at nice :data:`BACKGROUND_NICE` (and
    the threads XProf starts from it): a pooled thread's priority could not be restored."""
    reply: list[Any] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        try:
            reply.append(list(app(environ, start_response)))
        except BaseException as error:  # raised again in the request's thread
            reply.append(error)

    worker = threading.Thread(target=serve, name="xprof-background", daemon=True)
    worker.start()
    worker.join()
    if isinstance(reply[0], BaseException):
        raise reply[0]
    return list(reply[0])


def enabled(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the viewer converts ahead (:data:`PREPARE_ENV` is not ``0``)."""
    return environ.get(PREPARE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def ahead(app: WSGIApp, logdir: str) -> tuple[WSGIApp, Callable[[], None]]:
    """XProf's ``app`` for ``logdir`` behind a started :class:`Preparer` (:func:`prepared`),
    and what stops it; ``app`` as it is where :func:`enabled` says no."""
    if not enabled():
        return app, lambda: None
    root = str(Path(__file__).resolve().parents[2])
    preparer = Preparer(logdir, root).start()
    return prepared(app, preparer), preparer.stop
