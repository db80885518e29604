"""XProf's pages in the form for under a cell, in Chromium, without a notebook.

A real capture, a real viewer, and a page 848 px wide (JupyterLab's output beside its file
browser) that holds each embedded page in an iframe, as the widget's wrapper does: XProf's
toolbar and menu are gone and the tools' own panels leave room; the same page asked for
without ``xprof_magic=inline`` (open in new tab) is XProf's full UI; the page tells its
parent whether a loading indicator shows; the trace viewer opens on the window asked for,
the label row first, its tool palette in the bottom right corner.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests._browser import offline
from tests._kernel import free_port
from tests._page_checks import (
    RECORD_SHOWN_RANGES,
    busy,
    first_thread,
    nav_shown,
    shown_ranges,
    visible_range,
)
from tests._wait import wait_until
from tests.conftest import ARTIFACTS
from xprof_magic._viewer.app import inline
from xprof_magic._viewer.process import client, manager

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
RUN = "pages"
HOST = os.uname().nodename
WIDTH, HEIGHT = 848, 700
LOAD_S = 90.0
IDLE_S = 30.0
_HOLDER_PAGE = (
    "<!doctype html><body style='margin:0'><script>window.posted=[];"
    "addEventListener('message',e=>posted.push(e.data))</script>"
    f"<iframe id='x' style='border:0;width:{WIDTH}px;height:{HEIGHT}px'></iframe><script>"
    "document.getElementById('x').src=new URLSearchParams(location.search).get('src')"
    "</script></body>"
)


PAGES: dict[str, str] = {}
"""Pages the holder serves at ``/page/<name>``, set by the tests."""


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.Viewer]:
    home = tmp_path_factory.mktemp("pages")
    profile = home / "logs" / "plugins" / "profile"
    env = dict(os.environ, PJRT_DEVICE="CPU", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, str(HERE / "_viewer_capture.py"), str(profile), RUN],
        check=True,
        env=env,
        capture_output=True,
        timeout=180,
    )
    previous = os.environ.get("XPROF_MAGIC_VIEWER_DIR")
    os.environ["XPROF_MAGIC_VIEWER_DIR"] = str(home / "viewers")
    outcome = manager.ensure_viewer(home / "logs", timeout=60)
    try:
        assert isinstance(outcome, manager.Launched), outcome
        yield outcome.viewer
    finally:
        if isinstance(outcome, manager.Launched):
            manager.stop_viewer(outcome.viewer)
        if previous is None:
            os.environ.pop("XPROF_MAGIC_VIEWER_DIR", None)
        else:
            os.environ["XPROF_MAGIC_VIEWER_DIR"] = previous


@pytest.fixture(scope="module")
def holder() -> Iterator[str]:
    """A page on loopback, another port than the viewer's (as a notebook is), that holds the
    page named by its ``src`` parameter in an iframe and keeps what that page posts."""

    class Holder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.partition("?")[0].removeprefix("/page/")
            body = (PAGES.get(name) or _HOLDER_PAGE).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Holder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class Framed:
    """A page that holds one of XProf's pages in an iframe, as the widget's wrapper does,
    and keeps the messages that page posts to it."""

    def __init__(self, browser: Any, holder: str, url: str) -> None:
        self.context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        self.context.add_init_script(RECORD_SHOWN_RANGES)
        offline(self.context)
        self.page = self.context.new_page()
        self.page.goto(f"{holder}/?{urlencode({'src': url})}")
        self.frame = wait_until(self._frame, LOAD_S, f"the frame of {url}", self.pause)

    def _frame(self) -> Any:
        handle = self.page.query_selector("iframe#x")
        found = handle.content_frame() if handle else None
        return found if found is not None and found.url not in ("", "about:blank") else None

    def pause(self, seconds: float) -> None:
        self.page.wait_for_timeout(seconds * 1000)

    def posted(self) -> list[Any]:
        messages: list[Any] = self.page.evaluate("() => window.posted")
        return [m for m in messages if isinstance(m, dict) and m.get("type") == inline.BUSY_MESSAGE]

    def idle(self) -> bool:
        """No loading indicator shows, and the page has said so to its parent."""
        said = self.posted()
        return not busy(self.frame) and bool(said) and said[-1]["busy"] is False

    def describe(self) -> str:
        return f"{self.frame.url}: loading {busy(self.frame)}; said {self.posted()}"

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"pages-{name}.png"))

    def close(self) -> None:
        self.context.close()


def _panel_width(frame: Any) -> float:
    """The width of the tool's own side panel (its ``mat-sidenav``), 0 when it has none."""
    width: float = frame.evaluate(
        "() => { const s = document.querySelector("
        "'mat-sidenav-content mat-sidenav-container > mat-sidenav.mat-drawer-side');"
        " return s ? s.getBoundingClientRect().width : 0; }"
    )
    return width


def test_an_embedded_tool_comes_without_xprofs_menu_and_says_when_it_is_done(
    viewer: client.Viewer, browser: Any, holder: str
) -> None:
    for tool in ("overview_page", "memory_viewer"):
        framed = Framed(browser, holder, viewer.url(viewer.embedded_path(RUN, tool, HOST)))
        try:
            wait_until(framed.idle, IDLE_S, framed.describe, framed.pause)
            assert nav_shown(framed.frame) == [], tool
            if tool == "memory_viewer":
                width = _panel_width(framed.frame)
                assert 0 < width <= 261, width
            framed.screenshot(f"embedded-{tool}")
        finally:
            framed.close()
    # The same page as "open in new tab" asks for it: XProf's own, menu and all.
    full = Framed(
        browser, holder, viewer.url(viewer.tool_path(RUN, "memory_viewer", HOST) + "&new_nav=true")
    )
    try:
        wait_until(lambda: nav_shown(full.frame), LOAD_S, "XProf's menu in its full UI", full.pause)
        assert full.posted() == [] and _panel_width(full.frame) > 300
        full.screenshot("full-memory_viewer")
    finally:
        full.close()


