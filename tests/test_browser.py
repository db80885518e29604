"""Acceptance: ``%%xprof`` in a real JupyterLab, seen by a real Chromium.

What only a browser can show: the widget renders under the cell, XProf's trace viewer loads
inside it and fetches the cell's own labels, the runs dropdown switches captures, and the
notebook page keeps its URL (XProf's UI rewrites its parent's URL when embedded same-origin).
Two routes from the browser to the loopback viewer: its own port (JupyterLab on this
machine), and jupyter-server-proxy's ``/proxy/<port>/`` (Binder, JupyterHub), which is same
origin as the notebook. One JupyterLab and one Chromium serve both.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests._browser import (
    CHROMIUM_ARGS,
    PROXY_KERNEL,
    DataFetches,
    JupyterLab,
    ToolView,
    check_every_tool,
    find_chromium,
    offline,
    select_run,
    shut_down,
    start_jupyterlab,
    wait_until,
    write_notebook,
)
from tests.conftest import ARTIFACTS, missing

pytestmark = pytest.mark.browser

ROUTES = {"direct": "python3", "proxy": PROXY_KERNEL}
RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 90.0


def cells(route: str) -> list[str]:
    """Set-up, then two captures with labels of their own: ``forward`` and ``evaluate``."""
    return [
        "%load_ext xprof_magic\nimport torch, torch_xla\ndevice = torch_xla.device()",
        f"%%xprof --name {route}-train\n"
        "x = torch.randn(64, 64, device=device)\n"
        "# xprof: forward\n"
        "y = (x @ x).relu().sum()\n"
        "torch_xla.sync()\n"
        "y.item()",
        f"%%xprof --name {route}-eval\n"
        "# xprof: evaluate\n"
        "z = (x * 2).sum()\n"
        "torch_xla.sync()\n"
        "z.item()",
    ]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp("jupyterlab")
    server = start_jupyterlab(home)
    try:
        yield server
    finally:
        shut_down(server, home)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium = find_chromium()
    if chromium is None:
        missing("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        home = tmp_path_factory.mktemp("chromium-home")
        launched = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, env={**os.environ, "HOME": str(home)}
        )
        try:
            yield launched
        finally:
            launched.close()


class Notebook:
    """One notebook open in JupyterLab, and what the page fetched and where it went."""

    def __init__(self, page: Any, lab: JupyterLab) -> None:
        self.page = page
        self.lab = lab
        self.data = DataFetches()
        self.navigations: list[str] = []
        page.on("response", self.data.on_response)
        page.on("framenavigated", self._navigated)

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.navigations.append(frame.url)

    def pause(self, seconds: float) -> None:
        self.page.wait_for_timeout(seconds * 1000)

    def prompts(self) -> list[str]:
        found: list[str] = self.page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        return [p.strip() for p in found]

    def outputs(self) -> str:
        texts: list[str] = self.page.locator(".jp-OutputArea-output").all_inner_texts()
        return "\n---\n".join(texts)

    def kernel_idle(self) -> bool:
        sessions = self.lab.api("GET", "/api/sessions")
        return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)

    def run_all(self, count: int) -> None:
        """Run → Run All Cells, then wait until every cell has its execution number."""
        self.page.get_by_role("menuitem", name="Run", exact=True).click()
        self.page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        wait_until(
            lambda: (
                all(re.fullmatch(r"\[\d+\]:", p) for p in self.prompts())
                and len(self.prompts()) == count
                and self.kernel_idle()
            ),
            RUN_TIMEOUT_S,
            lambda: f"cells still running: {self.prompts()}\n{self.outputs()}",
            self.pause,
        )

    def inner_frame(self, widget: Any) -> Any:
        """The XProf page's frame: ``.xprof-inner`` inside ``.xprof-outer`` inside the widget."""

        def find() -> Any:
            from playwright.sync_api import Error

            try:
                outer = widget.locator("iframe.xprof-outer").element_handle().content_frame()
                inner = outer.locator("iframe.xprof-inner").element_handle() if outer else None
                return inner.content_frame() if inner else None
            except Error as error:
                # A new selection replaces the frames: one found a moment ago can go away.
                if "detached" not in str(error) and "Cannot find context" not in str(error):
                    raise
                return None

        return wait_until(find, LOAD_TIMEOUT_S, "the widget's XProf frame", self.pause)

    def wait_for_data(self, frame: Any, run: str, tag: str, label: str | None = None) -> None:
        """Until ``frame`` has fetched ``run``'s data for ``tag`` (with event ``label``)."""
        wanted = f"{tag} data of run {run!r}" + (f" with an event {label!r}" if label else "")
        wait_until(
            lambda: self.data.find(run, tag, frame, label),
            LOAD_TIMEOUT_S,
            lambda: f"the widget's page fetched no {wanted}\n{self.data.describe()}",
            self.pause,
        )

    def next_frame(self, widget: Any, previous: Any) -> Any:
        """The widget's XProf frame once it has replaced ``previous`` (a new selection)."""
        wait_until(
            lambda: self.inner_frame(widget) != previous,
            LOAD_TIMEOUT_S,
            "the widget to embed the new selection",
            self.pause,
        )
        return self.inner_frame(widget)

    def every_tool(self, widget: Any, run: str, label: str, name: str) -> list[str]:
        """:func:`check_every_tool` with the frame about 950 px wide, as in JupyterLab with
        its file browser open in a 1400 px window."""
        outer = widget.locator("iframe.xprof-outer")
        width = outer.bounding_box()["width"]
        size = self.page.viewport_size
        self.page.set_viewport_size({"width": int(size["width"] - (width - 950)), "height": 1000})
        self.pause(1.0)
        assert 900 <= outer.bounding_box()["width"] <= 960, outer.bounding_box()
        view = ToolView(
            widget=widget,
            box=outer,
            frame=lambda previous: self.next_frame(widget, previous),
            data=self.data,
            pause=self.pause,
            screenshot=lambda shot: self.screenshot(f"{name}-{shot}", widget),
        )
        return check_every_tool(view, run, label, "tools")

    def screenshot(self, name: str, widget: Any = None) -> Path:
        """The widget's embedded page, else the whole window, into test-artifacts/."""
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"browser-{name}.png"
        shot = widget.locator("iframe.xprof-outer") if widget is not None else self.page
        shot.screenshot(path=str(path))
        return path


