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

The trace viewer's page also asks for its trace data from its first bytes
(:data:`TRACE_PREFETCH`), while XProf's 3 MB script loads and runs, and answers the script's
own request for it from that reply.

Both pages get :data:`OWN_STORAGE` first: in a frame of another site than the notebook's
(JupyterLab opened on ``localhost``, the viewer on ``127.0.0.1``) a browser that blocks
third-party cookies denies the page its ``localStorage``, and XProf's trace viewer, whose
script reads it as it starts, then draws nothing. Both pages also get :data:`WATCH_BUSY`,
which tells the page's parent (the widget's wrapper frame, or Colab's output frame) when a
loading indicator of XProf's shows or goes (:data:`BUSY_SELECTOR`), so that the widget can
say when one never finishes.

Standard library only: run in the viewer's process.
"""

from __future__ import annotations

__all__ = [
    "BUSY_MESSAGE",
    "BUSY_SELECTOR",
    "INLINE_QUERY",
    "OWN_STORAGE",
    "PAGE_STYLE",
    "SETTLE_S",
    "TRACE_PREFETCH",
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

OWN_STORAGE = (
    b"<script>['localStorage','sessionStorage'].forEach(function(n){"
    b"try{window[n];return}catch(e){}var d=new Map(),s={"
    b"getItem:function(k){k=String(k);return d.has(k)?d.get(k):null},"
    b"setItem:function(k,v){d.set(String(k),String(v))},"
    b"removeItem:function(k){d.delete(String(k))},clear:function(){d.clear()},"
    b"key:function(i){return Array.from(d.keys())[i]||null}};"
    b"Object.defineProperty(s,'length',{get:function(){return d.size}});"
    b"try{Object.defineProperty(window,n,{configurable:true,get:function(){return s}})}"
    b"catch(e){}});</script>"
)
"""Gives the page a storage of its own, for as long as it is open, where the browser denies it
the site's (``window.localStorage`` throws: a frame of another site than the page around it,
third-party cookies blocked). XProf's pages read and write their settings there; where the
browser allows the site's storage, it is kept."""
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
HEADING_WIDTH = 250
"""The width of the trace viewer's row headings (Catapult's ``tr.ui.b.constants``), which its
first request's ``resolution`` leaves out of the page's width."""
TRACE_PREFETCH = (
    b"<script>(function(){var q=new URLSearchParams(location.search);"
    b"var data=q.get('trace_data_url');if(!data||q.get('is_streaming')!=='true')return;"
    # The request XProf's trace viewer makes first (its _loadJSON through _buildBaseURL): the
    # hosts, replace_model, new_backend, the resolution from the viewer's width, and a range
    # three times the asked view's (its FETCH_RATIO), cut to the data URL's own.
    b"var u;try{u=new URL(data,location.href)}catch(e){return}"
    b"var p=u.searchParams,hosts=p.get('hosts')||p.get('host');"
    b"p.set('hosts',hosts?hosts.split(',').join(','):'none');"
    b"p.set('replace_model','true');if(!p.has('new_backend'))p.set('new_backend','false');"
    b"if(!p.has('resolution')){var r=q.has('resolution')?Number(q.get('resolution')):null;"
    b"if(r===null){var w=document.documentElement.clientWidth,dpr=window.devicePixelRatio||1;"
    b"r=w-%d<=0?Math.round(w*dpr/(2*dpr)):Math.round((w-%d)*dpr/(2*dpr))}"
    b"p.set('resolution',r*8)}"
    b"if(q.has('view_start')&&q.has('view_end')){var lo=Number(q.get('view_start')),"
    b"hi=Number(q.get('view_end')),mid=lo+(hi-lo)/2,"
    b"bl=p.has('start_time_ms')?Number(p.get('start_time_ms')):Number.MIN_VALUE,"
    b"bh=p.has('end_time_ms')?Number(p.get('end_time_ms')):Number.MAX_VALUE;"
    b"p.set('start_time_ms',Math.max(mid-3*(hi-lo)/2,bl));"
    b"p.set('end_time_ms',Math.min(mid+3*(hi-lo)/2,bh))}"
    b"function same(a){try{a=new URL(String(a),location.href)}catch(e){return false}"
    b"if(a.pathname!==u.pathname)return false;"
    b"var x=Array.from(a.searchParams).sort().join('&'),y=Array.from(p).sort().join('&');"
    b"return x===y}"
    b"var kept=fetch(u.href,{credentials:'same-origin'}).then(function(r){"
    b"return r.text().then(function(t){return{r:r,t:t}})});kept.catch(function(){});"
    b"window.__xprofPrefetch={url:u.href,used:0};"
    # XProf's request for that URL (once) is answered from the reply, whichever XMLHttpRequest
    # the page has: the browser's, or the kernel route's.
    b"var X=window.XMLHttpRequest.prototype,open=X.open,send=X.send;"
    b"X.open=function(m,url){this.__xprofSame=String(m).toUpperCase()==='GET'&&same(url);"
    b"return open.apply(this,arguments)};"
    b"X.send=function(){var x=this,args=arguments;"
    b"if(!x.__xprofSame||!kept){return send.apply(x,args)}var mine=kept;kept=null;"
    b"mine.then(function(got){if(!got.r.ok)throw 0;"
    b"function own(k,v){Object.defineProperty(x,k,{configurable:true,value:v})}"
    b"own('readyState',4);own('status',got.r.status);own('statusText',got.r.statusText);"
    b"own('responseURL',got.r.url);own('responseText',got.t);own('response',got.t);"
    b"own('getResponseHeader',function(n){return got.r.headers.get(n)});"
    b"own('getAllResponseHeaders',function(){var o='';"
    b"got.r.headers.forEach(function(v,k){o+=k+': '+v+'\\r\\n'});return o});"
    b"window.__xprofPrefetch.used+=1;"
    b"['readystatechange','load','loadend'].forEach(function(t){var f=x['on'+t];"
    b"if(typeof f==='function')f.call(x,{type:t,target:x,currentTarget:x})})"
    b"}).catch(function(){send.apply(x,args)})};"
    b"})();</script>"
) % (HEADING_WIDTH, HEADING_WIDTH)
"""Asks, from the trace viewer page's first bytes, for the trace data its script will ask
first, and answers that request (once, when its URL is the same) from the reply.

XProf's trace viewer sends its request only once its 3 MB script has loaded and run; its
reply then takes a round trip (through the kernel route, widget messages). The URL is the
one its ``_loadJSON`` builds: the data URL with ``hosts``, ``replace_model``, ``new_backend``,
the ``resolution`` from the page's width (less :data:`HEADING_WIDTH`, 2 px an event, times its
``ZOOM_RATIO`` of 8), and, for a page opened on a range (``view_start``, ``view_end``), three
times that range (its ``FETCH_RATIO``). A request with other parameters (another XProf, a
page of another width) goes to the viewer as before, and so does the one asked here if its
reply failed. ``window.__xprofPrefetch.used`` counts the requests answered so."""
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
    """XProf's index page for under a cell.

    With :data:`OWN_STORAGE`, :data:`PAGE_STYLE` and :data:`WATCH_BUSY`.
    """
    return _into_head(page, OWN_STORAGE + PAGE_STYLE + WATCH_BUSY)


def inline_trace_viewer(page: bytes) -> bytes:
    """XProf's trace viewer page for under a cell.

    With :data:`OWN_STORAGE`, :data:`TRACE_STYLE`, :data:`TRACE_PREFETCH`, :data:`TRACE_SETTLE`
    and :data:`WATCH_BUSY`.
    """
    added = OWN_STORAGE + TRACE_STYLE + TRACE_PREFETCH + TRACE_SETTLE + WATCH_BUSY
    return _into_head(page, added)
