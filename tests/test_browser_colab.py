"""Acceptance on Colab's stack: ``%%xprof`` in classic Notebook 6.5 with ipywidgets 7, the
kernel seeing a ``google.colab`` module and the page a ``google.colab.kernel.proxyPort``.

Only what cannot exist here is faked, and honestly: the kernel imports a stub
``google.colab`` (tests/colab_stub; its ``output.eval_js`` never returns, as with no browser
attached, so a kernel that called it would hang the cell), and an init script gives the page
``google.colab.kernel.proxyPort``, which maps a kernel port to another origin than the
notebook's (``http://localhost:PORT/`` for a notebook on 127.0.0.1), as Colab's proxy does.
A second variant maps every port to a server that answers 403, as Colab's proxy does when
the browser blocks third-party cookies.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests._browser import (
    JAX_STEPS,
    NOTEBOOK6,
    NotebookPage,
    find_chromium,
    launch_profile,
    offline,
    select_run,
    tool_page,
    write_notebook,
)
from tests._kernel import free_port
from tests._notebook_servers import JupyterLab, shut_down, start_classic_notebook
from tests._page_checks import check_summary, first_thread, steps_missed, visible_range
from tests._tool_checks import ToolView, check_every_tool, shown_text
from tests.conftest import missing
from xprof_magic._notebook import colab

# A guard against a hang only: each wait below fails sooner, naming what it waited for. On
# a loaded 2-core machine (load average 9) Run All alone took 5 minutes, and checking every
# tool of two runs as long again.
pytestmark = [pytest.mark.browser, pytest.mark.pinned, pytest.mark.timeout(1200)]

STUB = Path(__file__).resolve().parent / "colab_stub"
KERNEL = "python3-colab"
RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 90.0
TIMELINE = "trace_viewer_index.html"

# ``target`` null: a port maps to the same port on localhost; a number: every port maps there.
FAKE_PROXY = """
(() => {
  const target = %s;
  window.xprofProxyCalls = [];
  window.google = window.google || {};
  window.google.colab = window.google.colab || {};
  window.google.colab.kernel = {
    proxyPort: async (port, options) => {
      window.xprofProxyCalls.push({port, options});
      return `http://localhost:${target === null ? port : target}/`;
    },
  };
})();
"""

SETUP = "%load_ext xprof_magic\nimport torch, torch_xla\ndevice = torch_xla.device()"
TRAIN = (
    "%%xprof --name colab-train\n"
    "x = torch.randn(64, 64, device=device)\n"
    "# xprof: forward\n"
    "y = (x @ x).relu().sum()\n"
    "torch_xla.sync()\n"
    "y.item()"
)
EVALUATE = (
    "%%xprof --name colab-eval\n# xprof: evaluate\nz = (x * 2).sum()\ntorch_xla.sync()\nz.item()"
)
JAX = "%%xprof --name colab-jax --steps\nimport jax, jax.numpy as jnp\n" + JAX_STEPS


def colab_kernel() -> dict[str, Any]:
    """This Python with the stub first on its path, imported at start as Colab's kernel
    imports ``google.colab``."""
    path = os.pathsep.join(p for p in (str(STUB), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.exec_lines=['import google.colab']",
        ],
        "display_name": "Python 3 (fake Colab)",
        "language": "python",
        "env": {"PYTHONPATH": path},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp("notebook6")
    started = start_classic_notebook(home, kernels={KERNEL: colab_kernel()})
    try:
        yield started
    finally:
        shut_down(started, home)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Any]]:
    """Opens Chromium on a profile of its own that allows third-party cookies: in Colab the
    proxy answers 403 otherwise (the other variant), and an iframe of another site than the
    page's, as Colab's proxied one is, gets no storage without them (XProf's trace viewer
    then stops at ``localStorage``)."""
    if find_chromium() is None:
        missing("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        opened: list[Any] = []

        def open_profile(init_script: str) -> Any:
            profile = tmp_path_factory.mktemp("chromium-profile")
            context = launch_profile(playwright.chromium, profile, third_party_cookies=True)
            context.add_init_script(init_script)
            opened.append(context)
            return context

        try:
            yield open_profile
        finally:
            for context in opened:
                with contextlib.suppress(Exception):
                    context.close()


@pytest.fixture(scope="module")
def forbidden() -> Iterator[int]:
    """A server answering 403 to everything: Colab's proxy when third-party cookies are
    blocked."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"Forbidden"
            self.send_response(403)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Refuse)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield port
    httpd.shutdown()
    httpd.server_close()


