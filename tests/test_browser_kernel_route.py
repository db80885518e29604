"""Acceptance: the viewer under the cell through the kernel, in a real JupyterLab 4,
Notebook 7, classic Notebook 6.5 with ipywidgets 7 (Colab's stack, run there) and marimo,
and a real Chromium that reaches the notebook server and nothing else.

Chromium's own request routing (Playwright's) refuses every request to any loopback port but
the notebook server's, as a browser on a laptop sees a remote kernel's machine (VS Code over
Remote-SSH, an SSH-tunnelled JupyterLab, Kaggle): the widget must find that out by itself
and show the trace viewer through widget messages; its runs dropdown switches in place; a
tool that needs the port says so in one line; no frame is ever the browser's error page.
The same notebook with the port reachable still takes the port. A cell that keeps the
kernel busy shows the waiting line, then the viewer without a click.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests._browser import (
    LAB,
    NOTEBOOK6,
    NOTEBOOK7,
    Frontend,
    NotebookPage,
    offline,
    select_run,
    write_notebook,
)
from tests._notebook_servers import JupyterLab, shut_down, start_classic_notebook, start_jupyterlab
from tests._tool_checks import shown_text
from tests._wait import wait_until
from tests.conftest import missing
from xprof_magic._viewer.tool_pages import ROUTE_LINES, TOOL_NAMES

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 120.0
LOOPBACK = re.compile(r"^(?:https?|wss?)://(?:127\.0\.0\.1|localhost|\[::1\])(?::(\d+))?/")

SETUP = "%load_ext xprof_magic\nimport jax, jax.numpy as jnp"


def capture(name: str, label: str) -> str:
    return (
        f"%%xprof --name {name}\n"
        "w = jnp.ones((64, 64))\n"
        f"# xprof: {label}\n"
        "w = jax.jit(lambda w: w @ w * 0.5)(w)\n"
        "float(w.sum())"
    )


# The trace viewer's model holds an event of this title (the cell's label), once loaded.
_HAS_EVENT = """(title) => {
  const el = document.querySelector('tf-trace-viewer');
  const model = el && el._traceViewer && el._traceViewer.model;
  if (!model || el._isLoading) return false;
  for (const t of model.getAllThreads())
    for (const s of t.sliceGroup.slices) if (s.title === title) return true;
  return false;
}"""


def only_the_notebook_server(context: Any, port: int, refused: list[str]) -> None:
    """Abort every request to a loopback port other than the notebook server's (and, as
    :func:`offline`, every one leaving the machine); ``refused`` collects them."""

    def other_port(url: str) -> bool:
        found = LOOPBACK.match(url)
        return bool(found) and int(found.group(1) or 80) != port

    def abort(route: Any) -> None:
        refused.append(route.request.url)
        route.abort()

    context.route(other_port, abort)


def wrapper_route(widget: Any) -> str:
    """The route the widget's wrapper frame chose (``data-route`` of its body)."""
    body = widget.frame_locator("iframe.xprof-outer").locator("body")
    found: str | None = body.get_attribute("data-route", timeout=10_000)
    return found or ""


def has_event(notebook: NotebookPage, widget: Any, title: str) -> bool:
    from playwright.sync_api import Error

    frame = notebook.xprof_frame(widget)
    if frame is None:
        return False
    try:
        return bool(frame.evaluate(_HAS_EVENT, title))
    except Error:
        return False


def story(notebook: NotebookPage, widget: Any) -> str:
    """What the wrapper says and what its inner frame holds, for a failure."""
    wrapped = widget.frame_locator("iframe.xprof-outer")
    frame = notebook.xprof_frame(widget)
    inner = ""
    with contextlib.suppress(Exception):
        inner = frame.evaluate(_INNER)
    lines = [shown_text(wrapped.locator(c)) for c in (".xprof-empty", ".xprof-route-busy")]
    return f"lines {lines}; inner {inner!r}; console {notebook.console[-8:]}"


