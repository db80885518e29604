"""What the viewer adds to XProf's pages when they are embedded under a cell.

Under a cell the widget's dropdowns are the navigation, and the frame is about 850 px wide
(JupyterLab with its file browser open; Colab). XProf's full page spends 64 px of that on
its toolbar and 240 px on its navigation drawer, and the memory viewer, graph viewer and op
profile add a panel of their own of about 340 px, which left about 250 px for the tool.
XProf has no URL parameter for any of it (2.24: ``new_nav`` only chooses the docked drawer),
so the page the widget embeds, and only that one, asks for :data:`INLINE_QUERY`, and the
viewer adds a style sheet to it (:data:`PAGE_STYLE`): no toolbar, no drawer, the tools'
own panels narrower. The trace viewer's page gets its floating tool palette moved to the
bottom right corner (:data:`TRACE_STYLE`), off the labelled row and the steps the view
opens on, and its timeline hidden until it shows the range asked for
(:data:`TRACE_SETTLE`: XProf draws its default range first). "Open in new tab" asks
without the parameter: XProf's full UI, unchanged.

Both pages also get :data:`WATCH_BUSY`, which tells the page's parent (the widget's
wrapper frame, or Colab's output frame) when a loading indicator of XProf's shows or goes
(:data:`BUSY_SELECTOR`), so that the widget can say when one never finishes.

Standard library only: run in the viewer's process.
"""

from __future__ import annotations

__all__ = [
    "BUSY_MESSAGE",
    "BUSY_SELECTOR",
    "INLINE_QUERY",
    "PAGE_STYLE",
    "SETTLE_S",
    "TRACE_SETTLE",
    "TRACE_STYLE",
    "WATCH_BUSY",
    "embedded",
    "inline_page",
    "inline_trace_viewer",
]

INLINE_QUERY = "xprof_magic=inline"
"""The query parameter of the pages embedded under a cell."""
BUSY_SELECTOR = (
    "mat-progress-bar, mat-spinner, mat-progress-spinner, .mat-mdc-progress-spinner, "
    "#throbber-initial.active, #throbber.active"
)
"""XProf's loading indicators: its pages' progress bars and spinners, and the trace viewer's
throbbers (active while data loads)."""
BUSY_MESSAGE = "xprof-magic-busy"
"""The ``type`` of the messages :data:`WATCH_BUSY` posts; ``busy`` says whether an indicator
shows."""

PAGE_STYLE = (
    b"<style>"
    b"main-page>mat-toolbar.profiler-toolbar,"
    b"main-page>mat-sidenav-container>mat-sidenav.new-nav-sidenav{display:none!important}"
    b"main-page>mat-sidenav-container{top:0!important}"
    b"main-page>mat-sidenav-container>mat-sidenav-content{margin-left:0!important}"
    b"mat-sidenav-content mat-sidenav-container>mat-sidenav.mat-drawer-side"
    b"{width:min(260px,36vw)!important}"
    b"</style>"
)
TRACE_STYLE = (
    b"<style>tr-ui-b-mouse-mode-selector{left:auto!important;top:auto!important;"
    b"right:14px!important;bottom:14px!important}</style>"
)
SETTLE_S = 15
"""How long the trace viewer's timeline may stay hidden waiting for its first range
(:data:`TRACE_SETTLE`), after which it shows whatever it has."""
TRACE_SETTLE = (
    b"<script>(function(){var q=new URLSearchParams(location.search);"
    b"if(!q.has('view_start')||!q.has('view_end'))return;"
    b"var lo=Number(q.get('view_start')),hi=Number(q.get('view_end')),tol=(hi-lo)*0.01;"
    b"var hide=document.createElement('style'),t0=Date.now();"
    b"hide.textContent='tr-ui-timeline-view{visibility:hidden!important}';"
    b"document.head.appendChild(hide);"
    b"var timer=setInterval(function(){var el=document.querySelector('tf-trace-viewer');"
    b"var v=el&&el._traceViewer&&el._traceViewer.model&&el._traceViewer.trackView;"
    b"var r=v&&!el._isLoading&&el._trackViewRange?el._trackViewRange(v):null;"
    b"if((r&&Math.abs(r.min-lo)<=tol&&Math.abs(r.max-hi)<=tol)||Date.now()-t0>%d){"
    b"clearInterval(timer);hide.remove();}},20)})();</script>"
) % (SETTLE_S * 1000)
"""Keeps the trace viewer's timeline hidden until it shows the range the page was asked for
(``view_start``, ``view_end``): XProf first draws its default range (the whole capture)
and applies the asked one a moment later (0.2 s on an idle machine, seconds on a busy
one), so the page would open on another window first. Its loading throbber shows
meanwhile; after :data:`SETTLE_S` the timeline shows whatever range it has."""
WATCH_BUSY = (
    b"<script>(function(){if(window.parent===window)return;var busy=null,sel=%s;"
    b"function shown(e){var r=e.getBoundingClientRect();return r.width>0&&r.height>0&&"
    b"getComputedStyle(e).visibility!=='hidden'}"
    b"setInterval(function(){var now=Array.prototype.some.call("
    b"document.querySelectorAll(sel),shown);if(now===busy)return;busy=now;"
    b"window.parent.postMessage({type:%s,busy:now},'*')},500)})();</script>"
) % (
    b"'" + BUSY_SELECTOR.encode() + b"'",
    b"'" + BUSY_MESSAGE.encode() + b"'",
)


def embedded(query: str) -> bool:
    """Whether a request's query string asks for the embedded form of a page."""
    return INLINE_QUERY in query.split("&")


def _into_head(page: bytes, added: bytes) -> bytes:
    head = page.find(b"<head>")
    at = head + len(b"<head>") if head >= 0 else 0
    return page[:at] + added + page[at:]


def inline_page(page: bytes) -> bytes:
    """XProf's index page for under a cell: :data:`PAGE_STYLE` and :data:`WATCH_BUSY`."""
    return _into_head(page, PAGE_STYLE + WATCH_BUSY)


def inline_trace_viewer(page: bytes) -> bytes:
    """XProf's trace viewer page for under a cell.

    With :data:`TRACE_STYLE`, :data:`TRACE_SETTLE` and :data:`WATCH_BUSY`.
    """
    return _into_head(page, TRACE_STYLE + TRACE_SETTLE + WATCH_BUSY)
