"""Where the widget's selected XProf page shows: the :class:`Frame` the notebook context picks.

Most frontends take the page as an iframe inside the widget (:class:`IframeFrame`). Colab
cannot: only JavaScript in its output frame learns the URL of a kernel port, so its frame
(:class:`~xprof_magic._notebook.colab.ColabFrame`) is an output of its own under the widget.
:meth:`~xprof_magic._notebook.context.Context.frame` chooses; the widget only calls the
protocol, so it holds no branch on the frontend.
"""

from __future__ import annotations

import html
import json
from typing import Protocol

__all__ = [
    "CHARTS_NOTE",
    "CHARTS_URL",
    "V2_JS",
    "Frame",
    "IframeFrame",
    "charts_probe_js",
    "embed_html",
]

CHARTS_URL = "https://www.gstatic.com/charts/loader.js"
CHARTS_NOTE = (
    "xprof: Google's charts (www.gstatic.com) do not load here: charts and some tables stay "
    "blank; get internet, or use the trace viewer."
)


def charts_probe_js(note: str) -> str:
    """JavaScript that unhides the element ``note`` (a JS expression) when the browser cannot
    fetch the chart library XProf's pages load at run time; ``no-cors``: fetched, never run."""
    url = json.dumps(CHARTS_URL)
    return (
        f"fetch({url},{{mode:'no-cors',cache:'force-cache'}})"
        f".catch(function(){{var n={note};if(n)n.hidden=false;}});"
    )


class Frame(Protocol):
    """The page's place. Called from the widget's observers and from its tools thread."""

    def show(
        self, src: str | None, full: str | None, charts: bool = False, v2: str | None = None
    ) -> tuple[str, str]:
        """Point the frame at ``src`` (the embedded page; None: no run), with ``full`` the
        whole UI's URL; return the HTML of the widget's own frame and link areas. ``charts``:
        the page draws with Google's chart library, so the frame says, in one line under it,
        when the browser cannot load that (:data:`CHARTS_NOTE`). ``v2``: Trace Viewer v2's
        URL for a big run, offered where the browser has WebGPU (:data:`V2_JS`)."""
        ...

    def display(self) -> None:
        """Display what the frame shows outside the widget, right after the widget."""
        ...


V2_JS = (
    "var g=navigator.gpu;if(g&&g.requestAdapter)g.requestAdapter().then(function(a){"
    "if(a)document.querySelector('.xprof-v2').hidden=false;}).catch(function(){});"
)
"""Unhides the wrapper's Trace Viewer v2 link once the browser gives a WebGPU adapter, which
v2 needs to draw; without one, v2 fails, so it is never offered there."""


def embed_html(src: str, height: int, charts: bool = False, v2: str | None = None) -> str:
    """The page at ``src`` inside a ``srcdoc`` wrapper iframe, ``height`` pixels tall.

    XProf's UI calls ``window.parent.history.pushState``, which in a same-origin frame (a
    Jupyter proxy) would rewrite the notebook page's own URL; the wrapper takes that call.
    With ``charts``, the wrapper also shows :data:`CHARTS_NOTE` under the page when the
    chart library cannot be fetched, instead of a spinner left without a reason; with
    ``v2``, a link to Trace Viewer v2 in a new tab where WebGPU works (:data:`V2_JS`).
    """
    note = 'document.querySelector(".xprof-charts-note")'
    probe = f"<script>{charts_probe_js(note)}</script>" if charts else ""
    if v2:
        probe += (
            f'<a class="xprof-v2" hidden href="{html.escape(v2, quote=True)}" target="_blank" '
            'rel="noopener">big run: open in Trace Viewer v2 (WebGPU) ↗</a>'
            f"<script>{V2_JS}</script>"
        )
    # XProf also calls history.replaceState on its parent: make that a no-op here.
    inner = (
        "<!doctype html><html><head><style>html,body{margin:0;height:100%;overflow:hidden}"
        "body{display:flex;flex-direction:column}iframe{border:0;width:100%;flex:1}"
        ".xprof-charts-note,.xprof-v2{font:12px monospace;color:#8a5a00;padding:2px 4px}"
        "</style><script>"
        "history.pushState=history.replaceState=function(){};</script></head><body>"
        f'<iframe class="xprof-inner" src="{html.escape(src, quote=True)}" '
        'allow="clipboard-write; fullscreen"></iframe>'
        f'<div class="xprof-charts-note" hidden>{html.escape(CHARTS_NOTE)}</div>'
        f"{probe}</body></html>"
    )
    return (
        f'<iframe class="xprof-outer" srcdoc="{html.escape(inner, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ccc;border-radius:2px">'
        "</iframe>"
    )


class IframeFrame:
    """The page in a wrapper iframe inside the widget, with an "open in new tab" link."""

    def __init__(self, height: int) -> None:
        self.height = height

    def show(
        self, src: str | None, full: str | None, charts: bool = False, v2: str | None = None
    ) -> tuple[str, str]:
        if src is None:
            return "", ""
        link = (
            f'<a class="xprof-open" href="{html.escape(full or src, quote=True)}" '
            'target="_blank" rel="noopener">open in new tab ↗</a>'
        )
        return embed_html(src, self.height, charts, v2), link

    def display(self) -> None:
        """Nothing: the iframe is part of the widget."""