_INNER = """() => {
  const el = document.querySelector('tf-trace-viewer');
  return JSON.stringify({scripts: Array.from(document.scripts).map(s => s.src.slice(0, 40)),
    viewer: !!el, tv: !!(el && el._traceViewer), loading: el && el._isLoading,
    threads: el && el._traceViewer && el._traceViewer.model ? el._traceViewer.model
      .getAllThreads().map(t => t.name + ':' + t.sliceGroup.slices.length) : null,
    asked: parent.xprofRoute ? parent.xprofRoute.log : null,
    errors: window.__errs || [], title: document.title});
}"""
# XProf's requests the trace viewer page answered from the data it asked from its first bytes.
PREFETCHED = "() => window.__xprofPrefetch ? window.__xprofPrefetch.used : null"
# How many times the browser asked for one URL.
ASKED = "(url) => performance.getEntriesByType('resource').filter(e => e.name === url).length"
RECORD_ERRORS = """window.__errs = [];
addEventListener('error', e => window.__errs.push(`${e.message} ${e.filename}:${e.lineno}`));
addEventListener('unhandledrejection', e => window.__errs.push('rejection ' + String(e.reason)));"""


_TOOL_SHOWN = """(page) => {
  const loc = window.__xprofLoc;
  if (!loc || !loc.pathname.endsWith('/' + page) || !document.querySelector('main-page'))
    return false;
  return document.body.innerText.trim().length > 40;
}"""


def tool_shown(notebook: NotebookPage, widget: Any, page: str) -> bool:
    """XProf's Angular app in the widget's frame, through the kernel, routed to ``page``
    (on its stand-in location), with content and no loading indicator of XProf's."""
    from playwright.sync_api import Error

    from tests._page_checks import busy

    frame = notebook.xprof_frame(widget)
    if frame is None or frame.url != "about:srcdoc":
        return False
    try:
        return bool(frame.evaluate(_TOOL_SHOWN, page)) and not busy(frame)
    except Error:
        return False


def graph_drawn(notebook: NotebookPage, widget: Any) -> bool:
    """graphviz's SVG, with its nodes, in the frame XProf's graph viewer opened."""
    from playwright.sync_api import Error

    frame = notebook.xprof_frame(widget)
    for child in frame.child_frames if frame is not None else []:
        with contextlib.suppress(Error):
            if child.evaluate("() => !!document.querySelector('#graph-container svg g.node')"):
                return True
    return False


def viewer_paths(notebook: NotebookPage, port: int) -> list[str]:
    """Requests the notebook server (``port``) answered for a path of the viewer's."""
    return [
        u
        for u in notebook.data.urls
        if urlsplit(u).port == port and ("/data/plugin/profile" in u or "/xprof_magic/" in u)
    ]


def error_pages(page: Any) -> list[str]:
    return [f.url for f in page.frames if f.url.startswith("chrome-error:")]


@contextlib.contextmanager
def opened(
    server: JupyterLab,
    browser: Any,
    name: str,
    cells: list[str],
    blocked: bool,
    ui: Frontend = LAB,
) -> Iterator[tuple[NotebookPage, list[str]]]:
    """The notebook ``name`` of ``cells`` open in ``ui`` (every port but the notebook server's
    refused where ``blocked``: the requests refused are listed); on a failure, a screenshot and
    the page's story; the browser's context closed and the kernels shut down after."""
    write_notebook(server.root / name, cells)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    context.add_init_script(RECORD_ERRORS)
    refused: list[str] = []
    if blocked:
        only_the_notebook_server(context, server.port, refused)
    notebook = NotebookPage(context.new_page(), server, name, ui, workspace=name.split(".")[0])
    try:
        notebook.open(LOAD_TIMEOUT_S)
        yield notebook, refused
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot(f"{name.split('.')[0]}-failure")
        notebook.report()
        raise
    finally:
        context.close()
        server.shutdown_kernels()


