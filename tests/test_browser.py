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
import dataclasses
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests._browser import (
    JAX_STEPS,
    LAB,
    NotebookPage,
    launch_profile,
    offline,
    select_run,
    tool_page,
    write_notebook,
)
from tests._notebook_servers import PROXY_KERNEL, JupyterLab
from tests._page_checks import (
    check_summary,
    controls,
    first_thread,
    moved,
    one_line,
    steps_missed,
    visible_range,
)
from tests._tool_checks import ToolView, check_every_tool, shown_text
from tests.conftest import ARTIFACTS

# A guard against a hang only: each wait below fails sooner, naming what it waited for. On
# a loaded 2-core machine the direct route's test, which checks every tool, nears 10 minutes.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200)]

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


def fit(notebook: NotebookPage, widget: Any, width: int) -> None:
    """Resize the window until the widget's frame is ``width`` px wide (±8), as JupyterLab's
    output is beside an open file browser."""
    outer = widget.locator("iframe.xprof-outer")
    shown = outer.bounding_box()["width"]
    size = notebook.page.viewport_size
    notebook.page.set_viewport_size({"width": int(size["width"] - (shown - width)), "height": 1000})
    notebook.wait(
        lambda: abs(outer.bounding_box()["width"] - width) <= 8,
        lambda: f"the frame at about {width} px: {outer.bounding_box()}",
        LOAD_TIMEOUT_S,
    )


