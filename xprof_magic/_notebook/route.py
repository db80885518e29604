"""The kernel route under a cell: XProf's pages through the widget's channel.

It is for a browser that cannot open the viewer's port. The widget shows XProf's page in an
iframe on the viewer's loopback port (or Colab's or a Jupyter server's proxy of it). Where
the browser cannot reach that port (VS Code over Remote-SSH, Colab in VS Code, Kaggle,
Positron, a JupyterLab through an SSH tunnel) the one channel every front carries is the
kernel's own: widget messages. :func:`route_widget` makes an invisible anywidget
(``route_widget.js``) that answers, through ipywidgets' custom messages, the requests of the
widget's wrapper frame (``_viewer/process/route_page.js``); the kernel forwards each to its
loopback viewer (:func:`xprof_magic._viewer.process.route.serve`: the same guard, secret and
refusals) from a thread of its own, and sends the reply back in chunks, each a binary
buffer.

The route is chosen in the browser, per widget (``route_page.js``): the viewer's port where
a request to its health route answers within a second, else the kernel route, else one line
saying what was tried. ``XPROF_MAGIC_PROXY_URL`` still forces a route: a proxy template
forces that proxy (:mod:`.context`), ``kernel`` forces the kernel route
(:func:`~xprof_magic._viewer.process.route.forced_route`).

How the page is shown through the kernel, and why that way: the wrapper asks the kernel for
the page, its scripts and style sheets, makes each file a ``blob:`` URL of the notebook's
origin and writes the page into its inner frame as ``srcdoc``, with a small script first
that answers the page's ``XMLHttpRequest`` and ``fetch`` to the viewer through the kernel,
and a stand-in for the page's URL (XProf's trace viewer reads its parameters and builds
its data URLs from ``window.location``, which in a ``srcdoc`` frame is ``about:srcdoc``).
A service worker would serve a real URL instead, but Chromium registers one only from a
script served over HTTP from the page's own origin (never ``blob:``, ``data:`` or a
``srcdoc`` frame's), and the notebook server serves no file of ours without a server
extension (VS Code's and Colab's output frames none at all); rewriting requests inside the
frame needs nothing on the server. The page's own moves (``location.replace``, as the page
said while a run is prepared reloads into the timeline) and the frames it opens on the
viewer (that page's preview) are written the same way, each with the same script.

XProf's other tools are its Angular app, which routes on its URL: its router reads the path
(``/<secret>/data/plugin/profile/overview_page``) and the query (run, host) from the
``window.location`` it keeps, and moves with ``history.pushState``; its data service takes
the secret prefix from the same path; its graph viewer builds its frame's URL on
``window.origin`` and moves that frame with ``contentWindow.location.replace``. A
``srcdoc`` frame's own location is ``about:srcdoc``, and ``window.location`` cannot be
replaced, so the page's scripts, as they cross, read a stand-in for each instead (the
location, a history that moves only the stand-in, the origin, a frame's location that opens
the viewer's pages through the kernel); scripts the app adds itself (its runtime and
bundle) and the fonts its style sheet names come through the kernel as ``blob:`` URLs too;
and the page's ``XMLHttpRequest`` stand-in runs each listener in the zone.js zone it was
added in, as zone.js's own would, so that Angular updates its view when a reply arrives.
The graph viewer's renderer is told where its WebAssembly is (a ``blob:`` script has no
folder). Every tool the port shows thus shows through the kernel.

Static files (the trace viewer's 2.8 MB script) are kept in the browser's Cache API, keyed
by XProf's version, so they cross the kernel once per browser, not per cell or per switch.
A busy kernel reads no widget message until its cell ends: the frame says so in one line
when a request has not been taken within 1.5 s, and the page continues when it is.
(JupyterLab ≥ 4.4 sends widget messages on a subshell, but ipykernel 7.4 hands them to the
shell the widget last sent from, the main shell; docs/guide/viewer.md, "A busy kernel",
says why the route does not take the frontend's subshell instead.)
marimo's view takes the same route through its own anywidget (``_marimo/view.js``).
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from pathlib import Path
from typing import Any

from xprof_magic._viewer.process.client import Viewer
from xprof_magic._viewer.process.route import serve

__all__ = ["route_widget"]

_HERE = Path(__file__).resolve().parent


@functools.cache
def _widget_class() -> type[Any] | None:
    if importlib.util.find_spec("anywidget") is None:
        return None
    import anywidget

    class KernelRoute(anywidget.AnyWidget):
        """Nothing to see: the kernel's end of the route (see the module)."""

        _esm = _HERE / "route_widget.js"

    return KernelRoute


def route_widget(viewer: Viewer) -> Any | None:
    """The widget that answers the browser's requests for ``viewer`` through the kernel.

    None where anywidget is not installed: the browser then says the route is missing.
    """
    made = _widget_class()
    if made is None:
        return None
    widget = made()
    widget.add_class("xprof-route-widget")

    def send(content: dict[str, Any], buffers: list[bytes]) -> None:
        widget.send(content, buffers=buffers or None)

    def on_msg(_: Any, content: Any, buffers: Any) -> None:
        # The kernel's own thread reads the message; the reply, which may wait seconds for
        # XProf's conversion, is read and sent from a thread of its own (each holding one
        # chunk at a time), so the kernel stays free.
        threading.Thread(target=serve, args=(viewer, content, send), daemon=True).start()

    widget.on_msg(on_msg)
    return widget