def open_notebook(
    server: JupyterLab, context: Any, name: str, cells: list[str], kernel: str
) -> NotebookPage:
    """``cells`` as notebook ``name`` in classic Notebook, opened in ``context``'s page."""
    write_notebook(server.root / name, cells, kernel=kernel)
    page = context.pages[0] if context.pages else context.new_page()
    notebook = NotebookPage(page, server, name, NOTEBOOK6)
    notebook.open(LOAD_TIMEOUT_S)
    return notebook


def every_tool(notebook: NotebookPage, widget: Any, box: Any, run: str, label: str) -> list[str]:
    """:func:`check_every_tool` on one widget and the output frame under it."""
    box.scroll_into_view_if_needed()
    view = ToolView(
        widget=widget,
        box=box.locator("iframe.xprof-inner"),
        frame=lambda tool: notebook.wait_for_page(box, run, tool_page(tool), LOAD_TIMEOUT_S),
        data=notebook.data,
        pause=notebook.pause,
        screenshot=lambda shot: notebook.screenshot(f"colab-{run}-{shot}", box),
        reason=lambda: shown_text(box.locator(".xprof-empty")),
        place=box,
        charts_note=lambda: shown_text(box.locator(".xprof-charts-note")),
        under=lambda: shown_text(box.locator(".xprof-under")),
        charts_box=box.locator(".xprof-charts-note"),
        page_box=box.locator("iframe.xprof-inner"),
    )
    return check_every_tool(view, run, label, "tools")


def failed(notebook: NotebookPage, name: str) -> None:
    """What a failure leaves: a screenshot, the logs, the outputs' markup."""
    with contextlib.suppress(Exception):
        notebook.screenshot(f"colab-{name}")
    notebook.report()
    with contextlib.suppress(Exception):
        areas = notebook.page.evaluate(
            "() => Array.from(document.querySelectorAll('.output_area'))"
            ".map(a => a.innerHTML.slice(0, 600))"
        )
        print("Output areas:", *areas, sep="\n")


@pytest.fixture(scope="module")
def colab_notebook(server: JupyterLab, browser: Callable[[str], Any]) -> Iterator[NotebookPage]:
    """Two torch_xla cells and a JAX cell run in Notebook 6 through the fake proxy, each
    with its widget and its output frame, for the tests below to look at."""
    context = browser(FAKE_PROXY % "null")
    offline(context)
    cells = [SETUP, TRAIN, EVALUATE, JAX]
    notebook = open_notebook(server, context, "colab.ipynb", cells, KERNEL)
    try:
        notebook.run_all(count=len(cells), timeout=RUN_TIMEOUT_S)
        notebook.wait(
            lambda: notebook.widgets.count() == 3 and frames(notebook).count() == 3,
            lambda: f"3 widgets and 3 frames:\n{notebook.outputs()}",
            LOAD_TIMEOUT_S,
        )
        yield notebook
    except BaseException:
        failed(notebook, "notebook-failure")
        raise
    finally:
        context.close()
        server.shutdown_kernels()


def frames(notebook: NotebookPage) -> Any:
    """The viewer's outputs of their own, one per profiled cell (a locator)."""
    return notebook.page.locator(".xprof-colab")