def first_run_shown(
    notebook: NotebookPage, server: JupyterLab, route: str, screenshot: str
) -> tuple[Any, Any]:
    """Run the notebook's three cells and wait for the first widget's trace viewer to show the
    first run's ``update`` by ``route`` (its frame a ``srcdoc`` for the kernel's, the viewer's
    own port for the direct one); returns the widget and its XProf frame."""
    notebook.run_all(count=3, timeout=RUN_TIMEOUT_S)
    outputs = notebook.outputs()
    assert "Traceback" not in outputs, outputs
    first = notebook.widgets.first
    notebook.wait(lambda: wrapper_route(first) == route, f"the {route} route", 30)
    first.locator("iframe.xprof-outer").scroll_into_view_if_needed()
    notebook.wait(
        lambda: has_event(notebook, first, "update"),
        lambda: f"the trace viewer with 'update'; {story(notebook, first)}",
        LOAD_TIMEOUT_S,
    )
    frame = notebook.xprof_frame(first)
    url = urlsplit(frame.url)
    if route == "kernel":
        assert frame.url == "about:srcdoc", frame.url
    else:
        assert url.hostname == "127.0.0.1" and url.port not in (None, server.port), url
    notebook.screenshot(screenshot, first)
    return first, frame


def switched(notebook: NotebookPage, first: Any, frame: Any, run: str) -> None:
    """The runs dropdown switches the same frame to ``run``, whose trace shows ``evaluate``."""
    select_run(first, run)
    notebook.wait(
        lambda: has_event(notebook, first, "evaluate"),
        lambda: f"the other run's trace viewer; {story(notebook, first)}",
        LOAD_TIMEOUT_S,
    )
    assert notebook.xprof_frame(first) == frame, "a new frame replaced the XProf frame"


def reads_and_switches(
    server: JupyterLab, browser: Any, ui: Frontend, name: str, blocked: bool
) -> None:
    """Two captures in ``ui``: the route the browser can take (the kernel where ``blocked``,
    else the port) shows the first cell's trace in the trace viewer, and the runs dropdown
    switches the same frame to the second's; no frame is the browser's error page."""
    prefix = name.split(".")[0]
    cells = [SETUP, capture(f"{prefix}-train", "update"), capture(f"{prefix}-eval", "evaluate")]
    route = "kernel" if blocked else "direct"
    with opened(server, browser, name, cells, blocked, ui) as (notebook, refused):
        first, frame = first_run_shown(notebook, server, route, f"{prefix}-trace-viewer")
        switched(notebook, first, frame, f"{prefix}-eval")
        assert all(urlsplit(u).path.endswith("/xprof_magic/health") for u in refused), refused
        assert error_pages(notebook.page) == []


