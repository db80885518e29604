"""The page said while a run's timeline is prepared, and the requests that ask for a run.

:func:`ahead` puts a started :class:`~xprof_magic._viewer.prepare.queue.Preparer` in front of
XProf's app (:func:`prepared`). Every request that names a run (``run=``: the widget showing
it, its tools survey, ``%xprof view``, the runs dropdown) asks for it. The embedded trace
viewer page of a run not yet ready is :data:`PREPARING_PAGE`, which asks for the run's state
every 250 ms (the page's own URL with :data:`STATUS_QUERY`), says "preparing the timeline:
4 s so far" (with the time left once a conversion has been timed, or that it is paused while
a cell captures), fetches XProf's script meanwhile, and reloads into XProf's page when the
run is ready and the frame is in view (at least half of it, or 200 px, in the browser's
window; a preview is shown only then too): a frame scrolled away, or under a tab not shown,
waits until it is looked at rather than load a timeline beside the one that is. A failed
conversion is said in one line with its reason and a "Try again" link: the next request for
the page tries again. A trace data request for a run being converted waits for it, so XProf never
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

from xprof_magic._viewer.app.guard import PROFILE_ROUTE, StartResponse, WSGIApp
from xprof_magic._viewer.prepare import convert
from xprof_magic._viewer.prepare.queue import Preparer

__all__ = [
    "BACKGROUND",
    "PREPARE_ENV",
    "PREPARING_PAGE",
    "PREVIEW_QUERY",
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
PREVIEW_QUERY = "xprof_magic_preview=1"
"""Added to a trace viewer page's ``trace_data_url``: its data is the run's preview
(:mod:`xprof_magic._viewer.prepare.preview`), while the whole run is prepared."""
STATUS_QUERY = "xprof_magic_status=1"
"""Added to the page's own URL: the run's state as JSON, for :data:`PREPARING_PAGE`."""
_TRACE_TAGS = frozenset({convert.TRACE_TOOL, "trace_viewer"})
OTHER_TOOLS_WAIT_S = 20.0
"""How long another tool's data request for a run waits for that run's timeline: under the
30 s the widget's survey gives each of its questions."""

SHOWN_S = 5.0
"""And once the timeline is ready, until XProf has served the frame its data, or for this long
after: the page polls, reloads into XProf's and asks for the data within it."""