def test_the_viewer_loads_through_the_fake_proxy_and_switches_runs(
    colab_notebook: NotebookPage, server: JupyterLab
) -> None:
    notebook = colab_notebook
    page = notebook.page
    try:
        outputs = notebook.outputs()
        assert "Traceback" not in outputs and "showing it failed" not in outputs, outputs
        for run in ("colab-train", "colab-eval", "colab-jax"):
            assert f"xprof: run {run} (ok)" in outputs, outputs
        widgets, boxes = notebook.widgets, frames(notebook)
        assert page.locator("a.xprof-open").count() == 0, "Colab gets no new-tab link"

        # The frame comes from another origin than the notebook's, through proxyPort.
        first = boxes.nth(0)
        first.scroll_into_view_if_needed()
        frame = notebook.wait_for_page(first, "colab-train", TIMELINE, LOAD_TIMEOUT_S)
        parts = urlsplit(frame.url)
        assert parts.hostname == "localhost" and parts.port != server.port, frame.url
        calls = page.evaluate("() => window.xprofProxyCalls")
        assert calls and all(c["options"] == {"cache": False} for c in calls), calls
        notebook.wait_for_data(frame, "colab-train", "trace_viewer", LOAD_TIMEOUT_S, "forward")
        frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        assert first.locator(".xprof-colab-hint").is_hidden()
        notebook.screenshot("colab-trace-viewer")

        # The runs dropdown replaces the same output's frame, in place.
        select_run(widgets.nth(0), "colab-eval")
        frame = notebook.wait_for_page(first, "colab-eval", TIMELINE, LOAD_TIMEOUT_S)
        first.scroll_into_view_if_needed()
        notebook.wait_for_data(frame, "colab-eval", "trace_viewer", LOAD_TIMEOUT_S, "evaluate")
        assert boxes.count() == 3 and first.locator("iframe").count() == 1
        assert first.locator(".xprof-colab-hint").is_hidden()

        # XProf's full UI reads window.parent; cross-origin it must still render.
        widgets.nth(0).locator(".xprof-tools select").select_option(label="Overview")
        frame = notebook.wait_for_page(first, "colab-eval", "overview_page", LOAD_TIMEOUT_S)
        first.scroll_into_view_if_needed()
        frame.get_by_text("Performance Summary").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        notebook.screenshot("colab-overview")
        # XProf's pages read window.parent (gtag, TENSORBOARD_ENV), which throws
        # cross-origin: what matters is that they render, as checked above.
        assert not [e for e in notebook.errors if "localStorage" in e], notebook.errors
    except BaseException:
        failed(notebook, "failure")
        raise


def test_every_tool_renders_cross_origin(colab_notebook: NotebookPage) -> None:
    """Every tool offered, for torch_xla and for JAX, in Notebook 6's output width."""
    notebook = colab_notebook
    try:
        select_run(notebook.widgets.nth(0), "colab-eval")
        for index, run, label in ((0, "colab-eval", "evaluate"), (2, "colab-jax", "update")):
            widget, box = notebook.widgets.nth(index), frames(notebook).nth(index)
            tools = every_tool(notebook, widget, box, run, label)
            assert "graph_viewer" in tools and "memory_viewer" in tools, tools
        print("Page errors (XProf's, cross-origin):", *notebook.errors, sep="\n")
    except BaseException:
        failed(notebook, "tools-failure")
        raise


def test_a_refusing_proxy_shows_the_one_line_hint(
    server: JupyterLab, browser: Callable[[str], Any], forbidden: int
) -> None:
    context = browser(FAKE_PROXY % json.dumps(forbidden))
    notebook = open_notebook(server, context, "colab-403.ipynb", [SETUP, TRAIN], KERNEL)
    try:
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        box = notebook.page.locator(".xprof-colab")
        assert box.count() == 1, notebook.outputs()
        hint = box.locator(".xprof-colab-hint")
        hint.wait_for(state="visible", timeout=LOAD_TIMEOUT_S * 1000)
        assert hint.inner_text().strip() == colab.BLOCKED_HINT
        assert box.locator("iframe").count() == 0
        notebook.screenshot("colab-403")
    except BaseException:
        failed(notebook, "403-failure")
        raise
    finally:
        context.close()
        server.shutdown_kernels()