def test_the_trace_viewer_comes_through_the_kernel(lab: JupyterLab, browser: Any) -> None:
    cells = [SETUP, capture("kr-train", "update"), capture("kr-eval", "evaluate")]
    with opened(lab, browser, "kernel.ipynb", cells, True) as (notebook, refused):
        first, frame = first_run_shown(notebook, lab, "kernel", "kernel-route-trace-viewer")
        # The trace data was asked through the kernel from the page's first bytes, and XProf's
        # own request for it answered from that reply (inline.TRACE_PREFETCH).
        assert frame.evaluate(PREFETCHED) == 1
        # "open in new tab" would open the port this browser cannot reach.
        assert not first.locator("a.xprof-open").is_visible()
        switched(notebook, first, frame, "kr-eval")
        # XProf's 2.8 MB script crossed the kernel once: the browser kept it for the next page.
        asked = (
            first.frame_locator("iframe.xprof-outer")
            .locator("body")
            .evaluate("() => window.xprofRoute.log")
        )
        script = "/data/plugin/profile/trace_viewer_index.js"
        assert asked.count(script) == 1, asked
        assert asked.count("/data/plugin/profile/data") >= 2, asked

        # Every other tool (XProf's Angular app) shows through the kernel too: XProf's page
        # on that tool, with its content and no loading indicator left (the graph viewer: its
        # graph drawn, in the frame the page opens for it); a tool with nothing for this
        # run, its one line.
        line = first.frame_locator("iframe.xprof-outer").locator(".xprof-empty")
        select = first.locator(".xprof-tools select")
        notebook.wait(
            lambda: first.locator(".xprof-tools.xprof-surveyed").count() == 1, "the survey", 120
        )
        tools = select.evaluate("s => Array.from(s.options).map(o => o.textContent)")
        pages = {name: tool for tool, name in TOOL_NAMES.items()}
        shown, said = [], {}
        for tool in tools:
            plain = tool.replace("\xa0", " ")
            if plain.startswith("Trace viewer"):
                continue
            select.select_option(label=tool)
            if plain not in pages:  # named with its reason
                notebook.wait(lambda: shown_text(line), f"{plain}: its line", 30)
                said[plain] = shown_text(line)
                continue
            page = pages[plain]
            notebook.wait(
                functools.partial(tool_shown, notebook, first, page),
                lambda what=plain: f"{what} through the kernel; {story(notebook, first)}",
                LOAD_TIMEOUT_S,
            )
            if page == "graph_viewer":
                notebook.wait(
                    lambda: graph_drawn(notebook, first), "the graph through the kernel", 60
                )
            shown.append(plain)
            notebook.screenshot(f"kernel-route-{page}", first)
        assert len(shown) >= 5 and said, (shown, said)

        # Nothing reached the viewer's port but the probes; no error page anywhere.
        ports = {urlsplit(u).port for u in refused}
        assert len(ports) == 1 and lab.port not in ports, refused
        assert all(urlsplit(u).path.endswith("/xprof_magic/health") for u in refused), refused
        # Nor did any of the viewer's paths go to the notebook server instead.
        assert not viewer_paths(notebook, lab.port), viewer_paths(notebook, lab.port)
        assert error_pages(notebook.page) == []


def test_the_port_is_still_taken_where_it_answers(lab: JupyterLab, browser: Any) -> None:
    cells = [SETUP, capture("port-train", "update")]
    with opened(lab, browser, "port.ipynb", cells, False) as (notebook, _):
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        first = notebook.widgets.first
        notebook.wait(lambda: wrapper_route(first) == "direct", "the port route", 30)
        first.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.wait(lambda: has_event(notebook, first, "update"), "the trace viewer", 120)
        assert first.locator("a.xprof-open").is_visible()
        frame = notebook.xprof_frame(first)
        url = urlsplit(frame.url)
        assert url.hostname == "127.0.0.1" and url.port not in (None, lab.port), url
        # The trace data, asked from the page's first bytes, was asked once: XProf's own
        # request for it was answered from that reply (inline.TRACE_PREFETCH).
        assert frame.evaluate(PREFETCHED) == 1
        asked = frame.evaluate(ASKED, frame.evaluate("() => window.__xprofPrefetch.url"))
        assert asked == 1, asked


def test_a_busy_kernel_says_so_then_shows_the_viewer(lab: JupyterLab, browser: Any) -> None:
    """A cell that runs 20 s right after the capture: the frame says the viewer continues
    when it ends, and then shows it, without a click."""
    cells = [SETUP, capture("busy-train", "update"), "import time\ntime.sleep(20)"]
    with opened(lab, browser, "busy.ipynb", cells, True) as (notebook, _):
        notebook.ui.run_all(notebook.page)
        notebook.wait(lambda: notebook.widgets.count() == 1, "the capture's widget", RUN_TIMEOUT_S)
        first = notebook.widgets.first
        line = first.frame_locator("iframe.xprof-outer").locator(".xprof-route-busy")
        notebook.wait(
            lambda: shown_text(line) == ROUTE_LINES["busy"],
            lambda: f"the busy line; {story(notebook, first)}",
            60,
        )
        assert not notebook.ui.ran(notebook.prompts()[2]), "the long cell ended already"
        first.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.wait(
            lambda: has_event(notebook, first, "update"),
            lambda: f"the trace viewer after the cell; {story(notebook, first)}",
            LOAD_TIMEOUT_S,
        )
        assert notebook.ui.ran(notebook.prompts()[2]), "the viewer came before the cell ended"
        assert shown_text(line) == ""