PREPARING_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="prefetch" href="trace_viewer_index.js"><style>
html,body{height:100%;margin:0}
body{display:flex;flex-direction:column;font:13px monospace;color:#333}
.xprof-preparing{padding:8px}a{color:#1a73e8}.xprof-preview{flex:1;border:0;width:100%}
</style></head><body><div class="xprof-preparing" data-state="__STATE__"
 data-preview="__SPAN__">__LINE__</div>
<script>(function(){
var line=document.querySelector('.xprof-preparing'),home=location.href,frame=null,touched=false;
var p=null,seen=!window.IntersectionObserver,due=false;
var url=location.pathname+location.search+'&__STATUS__';
if(!seen)new IntersectionObserver(function(es){var e=es[es.length-1],
  h=e.boundingClientRect.height;
  seen=e.isIntersecting&&e.intersectionRect.height>=Math.min(200,h/2);
  if(seen&&due)whole();else if(seen&&p&&!frame)show();},
  {threshold:[0,.1,.2,.3,.4,.5,.6,.7,.8,.9,1]})
  .observe(document.body);
function link(text,go){var a=document.createElement('a');a.href='#';a.textContent=text;
  a.onclick=function(e){e.preventDefault();go();};line.appendChild(a);}
function whole(){location.replace(home);}
function secs(x){return x>=10?x.toFixed(0)+' s':x>=1?x.toFixed(1)+' s':
  (x*1000).toFixed(x>=0.01?0:1)+' ms';}
function show(){var q=new URLSearchParams(location.search),t=q.get('trace_data_url')||'';
  q.set('trace_data_url',t+(t.indexOf('?')<0?'?':'&')+'__PREVIEW__');
  frame=document.createElement('iframe');frame.className='xprof-preview';
  frame.src=location.pathname+'?'+q.toString();
  frame.addEventListener('load',function(){try{var w=frame.contentWindow;
    ['mousedown','wheel','keydown','touchstart'].forEach(function(k){
      w.addEventListener(k,function(){touched=true;},true);});}catch(e){}});
  document.body.appendChild(frame);}
function say(s){
  p=s.preview||p;line.dataset.state=s.state;
  if(p&&!frame&&seen)show();
  if(s.state==='failed'){
    line.textContent='xprof: the timeline could not be prepared: '+s.reason+'. ';
    link('Try again',whole);return false;}
  if(s.state!=='queued'&&s.state!=='converting'){
    if(!frame||!touched){
      if(seen){whole();return false;}
      due=true;if(!frame)line.textContent='xprof: the timeline is ready: it is drawn '+
        'when this frame is in view';return false;}
    line.textContent='xprof: the whole timeline is ready ('+secs(p.total_s)+'). ';
    link('Show it',whole);return false;}
  var text='xprof: preparing the timeline: '+Math.round(s.seconds)+' s so far';
  if(frame)text='xprof: showing the events of the first '+secs(p.shown_s)+' of '+
    secs(p.total_s)+' while the whole timeline is prepared: '+Math.round(s.seconds)+' s so far';
  if(s.paused)text+='; paused while a cell captures';
  else if(s.left!==null&&s.left!==undefined)text+=', about '+Math.ceil(s.left)+' s left';
  if(s.mb>=1)text+=' ('+s.mb+' MB capture)';
  line.textContent=text;return true;}
function ask(){fetch(url,{cache:'no-store'}).then(function(r){return r.json();})
  .then(function(s){if(say(s))setTimeout(ask,250);})
  .catch(function(){setTimeout(ask,1000);});}
if(line.dataset.preview){p=JSON.parse(line.dataset.preview);if(seen)show();}
ask();})();</script></body></html>"""
"""The page in place of the embedded trace viewer while its run is prepared."""


def _page(status: dict[str, Any]) -> bytes:
    span = status.get("preview")
    line = f"xprof: preparing the timeline: {status.get('seconds', 0):.0f} s so far"
    page = (
        PREPARING_PAGE.replace("__STATE__", html.escape(str(status["state"])))
        .replace("__LINE__", html.escape(line))
        .replace("__STATUS__", STATUS_QUERY)
        .replace("__PREVIEW__", PREVIEW_QUERY)
        .replace("__SPAN__", html.escape(json.dumps(span)) if span else "")
    )
    return page.encode()


def _trace_run(args: dict[str, list[str]]) -> tuple[str | None, bool]:
    """The run a trace viewer page shows, and whether it shows that run's preview.

    The run is the ``run`` of its ``trace_data_url``; the preview is :data:`PREVIEW_QUERY`.
    """
    for url in args.get("trace_data_url", []):
        query = urlsplit(url).query
        runs = parse_qs(query).get("run", [])
        if runs:
            return runs[0], PREVIEW_QUERY in query.split("&")
    return None, False


def _previewed(environ: dict[str, Any], args: dict[str, list[str]], folder: Path) -> dict[str, Any]:
    """``environ`` of a trace data request for a run, made one for its preview ``folder``.

    XProf's ``session_path`` (inside the log directory), the run named as its folder.
    """
    pairs = [
        (k, v) for k, values in args.items() for v in values if k not in ("run", "session_path")
    ]
    pairs += [("run", folder.name), ("session_path", str(folder))]
    return {**environ, "QUERY_STRING": urlencode(pairs)}


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
    """``app`` with :class:`Preparer` in front.

    Every request naming a run asks for it; the embedded trace viewer page of a run not yet ready
    is :data:`PREPARING_PAGE` (its state as JSON with :data:`STATUS_QUERY`); trace data waits for
    the run's conversion.
    """

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        query = str(environ.get("QUERY_STRING", ""))
        args, flags = parse_qs(query), set(query.split("&"))
        named = args.get("run", [])
        for name in named[:1]:
            preparer.want(name)
        if path == PROFILE_ROUTE + "/trace_viewer_index.html":
            run, preview = _trace_run(args)
            if run is not None and not preview:
                if STATUS_QUERY in flags:
                    body = json.dumps(preparer.status(run)).encode()
                    return _reply(start_response, body, "application/json")
                preparer.want(run, retry=True)
                status = preparer.status(run)
                if status["state"] in ("queued", "converting"):
                    return _reply(start_response, _page(status), "text/html; charset=utf-8")
        elif path == PROFILE_ROUTE + "/data" and named:
            if _TRACE_TAGS & set(args.get("tag", [])):
                folder = preparer.preview(named[0]) if PREVIEW_QUERY in flags else None
                if folder is not None and folder.is_dir():
                    return app(_previewed(environ, args, folder), start_response)
                with preparer.xprof_converts(named[0]):
                    return list(app(environ, start_response))
            # Another tool's data (the widget's survey, which has XProf convert the run for
            # that tool at normal priority) waits for the timeline, the page shown first.
            preparer.wait(named[0], OTHER_TOOLS_WAIT_S, shown=SHOWN_S)
        if _BACKGROUND_QUERY in flags:
            return _background(app, environ, start_response)
        return app(environ, start_response)

    return serve


def _background(
    app: WSGIApp, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """``app``'s reply, made in a thread of its own at nice :data:`BACKGROUND_NICE`.

    The threads XProf starts from it too. Its own thread, since a pooled thread's priority could
    not be restored.
    """
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
    """XProf's ``app`` for ``logdir`` behind a started :class:`Preparer`, and what stops it.

    See :func:`prepared`. ``app`` as it is where :func:`enabled` says no.
    """
    if not enabled():
        return app, lambda: None
    root = str(Path(__file__).resolve().parents[3])
    preparer = Preparer(logdir, root).start()
    return prepared(app, preparer), preparer.stop