def test_notebook6_switches_runs_in_place(
    server: JupyterLab, browser: Callable[[str], Any]
) -> None:
    """Without Colab, ipywidgets 7's HTML widget holds the wrapper iframe (as ipywidgets 8's
    does in JupyterLab): a new run or tool navigates its XProf frame in place, and the
    wrapper, written once, stays."""
    context = browser("")
    offline(context)
    cells = [SETUP, TRAIN.replace("colab-", "nb6-"), EVALUATE.replace("colab-", "nb6-")]
    notebook = open_notebook(server, context, "notebook6.ipynb", cells, "python3")
    try:
        notebook.run_all(count=len(cells), timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "xprof: run nb6-train (ok)" in outputs and "Traceback" not in outputs, outputs
        assert notebook.page.locator(".xprof-colab").count() == 0, "not Colab: no output frame"
        first = notebook.widgets.nth(0)
        wrapper = first.locator("iframe.xprof-outer")
        wrapper.scroll_into_view_if_needed()
        frame = notebook.wait_for_page(first, "nb6-train", TIMELINE, LOAD_TIMEOUT_S)
        assert urlsplit(frame.url).hostname == "127.0.0.1", frame.url
        notebook.wait_for_data(frame, "nb6-train", "trace_viewer", LOAD_TIMEOUT_S, "forward")
        wrapper.evaluate("e => { e.dataset.xprofTest = 'kept'; }")

        select_run(first, "nb6-eval")
        assert notebook.wait_for_page(first, "nb6-eval", TIMELINE, LOAD_TIMEOUT_S) == frame
        notebook.wait_for_data(frame, "nb6-eval", "trace_viewer", LOAD_TIMEOUT_S, "evaluate")
        first.locator(".xprof-tools select").select_option(label="Overview")
        assert notebook.wait_for_page(first, "nb6-eval", "overview_page", LOAD_TIMEOUT_S) == frame
        frame.get_by_text("Performance Summary").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        assert first.locator("iframe.xprof-outer[data-xprof-test=kept]").count() == 1
        notebook.screenshot("notebook6-overview", wrapper)
    except BaseException:
        failed(notebook, "notebook6-failure")
        raise
    finally:
        context.close()
        server.shutdown_kernels()


STEADY = [
    SETUP + "\nw = torch.randn(256, 256, device=device)\ntorch_xla.sync()",
    "%%xprof --steps --name steady\n"
    "for i in range(10):\n"
    "    # xprof: forward\n"
    "    z = ((w @ w).tanh() @ w).tanh() @ w\n"
    "    torch_xla.sync()",
]
"""A 10-step loop whose step 0 compiles, and only it."""
OUTPUT_PX = 848


def fit(notebook: NotebookPage, box: Any, width: int) -> None:
    """Make Notebook 6's column hold an output ``width`` px wide (±4): its column has a few
    fixed widths, so the column's own width is set, as a narrower window would."""
    column = "document.getElementById('notebook-container')"
    shown = box.bounding_box()["width"]
    notebook.page.evaluate(
        f"d => {{ const c = {column}; c.style.width = (c.offsetWidth + d) + 'px'; }}",
        width - shown,
    )
    notebook.wait(
        lambda: abs(box.bounding_box()["width"] - width) <= 4,
        lambda: f"the output at about {width} px: {box.bounding_box()}",
        LOAD_TIMEOUT_S,
    )


def test_what_a_person_sees_under_the_cell_on_colabs_stack(
    server: JupyterLab, browser: Callable[[str], Any]
) -> None:
    """At an 848 px output, through the fake Colab proxy: the summary whole, its charts'
    labels apart, the trace viewer settled on steps 1 to 9 with the labelled row first, and
    every tool without XProf's menu, idle 30 s after it was chosen or its reason in place."""
    import xprof_magic

    context = browser(FAKE_PROXY % "null")
    offline(context)
    notebook = open_notebook(server, context, "colab-steady.ipynb", STEADY, KERNEL)
    try:
        notebook.run_all(count=len(STEADY), timeout=RUN_TIMEOUT_S)
        outputs = notebook.outputs()
        assert "Traceback" not in outputs and "xprof: run steady (ok)" in outputs, outputs
        box = notebook.page.locator(".xprof-colab").first
        box.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        fit(notebook, box.locator("iframe.xprof-inner"), OUTPUT_PX)
        run_dir = Path(server.env["XPROF_MAGIC_LOGDIR"]) / "plugins" / "profile" / "steady"
        summary = xprof_magic.summarize(run_dir)
        assert summary.diagnosis.warm_up == 1, summary.diagnosis  # the test's own premise

        panel = notebook.page.locator(".xprof-summary-panel").first
        check_summary(panel)
        notebook.screenshot("colab-steady-summary", panel)

        box.scroll_into_view_if_needed()
        frame = notebook.wait_for_page(box, "steady", TIMELINE, LOAD_TIMEOUT_S)
        notebook.wait_for_data(frame, "steady", "trace_viewer", LOAD_TIMEOUT_S, "forward")
        notebook.wait(
            lambda: first_thread(frame) and visible_range(frame),
            "the trace viewer's rows and range",
            LOAD_TIMEOUT_S,
        )
        notebook.wait(
            lambda: steps_missed(visible_range(frame), summary) == "",
            lambda: f"{visible_range(frame)}: {steps_missed(visible_range(frame), summary)}",
            30.0,
        )
        row = first_thread(frame)
        assert row and not row.startswith("tf_"), f"the first row is {row}"
        notebook.screenshot("colab-steady-trace-viewer", box)

        tools = every_tool(notebook, notebook.widgets.first, box, "steady", "forward")
        assert "hlo_stats" in tools and "memory_viewer" in tools, tools
        notebook.screenshot("colab-steady-notebook")
    except BaseException:
        failed(notebook, "steady-failure")
        raise
    finally:
        context.close()
        server.shutdown_kernels()