def test_the_kernel_route_can_be_forced(lab: JupyterLab, browser: Any) -> None:
    """``XPROF_MAGIC_PROXY_URL=kernel`` takes the kernel route though the port answers."""
    force = "import os\nos.environ['XPROF_MAGIC_PROXY_URL'] = 'kernel'"
    cells = [SETUP + "\n" + force, capture("forced-train", "update")]
    with opened(lab, browser, "forced.ipynb", cells, False) as (notebook, _):
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        first = notebook.widgets.first
        notebook.wait(lambda: wrapper_route(first) == "kernel", "the forced kernel route", 30)
        first.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.wait(lambda: has_event(notebook, first, "update"), "the trace viewer", 120)
        assert notebook.xprof_frame(first).url == "about:srcdoc"


def test_no_route_is_one_line_not_an_error_page(lab: JupyterLab, browser: Any) -> None:
    """The port refused and no kernel route (anywidget missing, as made here): the frame is
    the one line saying what was tried and what to do, never the browser's error page."""
    without = "import xprof_magic._notebook.route as r\nr._widget_class = lambda: None"
    cells = [SETUP + "\n" + without, capture("none-train", "update")]
    with opened(lab, browser, "none.ipynb", cells, True) as (notebook, _):
        notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
        first = notebook.widgets.first
        notebook.wait(lambda: wrapper_route(first) == "none", "no route", 30)
        line = first.frame_locator("iframe.xprof-outer").locator(".xprof-empty")
        said = ROUTE_LINES["none"].split("{port}")[0]
        notebook.wait(lambda: said in shown_text(line), "the line saying what was tried", 30)
        assert "pip install anywidget" in shown_text(line)
        assert error_pages(notebook.page) == []
        notebook.screenshot("kernel-route-none", first)


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """A real Notebook 7 server (the ``notebook`` package, 7.x) in a home of its own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("notebook")
    except PackageNotFoundError:
        found = "none"
    if not found.split(".")[0].isdigit() or int(found.split(".")[0]) < 7:
        missing(f"Notebook 7 is not installed (notebook {found}): `make install` installs it")
    home = tmp_path_factory.mktemp("notebook7")
    server = start_jupyterlab(home, app="notebook")
    try:
        yield server
    finally:
        shut_down(server, home)


@pytest.mark.parametrize("blocked", [True, False], ids=["ports-refused", "port-reachable"])
def test_notebook7_reads_the_cell_and_switches_runs(
    notebook7: JupyterLab, browser: Any, blocked: bool
) -> None:
    name = f"nb7{'k' if blocked else 'p'}.ipynb"
    reads_and_switches(notebook7, browser, NOTEBOOK7, name, blocked)


@pytest.fixture(scope="module")
def notebook6(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """Classic Notebook 6.5 with ipywidgets 7 (Colab's stack: ``make test`` runs this in
    .venv-colab), in a home of its own."""
    home = tmp_path_factory.mktemp("notebook6-route")
    server = start_classic_notebook(home)
    try:
        yield server
    finally:
        shut_down(server, home)


@pytest.mark.pinned
@pytest.mark.parametrize("blocked", [True, False], ids=["ports-refused", "port-reachable"])
def test_ipywidgets7_on_notebook6_reads_the_cell_and_switches_runs(
    notebook6: JupyterLab, browser: Any, blocked: bool
) -> None:
    """anywidget's classic-Notebook extension draws the route's widget beside ipywidgets
    7's, so the kernel route works there as on JupyterLab."""
    name = f"nb6{'k' if blocked else 'p'}.ipynb"
    reads_and_switches(notebook6, browser, NOTEBOOK6, name, blocked)