def shown(widget: Any, frame: Any, text: str) -> None:
    """The widget's page rendered ``text`` (the timeline itself is a canvas).

    Chromium does not paint frames out of view, so the frame is scrolled into view first,
    as a user would.
    """
    widget.locator("iframe.xprof-outer").scroll_into_view_if_needed()
    frame.get_by_text(text).filter(visible=True).first.wait_for(timeout=LOAD_TIMEOUT_S * 1000)


def check_route(route: str, lab: JupyterLab, frame_url: str, page: str) -> None:
    """The XProf page came from the expected route: the viewer's port, or JupyterLab's proxy."""
    parts = urlsplit(frame_url)
    assert parts.path.endswith(f"/data/plugin/profile/{page}"), frame_url
    if route == "proxy":
        assert frame_url.startswith(f"{lab.origin}/proxy/"), frame_url
    else:
        assert parts.hostname == "127.0.0.1", frame_url
        assert parts.port not in (None, lab.port), frame_url
    for data_url in parse_qs(parts.query).get("trace_data_url", []):
        assert data_url.startswith("/proxy/") == (route == "proxy"), f"trace_data_url={data_url}"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_trace_viewer_under_the_cell(lab: JupyterLab, browser: Any, route: str) -> None:
    train, evaluate = f"{route}-train", f"{route}-eval"
    name = f"{route}.ipynb"
    write_notebook(lab.root / name, cells(route), kernel=ROUTES[route])
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    page = context.new_page()
    notebook = Notebook(page, lab)
    try:
        page.goto(lab.notebook_url(name, workspace=route), timeout=LOAD_TIMEOUT_S * 1000)
        page.locator(".jp-NotebookPanel .jp-CodeCell").first.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        wait_until(notebook.kernel_idle, LOAD_TIMEOUT_S, "the kernel to start", notebook.pause)
        before = page.url
        notebook.navigations.clear()

        # 1. Run All: both captures succeed and each shows the widget.
        notebook.run_all(count=3)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs, outputs
        for run in (train, evaluate):
            assert f"xprof: run {run} (ok)" in outputs, outputs
        widgets = page.locator(".jp-NotebookPanel .xprof-viewer")
        assert widgets.count() == 2, outputs
        first = widgets.nth(0)

        # 2. The first cell's widget shows the trace viewer on its own run, labels included.
        frame = notebook.inner_frame(first)
        check_route(route, lab, frame.url, "trace_viewer_index.html")
        notebook.wait_for_data(frame, train, "trace_viewer", label="forward")
        shown(first, frame, "/host:CPU")
        notebook.screenshot(f"{route}-trace-viewer", first)
        link = first.locator("a.xprof-open").get_attribute("href")
        assert link, "the widget has no 'open in new tab' link"
        opened = context.request.get(link if "://" in link else lab.origin + link)
        assert opened.ok, f"'open in new tab' {link}: HTTP {opened.status}"

        # 3. The runs dropdown switches the same widget to the other capture.
        select_run(first, evaluate)
        frame = notebook.next_frame(first, frame)
        check_route(route, lab, frame.url, "trace_viewer_index.html")
        notebook.wait_for_data(frame, evaluate, "trace_viewer", label="evaluate")
        shown(first, frame, "/host:CPU")
        notebook.screenshot(f"{route}-other-run", first)

        # XProf's full UI (any tool but the bare timeline) rewrites its parent's URL; under
        # the proxy it is same-origin with the notebook, where only the wrapper frame saves it.
        first.locator(".xprof-tools select").select_option(label="Overview")
        frame = notebook.next_frame(first, frame)
        check_route(route, lab, frame.url, "overview_page")
        notebook.wait_for_data(frame, evaluate, "overview_page")
        shown(first, frame, "Performance Summary")
        notebook.pause(1.0)
        notebook.screenshot(f"{route}-overview", first)
        notebook.screenshot(f"{route}-notebook")

        # 4. The notebook page never left its URL.
        assert notebook.navigations == [], "XProf navigated the notebook page"
        assert page.url == before
        assert page.evaluate("location.href") == before

        # 5. Every tool offered, in a frame as narrow as JupyterLab's with a side panel.
        if route == "direct":
            tools = notebook.every_tool(first, evaluate, "evaluate", route)
            assert "graph_viewer" in tools and "memory_viewer" in tools, tools
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot(f"{route}-failure")
        print(f"JupyterLab's log, last lines:\n{lab.log_tail()}")
        raise
    finally:
        context.close()
        lab.shutdown_kernels()