def test_a_page_that_keeps_loading_tells_its_parent(
    viewer: client.Viewer, browser: Any, holder: str
) -> None:
    """HLO stats has nothing for a CPU capture, and offline it never stops loading: the page
    says it is busy, and what it says matches what it shows."""
    framed = Framed(browser, holder, viewer.url(viewer.embedded_path(RUN, "hlo_stats", HOST)))
    try:
        wait_until(
            lambda: busy(framed.frame) and framed.posted(),
            LOAD_S,
            "HLO stats' loading indicator and the page's word of it",
            framed.pause,
        )
        framed.pause(1.5)
        assert framed.posted()[-1]["busy"] is bool(busy(framed.frame))
        framed.screenshot("embedded-hlo_stats")
    finally:
        framed.close()


def test_the_trace_viewer_opens_on_the_window_asked_for_label_row_first(
    viewer: client.Viewer, browser: Any, holder: str
) -> None:
    whole = client.fetch_json(viewer, "data", run=RUN, tag="trace_viewer@", host=HOST)
    low, high = whole["fullTimespan"]
    start, end = low + (high - low) * 0.4, low + (high - low) * 0.6
    path = viewer.trace_viewer_path(RUN, HOST, view_start=start, view_end=end)
    framed = Framed(browser, holder, viewer.url(path))
    try:
        wait_until(
            lambda: visible_range(framed.frame) and first_thread(framed.frame),
            LOAD_S,
            "the trace viewer's rows",
            framed.pause,
        )
        window = {"min": start, "max": end}
        wait_until(
            lambda: visible_range(framed.frame) == pytest.approx(window, abs=1e-3),
            30.0,
            lambda: f"{visible_range(framed.frame)}, not {start:.3f}..{end:.3f} ms",
            framed.pause,
        )
        # The first range a person sees is the one asked for: XProf draws its default one
        # (the whole capture) first, until it applies view_start and view_end, and the page
        # hides its timeline meanwhile.
        seen = shown_ranges(framed.frame)
        assert seen and seen[0] == pytest.approx(window, abs=1e-3), seen
        assert first_thread(framed.frame) == "python"
        palette = framed.frame.evaluate(
            "() => document.querySelector('tr-ui-b-mouse-mode-selector')"
            ".getBoundingClientRect().toJSON()"
        )
        # In the bottom right corner: off the label row and the first steps.
        assert palette["right"] >= WIDTH - 30 and palette["top"] >= HEIGHT / 2, palette
        wait_until(
            framed.idle, IDLE_S, lambda: f"still loading: {busy(framed.frame)}", framed.pause
        )
        framed.screenshot("embedded-trace_viewer")
    finally:
        framed.close()


def test_the_frames_say_when_a_page_keeps_loading(
    viewer: client.Viewer, browser: Any, holder: str
) -> None:
    """The widget's wrapper frame, and Colab's output frame, each say in one line that
    XProf's page still shows a loading indicator once it has for ``busy_s`` (HLO stats, which
    offline never stops loading), and say nothing while a page loads within it."""
    from xprof_magic._notebook import colab, frame

    src = viewer.url(viewer.embedded_path(RUN, "hlo_stats", HOST))
    page = frame.Page(src, src, name="HLO stats")
    PAGES["wrapper"] = f"<body style='margin:0'>{frame.embed_html(page, HEIGHT, 'w', 2.0)}</body>"
    fake_proxy = "window.google={colab:{kernel:{proxyPort:async p=>'http://127.0.0.1:'+p+'/'}}};"
    path = src.removeprefix(viewer.origin)
    probe = viewer.base_path + colab.PROBE_PATH
    script = colab.script(viewer.port, path, probe, HEIGHT, "c", page=page, busy_s=2.0)
    PAGES["colab"] = f"<body><script>{fake_proxy}{script}</script></body>"
    expected = "xprof: HLO stats is still loading after 2 s"
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT + 100})
    offline(context)
    try:
        shown = context.new_page()
        shown.goto(f"{holder}/page/wrapper")
        line = shown.frame_locator("iframe.xprof-outer").locator(".xprof-busy")
        line.wait_for(state="visible", timeout=LOAD_S * 1000)
        assert line.inner_text().startswith(expected) and "new tab" in line.inner_text()
        shown.screenshot(path=str(ARTIFACTS / "pages-wrapper-busy.png"))
        output = context.new_page()
        output.goto(f"{holder}/page/colab")
        said = output.locator(".xprof-colab .xprof-busy")
        said.wait_for(state="visible", timeout=LOAD_S * 1000)
        assert said.inner_text().startswith(expected) and "new tab" not in said.inner_text()
        # A page that finishes says nothing: the overview, in the same wrapper.
        done = frame.Page(viewer.url(viewer.embedded_path(RUN, "overview_page", HOST)), src)
        PAGES["wrapper"] = frame.embed_html(done, HEIGHT, "w", 2.0)
        quiet = context.new_page()
        quiet.goto(f"{holder}/page/wrapper")
        inner = quiet.frame_locator("iframe.xprof-outer")
        inner.frame_locator("iframe.xprof-inner").get_by_text("Performance Summary").first.wait_for(
            timeout=LOAD_S * 1000
        )
        page_frame = quiet.frame(name=frame.frame_name("w"))
        assert page_frame is not None
        wait_until(
            lambda: not busy(page_frame),
            IDLE_S,
            "the overview to finish",
            lambda t: quiet.wait_for_timeout(t * 1000),
        )
        assert inner.locator(".xprof-busy").is_hidden()
    finally:
        context.close()