MARIMO_CELLS = [
    """
import os
os.environ.setdefault("PJRT_DEVICE", "CPU")
import jax
import jax.numpy as jnp
import xprof_magic
""",
    """
@xprof_magic.profile(name="marimo-kernel")
def jax_train():
    w = jnp.ones((64, 64))
    # xprof: update
    w = jax.jit(lambda w: w @ w * 0.5)(w)
    return float(w.sum())

value = jax_train()
jax_train.run
""",
]


def test_the_marimo_view_takes_the_kernel_route(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """marimo's view (an anywidget: ``model.send``) shows the trace viewer through the
    kernel when only marimo's own port is reachable."""
    from tests._marimo import start_marimo, write_marimo_notebook
    from tests._notebook_servers import leftover_processes, machine_environment, stop_viewers

    home = tmp_path_factory.mktemp("marimo-kernel")
    (home / "app").mkdir()
    notebook = home / "app" / "kernel.py"
    write_marimo_notebook(notebook, MARIMO_CELLS)
    env = {
        **machine_environment(),
        "XPROF_MAGIC_NO_SERVER": "1",
        "XPROF_MAGIC_VIEWER_DIR": str(home / "viewers"),
        "XPROF_MAGIC_LOGDIR": str(home / "logs"),
    }
    server = start_marimo(notebook, home, env)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    context.add_init_script(RECORD_ERRORS)
    refused: list[str] = []
    only_the_notebook_server(context, server.port, refused)
    page = context.new_page()
    try:
        page.goto(server.url, timeout=LOAD_TIMEOUT_S * 1000)
        view = page.locator(".xprof-view").first
        view.wait_for(timeout=RUN_TIMEOUT_S * 1000)
        body = view.frame_locator("iframe.xprof-outer").locator("body")

        def routed() -> bool:
            return body.get_attribute("data-route", timeout=10_000) == "kernel"

        def wait(check: Any, what: str, timeout: float) -> None:
            wait_until(check, timeout, what, lambda s: page.wait_for_timeout(s * 1000))

        wait(routed, "the kernel route in marimo's view", 60)
        view.locator("iframe.xprof-outer").scroll_into_view_if_needed()

        def has() -> bool:
            from playwright.sync_api import Error

            for frame in page.frames:
                if frame.name.startswith("xprof-") and frame.url == "about:srcdoc":
                    with contextlib.suppress(Error):
                        if frame.evaluate(_HAS_EVENT, "update"):
                            return True
            return False

        wait(has, "the trace viewer with 'update' through the kernel in marimo", LOAD_TIMEOUT_S)

        # XProf's Angular app too: the overview, through the kernel.
        view.locator(".xprof-tools.xprof-surveyed").wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        view.locator(".xprof-tools select").select_option("overview_page")

        def overview() -> bool:
            from playwright.sync_api import Error

            from tests._page_checks import busy

            for frame in page.frames:
                if frame.name.startswith("xprof-") and frame.url == "about:srcdoc":
                    with contextlib.suppress(Error):
                        if frame.evaluate(_TOOL_SHOWN, "overview_page") and not busy(frame):
                            return True
            return False

        wait(overview, "the overview through the kernel in marimo", LOAD_TIMEOUT_S)
        assert all(urlsplit(u).path.endswith("/xprof_magic/health") for u in refused), refused
        assert error_pages(page) == []
    except BaseException:
        print(server.log_tail())
        raise
    finally:
        context.close()
        server.stop()
        stop_viewers(env)
        left = leftover_processes(home)
        assert not left, left