def test_a_jax_cell_shows_its_own_timeline(lab: JupyterLab, browser: Any) -> None:
    """The JAX backend under the same widget: the trace viewer fetches the JAX cell's labels."""
    name = "jax.ipynb"
    write_notebook(
        lab.root / name,
        [
            "%load_ext xprof_magic\nimport jax, jax.numpy as jnp",
            "%%xprof --name jax-train --steps\n"
            "step = jax.jit(lambda w, x: w - 0.1 * (x @ w))\n"
            "w = jnp.ones((64, 64))\n"
            "for i in range(3):\n"
            "    # xprof: update\n"
            "    w = step(w, jnp.full((64, 64), 0.01))\n"
            "float(w.sum())",
        ],
    )
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    page = context.new_page()
    notebook = Notebook(page, lab)
    try:
        page.goto(lab.notebook_url(name, workspace="jax"), timeout=LOAD_TIMEOUT_S * 1000)
        page.locator(".jp-NotebookPanel .jp-CodeCell").first.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        wait_until(notebook.kernel_idle, LOAD_TIMEOUT_S, "the kernel to start", notebook.pause)
        notebook.run_all(count=2)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs, outputs
        assert "xprof: run jax-train (ok)" in outputs and "3 steps" in outputs, outputs
        widget = page.locator(".jp-NotebookPanel .xprof-viewer").first
        frame = notebook.inner_frame(widget)
        check_route("direct", lab, frame.url, "trace_viewer_index.html")
        notebook.wait_for_data(frame, "jax-train", "trace_viewer", label="update")
        shown(widget, frame, "/host:CPU")
        notebook.screenshot("jax-trace-viewer", widget)
        tools = notebook.every_tool(widget, "jax-train", "update", "jax")
        assert "graph_viewer" in tools and "memory_viewer" in tools, tools
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("jax-failure")
        print(f"JupyterLab's log, last lines:\n{lab.log_tail()}")
        raise
    finally:
        context.close()
        lab.shutdown_kernels()
