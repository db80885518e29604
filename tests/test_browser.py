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
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests._browser import (
    CHROMIUM_ARGS,
    LAB,
    PROXY_KERNEL,
    JupyterLab,
    NotebookPage,
    ToolView,
    check_every_tool,
    find_chromium,
    offline,
    select_run,
    shown_text,
    shut_down,
    start_jupyterlab,
    tool_page,
    write_notebook,
)
from tests.conftest import missing

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


def every_tool(notebook: NotebookPage, widget: Any, run: str, label: str, name: str) -> list[str]:
    """:func:`check_every_tool` with the frame about 950 px wide, as in JupyterLab with its
    file browser open in a 1400 px window."""
    outer = widget.locator("iframe.xprof-outer")
    width = outer.bounding_box()["width"]
    size = notebook.page.viewport_size
    notebook.page.set_viewport_size({"width": int(size["width"] - (width - 950)), "height": 1000})
    notebook.wait(
        lambda: 900 <= outer.bounding_box()["width"] <= 960,
        lambda: f"the frame at about 950 px: {outer.bounding_box()}",
        LOAD_TIMEOUT_S,
    )
    wrapped = widget.frame_locator("iframe.xprof-outer")
    view = ToolView(
        widget=widget,
        box=outer,
        frame=lambda tool: notebook.wait_for_page(widget, run, tool_page(tool), LOAD_TIMEOUT_S),
        data=notebook.data,
        pause=notebook.pause,
        screenshot=lambda shot: notebook.screenshot(f"{name}-{shot}", outer),
        reason=lambda: shown_text(wrapped.locator(".xprof-empty")),
    )
    return check_every_tool(view, run, label, "tools")


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
    timeline = "trace_viewer_index.html"
    write_notebook(lab.root / name, cells(route), kernel=ROUTES[route])
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    page = context.new_page()
    notebook = NotebookPage(page, lab, name, LAB, workspace=route)
    try:
        notebook.open(LOAD_TIMEOUT_S)
        before = page.url
        notebook.navigations.clear()

        # 1. Run All: both captures succeed and each shows the widget.
        notebook.run_all(count=3, timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs, outputs
        for run in (train, evaluate):
            assert f"xprof: run {run} (ok)" in outputs, outputs
        widgets = notebook.widgets
        assert widgets.count() == 2, outputs
        first = widgets.nth(0)
        wrapper = first.locator("iframe.xprof-outer")

        # 2. The first cell's widget shows the trace viewer on its own run, labels included.
        frame = notebook.wait_for_page(first, train, timeline, LOAD_TIMEOUT_S)
        check_route(route, lab, frame.url, timeline)
        notebook.wait_for_data(frame, train, "trace_viewer", LOAD_TIMEOUT_S, label="forward")
        shown(first, frame, "/host:CPU")
        notebook.screenshot(f"{route}-trace-viewer", wrapper)
        link = first.locator("a.xprof-open").get_attribute("href")
        assert link, "the widget has no 'open in new tab' link"
        opened = context.request.get(link if "://" in link else lab.origin + link)
        assert opened.ok, f"'open in new tab' {link}: HTTP {opened.status}"

        # 3. The runs dropdown switches the same widget to the other capture, in place: the
        # wrapper iframe stays (marked here) and its XProf frame navigates.
        wrapper.evaluate("e => { e.dataset.xprofTest = 'kept'; }")
        select_run(first, evaluate)
        moved = notebook.wait_for_page(first, evaluate, timeline, LOAD_TIMEOUT_S)
        assert moved == frame, "a new frame replaced the widget's XProf frame"
        assert first.locator("iframe.xprof-outer[data-xprof-test=kept]").count() == 1
        check_route(route, lab, frame.url, timeline)
        notebook.wait_for_data(frame, evaluate, "trace_viewer", LOAD_TIMEOUT_S, label="evaluate")
        shown(first, frame, "/host:CPU")
        notebook.screenshot(f"{route}-other-run", wrapper)

        # XProf's full UI (any tool but the bare timeline) rewrites its parent's URL; under
        # the proxy it is same-origin with the notebook, where only the wrapper frame saves it.
        first.locator(".xprof-tools select").select_option(label="Overview")
        frame = notebook.wait_for_page(first, evaluate, "overview_page", LOAD_TIMEOUT_S)
        check_route(route, lab, frame.url, "overview_page")
        notebook.wait_for_data(frame, evaluate, "overview_page", LOAD_TIMEOUT_S)
        shown(first, frame, "Performance Summary")
        assert first.locator("iframe.xprof-outer[data-xprof-test=kept]").count() == 1
        notebook.screenshot(f"{route}-overview", wrapper)
        notebook.screenshot(f"{route}-notebook")

        # 4. The notebook page never left its URL.
        assert notebook.navigations == [], "XProf navigated the notebook page"
        assert page.url == before
        assert page.evaluate("location.href") == before

        # 5. Every tool offered, in a frame as narrow as JupyterLab's with a side panel.
        if route == "direct":
            tools = every_tool(notebook, first, evaluate, "evaluate", route)
            assert "graph_viewer" in tools and "memory_viewer" in tools, tools
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot(f"{route}-failure")
        notebook.report()
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
    notebook = NotebookPage(context.new_page(), lab, name, LAB)
    try:
        notebook.open(LOAD_TIMEOUT_S)
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs, outputs
        assert "xprof: run jax-train (ok)" in outputs and "3 steps" in outputs, outputs
        widget = notebook.widgets.first
        frame = notebook.wait_for_page(
            widget, "jax-train", "trace_viewer_index.html", LOAD_TIMEOUT_S
        )
        check_route("direct", lab, frame.url, "trace_viewer_index.html")
        notebook.wait_for_data(frame, "jax-train", "trace_viewer", LOAD_TIMEOUT_S, label="update")
        shown(widget, frame, "/host:CPU")
        notebook.screenshot("jax-trace-viewer", widget.locator("iframe.xprof-outer"))
        tools = every_tool(notebook, widget, "jax-train", "update", "jax")
        assert "graph_viewer" in tools and "memory_viewer" in tools, tools
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("jax-failure")
        notebook.report()
        raise
    finally:
        context.close()
        lab.shutdown_kernels()
