"""Where the widget's selected XProf page shows: the :class:`Frame` the notebook context picks.

Most frontends take the page as an iframe inside the widget (:class:`IframeFrame`). Colab
cannot: only JavaScript in its output frame learns the URL of a kernel port, so its frame
(:class:`~xprof_magic._notebook.colab.ColabFrame`) is an output of its own under the widget.
:meth:`~xprof_magic._notebook.context.Context.frame` chooses; the widget only calls the
protocol, so it holds no branch on the frontend.

A new selection updates the page in place. The widget's wrapper iframe is written once and
then left alone: re-writing it would make the frontend build a new iframe, so the frame would
go blank, reload XProf from scratch and, while the output's height collapses, move the
notebook's scroll. Instead the wrapper follows a small hidden element of the widget
(:func:`page_state_html`) and, when that changes, navigates its inner frame to the new page
(``location.replace``: no browser history entry) and shows or hides its notes. An update
that changes nothing (the tools survey reordering the dropdown) touches no frame at all. A
tool with nothing for the run shrinks the frame to its one line. The lines themselves are
both fronts' (:mod:`xprof_magic._viewer.tool_pages`).
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import asdict, dataclass
from typing import Protocol

from xprof_magic._viewer.app.inline import BUSY_MESSAGE
from xprof_magic._viewer.process.route import PAGE_JS
from xprof_magic._viewer.tool_pages import (
    BUSY_S,
    CHARTS_NOTE,
    CHARTS_URL,
    ROUTE_LINES,
    notes,
)

__all__ = [
    "BUSY_S",
    "CHARTS_NOTE",
    "CHARTS_URL",
    "Areas",
    "Frame",
    "IframeFrame",
    "Page",
    "charts_probe_js",
    "embed_html",
    "frame_name",
    "notes",
    "page_state_html",
]


def charts_probe_js(note: str) -> str:
    """JavaScript that unhides the element ``note`` when the browser cannot fetch the chart library.

    ``note`` is a JS expression; the library is the one XProf's pages load at run time. It is
    fetched ``no-cors``: fetched, never run.
    """
    url = json.dumps(CHARTS_URL)
    return (
        f"fetch({url},{{mode:'no-cors',cache:'force-cache'}})"
        f".catch(function(){{var n={note};if(n)n.hidden=false;}});"
    )


@dataclass(frozen=True)
class Page:
    """What the frame shows: XProf's page at ``src``, whose whole UI is at ``full``.

    ``charts``: the page draws with Google's chart library, so the frame says, in one line
    under it, when the browser cannot load that (:data:`CHARTS_NOTE`). ``v2``: Trace Viewer
    v2's URL for a big run, offered in a new tab where the browser has WebGPU. ``name``: the
    tool as the dropdown names it. ``empty``: why the tool has nothing for this run (the
    survey's reason); the frame then shows :data:`~xprof_magic._viewer.tool_pages.EMPTY_NOTE` in
    place of XProf's page, which would only spin. ``wait``: a line that stands in place of
    the page, which is not loaded yet, the frame keeping its height
    (:data:`~xprof_magic._viewer.tool_pages.WAIT_NOTE`: the trace viewer waits for its window).
    ``under``: a line said under the page, about it (the survey's:
    :data:`~xprof_magic._viewer.survey.CPU_MEMORY_VIEWER`).

    How the browser reaches the page (:mod:`~xprof_magic._notebook.route`): ``base``, the
    viewer's root as the browser sees it (its health route is probed there); ``route``,
    ``auto`` (the port where it answers, else the kernel), ``direct`` or ``kernel`` (forced);
    ``kernel``: the page can be shown through the kernel (XProf's pages: every tool); ``version``:
    XProf's, the key its static files are cached under in the browser.
    """

    src: str
    full: str
    charts: bool = False
    v2: str | None = None
    name: str = ""
    empty: str = ""
    wait: str = ""
    under: str = ""
    base: str = ""
    route: str = "auto"
    kernel: bool = False
    version: str = ""


@dataclass(frozen=True)
class Areas:
    """What the widget's own areas hold for a page.

    ``frame``: the wrapper iframe, the same text for the widget's life, so the frontend never
    rebuilds it. ``state``: the hidden element the wrapper follows. ``link``: "open in new tab".
    """

    frame: str = ""
    state: str = ""
    link: str = ""


class Frame(Protocol):
    """The page's place. Called from the widget's observers and from its tools thread."""

    frame_id: str
    """Names the frame in the page: its XProf iframe is :func:`frame_name` of it, and the
    element that holds it carries ``data-xprof-frame`` with it."""

    def show(self, page: Page | None) -> Areas:
        """Point the frame at ``page`` (None: no run) and return what the widget's areas hold.

        Once shown, the frame changes in place.
        """
        ...

    def display(self) -> None:
        """Display what the frame shows outside the widget, right after the widget."""
        ...


def frame_name(frame_id: str) -> str:
    """The ``name`` of the iframe that holds XProf's page (``window.name`` inside it)."""
    return f"xprof-{frame_id}"


def _page_json(page: Page) -> str:
    return json.dumps(asdict(page), sort_keys=True)


def page_state_html(page: Page, frame_id: str) -> str:
    """The hidden element of the widget that the wrapper of ``frame_id`` follows."""
    return (
        f'<span class="xprof-page" hidden data-xprof-frame="{html.escape(frame_id)}" '
        f'data-page="{html.escape(_page_json(page), quote=True)}"></span>'
    )


# The wrapper's script. It starts on the page the wrapper was written with (its body's
# data-page), then follows the widget's hidden .xprof-page element of its frame id: the
# wrapper is same-origin with the notebook (a srcdoc frame), so frameElement is its iframe.
_WRAPPER_JS = """(function () {
  var body = document.body, id = body.dataset.frame;
  var inner = document.querySelector('iframe.xprof-inner');
  var note = document.querySelector('.xprof-charts-note');
  var under = document.querySelector('.xprof-under');
  var v2 = document.querySelector('.xprof-v2');
  var empty = document.querySelector('.xprof-empty'), slow = document.querySelector('.xprof-busy');
  var said = JSON.parse(body.dataset.notes), busyMs = Number(body.dataset.busyMs);
  var page = JSON.parse(body.dataset.page), text = '', timer = null, routeLine = '';
  var shown = 'about:blank', charts = null, gpu = null;
  function fill(line) {
    return line.replace('{name}', page.name || 'this tool').replace('{reason}', page.empty);
  }
  var holder = window.frameElement, tall = Number(body.dataset.height);
  // XProf's page keeps the frame's whole height: the lines under it (the charts note, the
  // busy note, the v2 link) add theirs below it, never over it. A tool with nothing to
  // show: the frame shrinks to its line, and grows back after.
  function fit() {
    if (!holder) return;
    var below = 0;
    [under, note, slow, v2, routed].forEach(function (e) {
      if (!e.hidden) below += e.offsetHeight;
    });
    var line = Math.max(32, empty.offsetHeight + 4);
    holder.style.height = (page.empty ? line : tall + below) + 'px';
  }
  function calm() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    slow.hidden = true;
    fit();
  }
  function marks() {
    var instead = page.empty ? fill(said.empty) : page.wait || routeLine;
    note.hidden = !(page.charts && !instead && charts === 'blocked');
    under.hidden = !(page.under && !instead);
    under.textContent = instead ? '' : page.under || '';
    if (page.v2) v2.href = page.v2;
    v2.hidden = !(page.v2 && gpu && body.dataset.route === 'direct');
    inner.hidden = !!instead;
    empty.hidden = !instead;
    empty.textContent = instead;
    empty.style.minHeight = page.wait ? tall + 'px' : '';
    fit();
  }
  addEventListener('message', function (e) {
    var m = e.data;
    if (e.source !== inner.contentWindow || !m || m.type !== __BUSY__) return;
    if (!m.busy) { calm(); return; }
    if (timer === null) timer = setTimeout(function () {
      slow.textContent = fill(said.busy);
      slow.hidden = false;
      fit();
    }, busyMs);
  });
  var routed = document.querySelector('.xprof-route-busy'), lines = JSON.parse(body.dataset.route);
  function port() {
    try { return new URL(page.base, document.baseURI).port; } catch (e) { return ''; }
  }
  function say(line) {
    routeLine = line ? line.replace('{name}', page.name || 'this tool')
      .replace(/{port}/g, port()) : '';
    marks();
  }
  function waits(on) { routed.hidden = !on; routed.textContent = lines.busy; fit(); }
  // The inner frame goes to a page only once the route is known: the port's URL where this
  // browser reaches it, else the page through the kernel (route_page.js), else a line.
  function go(target) {
    say('');
    if (target === 'about:blank') {
      inner.removeAttribute('srcdoc');
      inner.contentWindow.location.replace(target);
      return;
    }
    xprofRoute.choose(page).then(function (route) {
      body.dataset.route = route;
      // A link to the port is no use where the browser cannot reach it.
      var link = box && box.querySelector('.xprof-link');
      if (link) link.style.visibility = route === 'direct' ? '' : 'hidden';
      if (shown !== target) return;
      if (route === 'direct') {
        if (inner.hasAttribute('srcdoc')) { inner.removeAttribute('srcdoc'); inner.src = target; }
        else inner.contentWindow.location.replace(target);
      } else if (route === 'none') say(lines.none);
      else if (!page.kernel) say(lines.port_only);
      else xprofRoute.load(inner, page, target, waits).catch(function (e) {
        if (shown === target) say(lines.failed.replace('{error}', String(e && e.message || e)));
      });
    });
  }
  function apply(next) {
    page = next;
    var target = page.empty || page.wait ? 'about:blank' : page.src;
    if (target !== shown) {
      shown = target;
      calm();
      go(target);
    }
    if (page.charts && charts === null) {
      charts = 'asking';
      fetch(__CHARTS_URL__, {mode: 'no-cors', cache: 'force-cache'}).then(
        function () { charts = 'ok'; }, function () { charts = 'blocked'; marks(); });
    }
    if (page.v2 && gpu === null) {
      gpu = false;
      var g = navigator.gpu;
      if (g && g.requestAdapter) g.requestAdapter().then(
        function (a) { gpu = !!a; marks(); }).catch(function () {});
    }
    marks();
  }
  apply(page);
  var box = holder && holder.closest('.xprof-viewer');
  if (!box) return;
  function follow() {
    var state = box.querySelector('.xprof-page[data-xprof-frame="' + id + '"]');
    if (state && state.dataset.page !== text) {
      text = state.dataset.page;
      apply(JSON.parse(text));
    }
  }
  new MutationObserver(follow).observe(
    box, {subtree: true, childList: true, attributeFilter: ['data-page']});
  follow();
})();"""


FRAMED = "border:1px solid #ccc;border-radius:2px;box-sizing:border-box"
"""The frame's border, drawn around XProf's page (or the line in its place) alone, so that
the lines under it are outside it."""


def embed_html(page: Page, height: int, frame_id: str, busy_s: float = BUSY_S) -> str:
    """The wrapper iframe: a ``srcdoc`` page that holds XProf's page in an inner iframe.

    The wrapper is ``height`` pixels tall; its inner iframe is named :func:`frame_name`
    ``(frame_id)`` and is first on ``page``.

    XProf's UI calls ``window.parent.history.pushState``, which in a same-origin frame (a
    Jupyter proxy) would rewrite the notebook page's own URL; the wrapper takes that call.

    Under the page, outside its border (the page keeps its whole ``height``: the wrapper grows by
    the lines shown), the wrapper has:

    - the page's own line (:attr:`Page.under`);
    - :data:`CHARTS_NOTE`, shown when the page draws charts and the chart library cannot be
      fetched (instead of a spinner left without a reason);
    - a link to Trace Viewer v2 in a new tab, shown for a big run where WebGPU works (v2 fails
      without an adapter);
    - :data:`~xprof_magic._viewer.tool_pages.BUSY_NOTE`, shown when the page has said (its
      :data:`~xprof_magic._viewer.app.inline.WATCH_BUSY`) that a loading indicator shows, and
      it still shows ``busy_s`` later.

    A page whose tool has nothing for the run is not loaded:
    :data:`~xprof_magic._viewer.tool_pages.EMPTY_NOTE` stands in its place; nor is one that
    waits (:attr:`Page.wait`): its line stands there meanwhile.
    """
    script = _WRAPPER_JS.replace("__CHARTS_URL__", json.dumps(CHARTS_URL)).replace(
        "__BUSY__", json.dumps(BUSY_MESSAGE)
    )
    # The inner frame starts blank: it goes to the page once the route is chosen, so that it
    # never shows the browser's error page for a port it cannot reach.
    first = "about:blank"
    # XProf also calls history.replaceState on its parent: make that a no-op here.
    inner = (
        "<!doctype html><html><head><style>html,body{margin:0;height:100%;overflow:hidden}"
        "body{display:flex;flex-direction:column}"
        f"iframe{{{FRAMED};width:100%;flex:none;height:{int(height)}px}}"
        ".xprof-under,.xprof-charts-note,.xprof-v2,.xprof-busy,.xprof-route-busy"
        "{font:12px monospace;color:#8a5a00;"
        f"padding:2px 4px}}.xprof-empty{{font:13px monospace;padding:8px;{FRAMED}}}"
        "</style><script>"
        "history.pushState=history.replaceState=function(){};</script></head>"
        f'<body data-frame="{html.escape(frame_id)}" '
        f'data-page="{html.escape(_page_json(page), quote=True)}" '
        f'data-notes="{html.escape(json.dumps(notes(True, busy_s)), quote=True)}" '
        f'data-busy-ms="{int(busy_s * 1000)}" data-height="{int(height)}" '
        f'data-route="{html.escape(json.dumps(ROUTE_LINES), quote=True)}">'
        '<div class="xprof-empty" hidden></div>'
        f'<iframe class="xprof-inner" name="{frame_name(frame_id)}" '
        f'src="{html.escape(first, quote=True)}" '
        'allow="clipboard-write; fullscreen"></iframe>'
        '<div class="xprof-under" hidden></div>'
        f'<div class="xprof-charts-note" hidden>{html.escape(CHARTS_NOTE)}</div>'
        '<div class="xprof-busy" hidden></div><div class="xprof-route-busy" hidden></div>'
        '<a class="xprof-v2" hidden target="_blank" rel="noopener">'
        "big run: open in Trace Viewer v2 (WebGPU) ↗</a>"
        f"<script>{PAGE_JS}</script><script>{script}</script></body></html>"
    )
    return (
        f'<iframe class="xprof-outer" srcdoc="{html.escape(inner, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:0;display:block">'
        "</iframe>"
    )


class IframeFrame:
    """The page in a wrapper iframe inside the widget, with an "open in new tab" link."""

    def __init__(self, height: int, busy_s: float = BUSY_S) -> None:
        self.height = height
        self.busy_s = busy_s
        self.frame_id = uuid.uuid4().hex[:12]
        self._wrapper = ""

    def show(self, page: Page | None) -> Areas:
        """The widget's areas: the wrapper, the state it follows, and the link.

        The wrapper is written for the first page, and is the same text after.
        """
        if page is None:
            self._wrapper = ""  # the next page writes a wrapper of its own
            return Areas()
        if not self._wrapper:
            self._wrapper = embed_html(page, self.height, self.frame_id, self.busy_s)
        link = (
            f'<a class="xprof-open" href="{html.escape(page.full or page.src, quote=True)}" '
            'target="_blank" rel="noopener">open in new tab ↗</a>'
        )
        return Areas(self._wrapper, page_state_html(page, self.frame_id), link)

    def display(self) -> None:
        """Nothing: the iframe is part of the widget."""
