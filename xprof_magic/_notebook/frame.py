"""Where the widget's selected XProf page shows: the :class:`Frame` the notebook context picks.

Most frontends take the page as an iframe inside the widget (:class:`IframeFrame`). Colab
cannot: only JavaScript in its output frame learns the URL of a kernel port, so its frame
(:class:`~xprof_magic._notebook.colab.ColabFrame`) is an output of its own under the widget.
:meth:`~xprof_magic._notebook.context.Context.frame` chooses; the widget only calls the
protocol, so it holds no branch on the frontend.
"""

from __future__ import annotations

import html
from typing import Protocol

__all__ = ["Frame", "IframeFrame", "embed_html"]


class Frame(Protocol):
    """The page's place. Called from the widget's observers and from its tools thread."""

    def show(self, src: str | None, full: str | None) -> tuple[str, str]:
        """Point the frame at ``src`` (the embedded page; None: no run), with ``full`` the
        whole UI's URL; return the HTML of the widget's own frame and link areas."""
        ...

    def display(self) -> None:
        """Display what the frame shows outside the widget, right after the widget."""
        ...


def embed_html(src: str, height: int) -> str:
    """The page at ``src`` inside a ``srcdoc`` wrapper iframe, ``height`` pixels tall.

    XProf's UI calls ``window.parent.history.pushState``, which in a same-origin frame (a
    Jupyter proxy) would rewrite the notebook page's own URL; the wrapper takes that call.
    """
    # XProf also calls history.replaceState on its parent: make that a no-op here.
    inner = (
        "<!doctype html><html><head><style>html,body{margin:0;height:100%;overflow:hidden}"
        "iframe{border:0;width:100%;height:100%}</style><script>"
        "history.pushState=history.replaceState=function(){};</script></head><body>"
        f'<iframe class="xprof-inner" src="{html.escape(src, quote=True)}" '
        'allow="clipboard-write; fullscreen"></iframe></body></html>'
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

    def show(self, src: str | None, full: str | None) -> tuple[str, str]:
        if src is None:
            return "", ""
        link = (
            f'<a class="xprof-open" href="{html.escape(full or src, quote=True)}" '
            'target="_blank" rel="noopener">open in new tab ↗</a>'
        )
        return embed_html(src, self.height), link

    def display(self) -> None:
        """Nothing: the iframe is part of the widget."""
