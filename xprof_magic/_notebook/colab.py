"""The viewer under a cell in Colab: an iframe that JavaScript in the output frame makes.

The kernel does not know the URL under which Colab's browser reaches a kernel port, and must
never wait for a browser to tell it (``google.colab.output.eval_js`` waits forever when no
browser is attached). So, as TensorBoard's ``%tensorboard`` does (tensorboard/notebook.py,
``_display_colab``), the kernel displays JavaScript that awaits
``google.colab.kernel.proxyPort(port, ...)`` in the output frame and makes the iframe there.
A new selection in the widget's dropdowns replaces that output in place through its display
handle (``update_display_data``), as ``%tensorboard`` replaces its own output.

An iframe's ``load`` event fires on an error page too, so whether the proxy lets the frame
in (it answers 403 when the browser blocks third-party cookies) is asked separately: a
``<link rel=preload>`` of a small script of XProf's through the same proxied origin, whose
``error`` event fires on a 403. Only then is the one-line hint shown. Colab gets no "open in
new tab" link: proxied URLs answer 403 outside the output frame.
"""

from __future__ import annotations

import json
import threading
import uuid

from IPython.display import DisplayHandle, display

from xprof_magic._notebook.frame import (
    BUSY_S,
    CHARTS_NOTE,
    Areas,
    Page,
    charts_probe_js,
    frame_name,
    notes,
)
from xprof_magic._viewer.app.inline import BUSY_MESSAGE

__all__ = ["BLOCKED_HINT", "MIME", "PROBE_PATH", "ColabFrame", "script"]

BLOCKED_HINT = (
    "xprof: Colab's proxy refused the viewer's frame (HTTP 403), which happens when the browser "
    "blocks third-party cookies: allow them for colab.research.google.com (or for "
    "[*.]googleusercontent.com), reload the page and re-run the cell."
)
UNREACHABLE_HINT = (
    "xprof: Colab's proxy gave no URL for the viewer's port {port}: re-run the cell, "
    "or %xprof viewer stop first if the viewer had stopped."
)
# 76 bytes of XProf's static files: fetched to learn whether the proxy lets the frame in.
PROBE_PATH = "/data/plugin/profile/index.js"
MIME = "application/javascript"


# The output frame's script; :func:`script` calls it with its arguments as ``a``.
_FRAME_JS = (
    "async (a) => {\n"
    "  const host = (typeof element !== 'undefined' && element && element.get)\n"
    "    ? element.get(0) : document.body;\n"
    "  for (const old of document.querySelectorAll('.xprof-colab[data-xprof-frame]')) {\n"
    "    if (old.dataset.xprofFrame === a.id) old.remove();\n"
    "  }\n"
    "  const box = document.createElement('div');\n"
    "  box.dataset.xprofFrame = a.id;\n"
    "  box.className = 'xprof-colab';\n"
    "  const hint = document.createElement('div');\n"
    "  hint.className = 'xprof-colab-hint';\n"
    "  hint.style.cssText = 'color:#b00;font-family:monospace;margin:4px 0';\n"
    "  hint.hidden = true;\n"
    "  box.appendChild(hint);\n"
    "  host.appendChild(box);\n"
    "  if (a.empty || a.wait) {\n"
    "    const line = document.createElement('div');\n"
    "    line.className = 'xprof-empty';\n"
    "    line.style.cssText = 'font-family:monospace;margin:8px 0';\n"
    "    if (a.wait) line.style.minHeight = a.height + 'px';\n"
    "    line.textContent = a.empty || a.wait; box.appendChild(line); return;\n"
    "  }\n"
    "  let base;\n"
    "  try {\n"
    "    base = String(await google.colab.kernel.proxyPort(a.port, {cache: false}));\n"
    "  } catch (e) {\n"
    "    hint.textContent = a.unreachable; hint.hidden = false; return;\n"
    "  }\n"
    "  base = base.replace(/\\/+$/, '');\n"
    "  const frame = document.createElement('iframe');\n"
    "  frame.className = 'xprof-inner';\n"
    "  frame.name = a.name;\n"
    "  frame.src = base + a.path;\n"
    "  frame.allow = 'clipboard-write; fullscreen';\n"
    "  frame.style.cssText = 'width:100%;border:1px solid #ccc;border-radius:2px';\n"
    "  frame.height = String(a.height);\n"
    "  box.appendChild(frame);\n"
    "  if (a.under) {\n"
    "    const under = document.createElement('div');\n"
    "    under.className = 'xprof-under';\n"
    "    under.style.cssText = 'color:#8a5a00;font-family:monospace;font-size:12px';\n"
    "    under.textContent = a.under; box.appendChild(under);\n"
    "  }\n"
    "  const probe = document.createElement('link');\n"
    "  probe.rel = 'preload'; probe.as = 'script'; probe.href = base + a.probe;\n"
    "  probe.onload = () => probe.remove();\n"
    "  probe.onerror = () => {\n"
    "    probe.remove(); frame.remove(); hint.textContent = a.blocked; hint.hidden = false;\n"
    "  };\n"
    "  document.head.appendChild(probe);\n"
    "  const slow = document.createElement('div');\n"
    "  slow.className = 'xprof-busy';\n"
    "  slow.style.cssText = 'color:#8a5a00;font-family:monospace;font-size:12px';\n"
    "  slow.hidden = true; box.appendChild(slow);\n"
    "  let timer = null;\n"
    "  window.addEventListener('message', (e) => {\n"
    "    const m = e.data;\n"
    "    if (!box.isConnected || e.source !== frame.contentWindow) return;\n"
    "    if (!m || m.type !== a.busy_type) return;\n"
    "    if (!m.busy) { clearTimeout(timer); timer = null; slow.hidden = true; return; }\n"
    "    if (timer === null) timer = setTimeout(() => {\n"
    "      slow.textContent = a.busy_note; slow.hidden = false;\n"
    "    }, a.busy_ms);\n"
    "  });\n"
    "  if (a.charts) {\n"
    "    const note = document.createElement('div');\n"
    "    note.className = 'xprof-charts-note';\n"
    "    note.style.cssText = 'color:#8a5a00;font-family:monospace;font-size:12px';\n"
    "    note.hidden = true; note.textContent = a.charts_note;\n"
    "    box.appendChild(note);\n"
    f"    {charts_probe_js('note')}\n"
    "  }\n"
    "}"
)