def every_tool(
    notebook: NotebookPage, widget: Any, run: str, label: str, name: str, width: int = 950
) -> list[str]:
    """:func:`check_every_tool` with the frame ``width`` px wide (950: JupyterLab with its
    file browser open in a 1400 px window)."""
    outer = widget.locator("iframe.xprof-outer")
    fit(notebook, widget, width)
    wrapped = widget.frame_locator("iframe.xprof-outer")
    view = ToolView(
        widget=widget,
        box=outer,
        frame=lambda tool: notebook.wait_for_page(widget, run, tool_page(tool), LOAD_TIMEOUT_S),
        data=notebook.data,
        pause=notebook.pause,
        screenshot=lambda shot: notebook.screenshot(f"{name}-{shot}", outer),
        reason=lambda: shown_text(wrapped.locator(".xprof-empty")),
        place=outer,
        charts_note=lambda: shown_text(wrapped.locator(".xprof-charts-note")),
        under=lambda: shown_text(wrapped.locator(".xprof-under")),
        charts_box=wrapped.locator(".xprof-charts-note"),
        page_box=wrapped.locator("iframe.xprof-inner"),
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
            JAX_CELL.format(run="jax-train"),
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


JAX_CELL = "%%xprof --name {run} --steps\n" + JAX_STEPS
"""A JAX cell of 3 labelled steps, its run named ``run``."""
ON_LOCALHOST = dataclasses.replace(
    LAB,
    url=lambda server, name, space: server.notebook_url(name, space).replace(
        "//127.0.0.1:", "//localhost:", 1
    ),
)
"""JupyterLab opened as ``http://localhost:<port>``, as ``jupyter lab`` prints it first."""


def test_a_notebook_on_localhost_draws_the_timeline_where_third_party_storage_is_blocked(
    lab: JupyterLab, browser: Any, tmp_path: Path
) -> None:
    """The viewer's page on ``127.0.0.1`` is another site than a notebook on ``localhost``; a
    browser that blocks third-party cookies (Chrome's Incognito, that setting) denies it its
    ``localStorage``, which XProf's trace viewer reads as it starts: it drew nothing."""
    name = "localhost.ipynb"
    write_notebook(
        lab.root / name,
        [
            "%load_ext xprof_magic\nimport jax, jax.numpy as jnp",
            JAX_CELL.format(run="on-localhost"),
        ],
    )
    context = launch_profile(browser.browser_type, tmp_path / "blocking", third_party_cookies=False)
    offline(context)
    notebook = NotebookPage(context.new_page(), lab, name, ON_LOCALHOST)
    try:
        notebook.open(LOAD_TIMEOUT_S)
        assert urlsplit(notebook.page.url).hostname == "localhost", notebook.page.url
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "xprof: run on-localhost (ok)" in outputs, outputs
        widget = notebook.widgets.first
        timeline = "trace_viewer_index.html"
        frame = notebook.wait_for_page(widget, "on-localhost", timeline, LOAD_TIMEOUT_S)
        check_route("direct", lab, frame.url, timeline)
        notebook.wait_for_data(frame, "on-localhost", "trace_viewer", LOAD_TIMEOUT_S, "update")
        shown(widget, frame, "/host:CPU")
        # The browser denied the page its site's storage: it has its own (inline.OWN_STORAGE).
        assert frame.evaluate("() => !(window.localStorage instanceof Storage)")
        notebook.screenshot("localhost-trace-viewer", widget.locator("iframe.xprof-outer"))
        # XProf's other tools are its Angular app, which keeps its settings there too.
        widget.locator(".xprof-tools select").select_option(label="Overview")
        frame = notebook.wait_for_page(widget, "on-localhost", "overview_page", LOAD_TIMEOUT_S)
        shown(widget, frame, "Performance Summary")
        assert frame.evaluate("() => !(window.localStorage instanceof Storage)")
        assert not [e for e in notebook.errors if "Storage" in e], notebook.errors
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("localhost-failure")
        notebook.report()
        raise
    finally:
        context.close()
        lab.shutdown_kernels()


STEADY = [
    "%load_ext xprof_magic\nimport torch, torch_xla\ndevice = torch_xla.device()\n"
    "w = torch.randn(256, 256, device=device)\ntorch_xla.sync()",
    "%%xprof --steps --name steady\n"
    "for i in range(10):\n"
    "    # xprof: forward\n"
    "    z = ((w @ w).tanh() @ w).tanh() @ w\n"
    "    torch_xla.sync()",
]
"""A 10-step loop whose step 0 compiles, and only it."""
OUTPUT_PX = 848


CELL = "xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-CodeCell ')][1]"
"""From a widget, the notebook cell it is under: its code, summary and viewer."""
SELECTED = "s => s.options[s.selectedIndex]?.textContent ?? ''"
"""The text of a select's chosen option."""


def readme_picture(notebook: NotebookPage, widget: Any, frame: Any) -> None:
    """The README's picture (``docs/images/cell.png`` is a copy of it): the cell, its summary
    and the trace viewer under it, in a window tall enough to hold them all. The window and
    the widget's frame are as they were when it returns (a width read before JupyterLab laid
    the output out again once made :func:`fit` shrink the frame to 732 px, not 848)."""
    page = notebook.page
    size = page.viewport_size
    outer = widget.locator("iframe.xprof-outer")
    width = outer.bounding_box()["width"]
    page.set_viewport_size({"width": 1400, "height": 2400})
    try:
        cell = widget.locator(CELL)
        cell.scroll_into_view_if_needed()
        notebook.wait(lambda: first_thread(frame), "the trace viewer drawn again", 30.0)
        notebook.screenshot("readme-cell", cell)
    finally:
        page.set_viewport_size(size)
        notebook.wait(
            lambda: abs(outer.bounding_box()["width"] - width) <= 1,
            lambda: f"the frame back at {width} px: {outer.bounding_box()}",
            LOAD_TIMEOUT_S,
        )


def rerun(notebook: NotebookPage, cell: int) -> None:
    """Run code cell ``cell`` again, as a person does: in its editor, Ctrl+Enter."""
    notebook.page.locator(".jp-CodeCell").nth(cell).locator(".jp-InputArea-editor").click()
    notebook.page.keyboard.press("Control+Enter")


def test_what_a_person_sees_under_the_cell(lab: JupyterLab, browser: Any) -> None:
    """At an 848 px output: the summary whole, its charts' labels apart, the trace viewer on
    steps 1 to 9 with the labelled row first, and every tool without XProf's menu, without a
    loading indicator 30 s after it was chosen, or with its reason in place (the frame
    shrunk to it); the charts note under the pages that draw charts only; the controls row
    as it was, once the tools are known and after the cell runs again."""
    import xprof_magic
    from xprof_magic._analysis import render_html

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    notebook = NotebookPage(context.new_page(), lab, "steady.ipynb", LAB)
    write_notebook(lab.root / "steady.ipynb", STEADY)
    try:
        notebook.open(LOAD_TIMEOUT_S)
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs and "xprof: run steady (ok)" in outputs, outputs
        widget = notebook.widgets.first
        fit(notebook, widget, OUTPUT_PX)
        layout = controls(widget)
        assert one_line(layout), f"the controls on two lines: {layout}"
        run_dir = Path(lab.env["XPROF_MAGIC_LOGDIR"]) / "plugins" / "profile" / "steady"
        summary = xprof_magic.summarize(run_dir)
        assert summary.diagnosis.warm_up == 1, summary.diagnosis  # the test's own premise

        panel = notebook.page.locator(".jp-NotebookPanel .xprof-summary-panel").first
        check_summary(panel)
        notebook.screenshot("steady-summary", panel)

        frame = notebook.wait_for_page(widget, "steady", "trace_viewer_index.html", LOAD_TIMEOUT_S)
        notebook.wait_for_data(frame, "steady", "trace_viewer", LOAD_TIMEOUT_S, label="forward")
        widget.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.wait(
            lambda: first_thread(frame) and visible_range(frame),
            "the trace viewer's rows and range",
            LOAD_TIMEOUT_S,
        )
        # The first range it settles on, once its data are drawn: the steady steps.
        notebook.wait(
            lambda: steps_missed(visible_range(frame), summary) == "",
            lambda: f"{visible_range(frame)}: {steps_missed(visible_range(frame), summary)}",
            30.0,
        )
        row = first_thread(frame)
        assert row and not row.startswith("tf_"), f"the first row is {row}"
        notebook.screenshot("steady-trace-viewer", widget.locator("iframe.xprof-outer"))
        readme_picture(notebook, widget, frame)

        tools = every_tool(notebook, widget, "steady", "forward", "steady", width=OUTPUT_PX)
        assert "hlo_stats" in tools and "memory_viewer" in tools, tools
        assert moved(layout, controls(widget)) == [], "the tools' survey moved the controls"

        # The cell again: a new widget, its controls where the first one's were, from the
        # first look (its tools not surveyed yet) to the last.
        rerun(notebook, 1)
        again = notebook.widgets.first
        notebook.wait(
            lambda: "steady-2" in again.locator(".xprof-runs select").evaluate(SELECTED),
            lambda: f"the widget of steady-2\n{notebook.outputs()[-2000:]}",
            RUN_TIMEOUT_S,
        )
        first_look = controls(again)
        notebook.wait(
            lambda: again.locator(".xprof-tools.xprof-surveyed").count() == 1,
            "the tools of steady-2 surveyed",
            LOAD_TIMEOUT_S,
        )
        for look in (first_look, controls(again)):
            assert moved(layout, look) == [], f"a re-run moved the controls: {moved(layout, look)}"
        notebook.screenshot("steady-rerun-controls", again.locator(".widget-hbox").first)

        # The summary as a saved notebook shows it: static HTML, no script, whole too.
        page = render_html(summary)
        assert "<script" not in page
        static = context.new_page()
        static.set_viewport_size({"width": OUTPUT_PX, "height": 1000})
        static.set_content(f"<body style='margin:0'>{page}</body>")
        check_summary(static.locator("body"))
        notebook.screenshot("steady-notebook")
        static.screenshot(path=str(ARTIFACTS / "browser-steady-static.png"), full_page=True)
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("steady-failure")
        notebook.report()
        raise
    finally:
        context.close()
        lab.shutdown_kernels()