def script(
    port: int,
    path: str,
    probe: str,
    height: int,
    frame_id: str,
    charts: bool = False,
    page: Page | None = None,
    busy_s: float = BUSY_S,
) -> str:
    """JavaScript for the output frame: the viewer's iframe, and the notes said under it.

    The iframe replaces any earlier one with the same ``frame_id``. A ``page`` whose tool has
    nothing for the run gets its one line in place of the frame; one that waits (its ``wait``),
    that line, as tall as the frame.

    Args:
        port: The iframe is under the proxied origin of this port.
        path: Where the iframe points: an absolute path on the viewer, secret included.
        probe: The hint is shown if the proxy refuses this.
        charts: Show :data:`~xprof_magic._notebook.frame.CHARTS_NOTE` under the frame if the
            chart library cannot load.
        busy_s: Show the busy note under the frame when XProf's page says it is still loading
            this long after it began.
    """
    said = notes(False, busy_s)
    name = (page.name if page else "") or "this tool"
    empty = page.empty if page else ""
    args = json.dumps(
        {
            "port": int(port),
            "path": path,
            "probe": probe,
            "height": int(height),
            "id": frame_id,
            "name": frame_name(frame_id),
            "charts": charts,
            "charts_note": CHARTS_NOTE,
            "blocked": BLOCKED_HINT,
            "unreachable": UNREACHABLE_HINT.format(port=int(port)),
            "empty": said["empty"].replace("{name}", name).replace("{reason}", empty)
            if empty
            else "",
            "busy_type": BUSY_MESSAGE,
            "busy_note": said["busy"].replace("{name}", name),
            "busy_ms": int(busy_s * 1000),
            "wait": page.wait if page else "",
            "under": page.under if page else "",
        }
    )
    return f"({_FRAME_JS})({args});\n"


class ColabFrame:
    """The viewer's iframe in an output of its own, under the widget.

    Updated in place as the selection changes (a :class:`~xprof_magic._notebook.frame.Frame`).
    """

    def __init__(self, port: int, secret_prefix: str, height: int, busy_s: float = BUSY_S) -> None:
        self.port = port
        self.busy_s = busy_s
        self.probe = secret_prefix + PROBE_PATH
        self.height = height
        self.frame_id = uuid.uuid4().hex[:12]
        self.source = ""
        self.handle: DisplayHandle | None = None
        self._lock = threading.Lock()

    def bundle(self) -> dict[str, str]:
        return {MIME: self.source, "text/plain": ""}

    def show(self, page: Page | None) -> Areas:
        """Point the output at ``page`` (None: no run, no frame), in place once displayed.

        The widget's areas stay empty: proxied URLs answer 403 outside the output frame, so there is
        no new-tab link, nor Trace Viewer v2 (a new tab).
        """
        source = (
            script(
                self.port,
                page.src,
                self.probe,
                self.height,
                self.frame_id,
                page.charts and not page.empty,
                page,
                self.busy_s,
            )
            if page
            else ""
        )
        with self._lock:
            if source != self.source:
                self.source = source
                if self.handle is not None:
                    self.handle.update(self.bundle(), raw=True)
        return Areas()

    def display(self) -> None:
        """Display the output, under the widget; later selections update it."""
        with self._lock:
            if self.handle is None:
                self.handle = display(self.bundle(), raw=True, display_id=True)
