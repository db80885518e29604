"""Acceptance: ``xprof_magic.profile`` in a real marimo app, seen by a real Chromium.

What only a browser can show: marimo draws the run's view (an anywidget; ipywidgets' own
widgets do not render in marimo), the verdict and the per-step chart are in it, the summary
whole (no box of its own that scrolls), XProf's trace viewer loads inside it from the
loopback viewer and fetches the function's own labels, for a torch_xla run and a JAX run,
the link opens the full UI, the runs dropdown switches the same frame to the other run in
place, the controls row keeps its place throughout, and every tool shows as the Jupyter
widget shows it (its page, idle, or its reason in one line, the charts note only where
charts are drawn). Two routes from the browser
to the loopback viewer: its own port, for ``marimo run`` on a loopback port with a fixed
token (two origins), and jupyter-server-proxy's ``/proxy/<port>/``, for marimo served by
JupyterLab's proxy as on JupyterHub (one origin: XProf's page must not rewrite marimo's
address). One marimo app per route.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import xprof_magic
from tests._browser import BrowserPage, offline, tool_page
from tests._marimo import (
    start_marimo,
    start_marimo_behind_jupyterlab,
    view_frames,
    write_marimo_notebook,
)
from tests._notebook_servers import leftover_processes, machine_environment, shut_down, stop_viewers
from tests._page_checks import check_summary, controls, moved, one_line
from tests._said import notes_of, said
from tests._tool_checks import ToolView, check_every_tool, shown_text
from xprof_magic._analysis.summary.blocks import line_of

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 90.0

CELLS = [
    """
import os
os.environ.setdefault("PJRT_DEVICE", "CPU")
import jax
import jax.numpy as jnp
import torch
import torch_xla
import xprof_magic
""",
    """
device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
batches = [(torch.randn(64, 64), torch.randint(0, 10, (64,))) for _ in range(6)]

@xprof_magic.profile(name="marimo-torch", steps=True)
def train():
    for inputs, targets in batches:
        # xprof: forward
        loss = torch.nn.functional.cross_entropy(model(inputs.to(device)), targets.to(device))
        # xprof: backward
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
    return loss.item()

final_loss = train()
train.run
""",
    """
step = jax.jit(lambda w, x: w - 0.01 * (x.T @ (x @ w)))

@xprof_magic.profile(name="marimo-jax", steps=True)
def jax_train():
    w = jnp.ones((256, 256))
    x = jnp.full((256, 256), 0.01)
    for _ in range(4):
        # xprof: update
        w = step(w, x)
    return float(w.sum())

jax_value = jax_train()
jax_train.run
""",
]


def marimo_environment(home: Path) -> dict[str, str]:
    """This machine's environment on the CPU, with the viewers' records and the captures
    under ``home`` and no profiler server (it binds a fixed port on all interfaces)."""
    return {
        **machine_environment(),
        "XPROF_MAGIC_NO_SERVER": "1",
        "XPROF_MAGIC_VIEWER_DIR": str(home / "viewers"),
        "XPROF_MAGIC_LOGDIR": str(home / "logs"),
    }


@dataclass
class App:
    """The marimo app of one route: where the browser logs in and opens it, where it puts
    its runs, and what its server logged."""

    route: str
    origin: str
    url: str
    login: str | None
    logdir: str
    log_tail: Callable[[], str]


@pytest.fixture(scope="module", params=["direct", "proxy"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    route: str = request.param
    home = tmp_path_factory.mktemp(f"marimo-{route}")
    (home / "app").mkdir()
    notebook = home / "app" / "profiled.py"
    write_marimo_notebook(notebook, CELLS)
    env = marimo_environment(home)
    if route == "direct":
        server = start_marimo(notebook, home, env)
        try:
            yield App(
                route, server.origin, server.url, None, env["XPROF_MAGIC_LOGDIR"], server.log_tail
            )
        finally:
            server.stop()
            stopped = stop_viewers(env)
            left = leftover_processes(home)
            for line in left:
                os.kill(int(line.split(":", 1)[0]), 9)
            assert not left, f"still running after teardown ({stopped}):\n" + "\n".join(left)
        return
    # JupyterLab's environment (its kernels', its proxied marimo's) is made from this one.
    lab, login, url = start_marimo_behind_jupyterlab(
        notebook, home, {**machine_environment(), "XPROF_MAGIC_PROXY_URL": "/proxy/%PORT%/"}
    )
    try:
        yield App(route, lab.origin, url, login, lab.env["XPROF_MAGIC_LOGDIR"], lab.log_tail)
    finally:
        shut_down(lab, home)


def every_tool(watched: BrowserPage, view: Any, run: str, label: str, route: str) -> list[str]:
    """:func:`check_every_tool` on one run view: its page, the line in its place, the
    charts note; the labels on the ``marimo`` row (the kernel's thread)."""
    outer = view.locator("iframe.xprof-outer")
    outer.scroll_into_view_if_needed()
    tool_view = ToolView(
        widget=view,
        box=outer,
        frame=lambda tool: watched.wait_for_page(view, run, tool_page(tool), LOAD_TIMEOUT_S),
        data=watched.data,
        pause=watched.pause,
        screenshot=lambda shot: watched.screenshot(f"{route}-{shot}", view),
        reason=lambda: shown_text(view.locator(".xprof-empty")),
        place=view.locator(".xprof-page-area"),
        charts_note=lambda: shown_text(view.locator(".xprof-charts-note")),
        under=lambda: shown_text(view.locator(".xprof-under")),
        charts_box=view.locator(".xprof-charts-note"),
        page_box=outer,
        thread="marimo",
    )
    return check_every_tool(tool_view, run, label, "tools")


def check_route(app: App, frame_url: str) -> None:
    """The XProf page came from the route's way to the viewer: its port, or the proxy."""
    parts = urlsplit(frame_url)
    assert parts.path.endswith("/data/plugin/profile/trace_viewer_index.html"), frame_url
    if app.route == "proxy":
        assert frame_url.startswith(f"{app.origin}/proxy/"), frame_url
    else:
        assert parts.hostname == "127.0.0.1" and parts.port != urlsplit(app.origin).port
    for data_url in parse_qs(parts.query).get("trace_data_url", []):
        assert data_url.startswith("/proxy/") == (app.route == "proxy"), data_url


def test_the_runs_view_shows_the_verdict_and_the_trace_viewer_and_switches_runs(
    app: App, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline(context)
    page = context.new_page()
    watched = BrowserPage(page, shots="marimo")
    data, navigations = watched.data, watched.navigations

    def fetched(run: str, label: str) -> Any:
        found = data.find(run, "trace_viewer", None, label)
        # From a run view's XProf frame: inside the wrapper frame, inside marimo's page.
        return found if found and found.frame.parent_frame.url == "about:srcdoc" else None

    try:
        if app.login:
            page.goto(app.login, timeout=LOAD_TIMEOUT_S * 1000)
        page.goto(app.url, timeout=LOAD_TIMEOUT_S * 1000)
        views = page.locator(".xprof-view")
        watched.wait(
            lambda: views.count() == 2,
            lambda: (
                f"two run views; the page says:\n{page.inner_text('body')[-3000:]}\n"
                f"the server's log:\n{app.log_tail()}"
            ),
            RUN_TIMEOUT_S,
        )
        start = page.url
        navigations.clear()
        assert "Jupyter widgets are not supported" not in page.inner_text("body")
        layout = controls(views.first)
        assert one_line(layout), f"the controls on two lines: {layout}"

        # 1. The torch_xla run: its verdict and per-step chart, its labels in the trace viewer.
        torch_view, torch_frame = view_frames(page, 0)
        summary = xprof_magic.summarize("marimo-torch", app.logdir)
        headline = said(summary).headline
        assert headline, f"no verdict for the torch_xla run: {notes_of(summary)}"
        # Lines as marimo's editor numbers them, from the cell's top (`marimo run` compiles
        # the cell at the file's lines).
        cell = CELLS[1].strip("\n").splitlines()
        marker = cell.index("        # xprof: forward") + 1
        assert line_of(summary.cell, ("for inputs, targets in batches", "forward")) == marker
        shown = torch_view.locator(".xprof-summary")
        watched.wait(
            lambda: headline.split(":")[0] in shown.inner_text(),
            lambda: f"the verdict {headline!r} in the view: {shown.inner_text()[:800]}",
            LOAD_TIMEOUT_S,
        )
        assert "xprof summary — run marimo-torch" in shown.inner_text()
        assert shown.locator("svg").count() >= 1, "no per-step chart"
        check_summary(torch_view.locator(".xprof-summary-panel"))  # whole, labels apart
        watched.screenshot(f"{app.route}-summary", torch_view.locator(".xprof-summary-panel"))
        torch_view.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        first = watched.wait(
            lambda: fetched("marimo-torch", "forward"),
            lambda: f"the trace viewer's data of marimo-torch\n{data.describe()}",
            LOAD_TIMEOUT_S,
        )
        check_route(app, first.frame.url)
        torch_frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        # The kernel's thread, which holds the labels, is drawn first: in view, unscrolled.
        row = torch_frame.get_by_text("marimo", exact=True).filter(visible=True).first
        row.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        top = torch_view.locator("iframe.xprof-outer").bounding_box()["y"]
        assert row.bounding_box()["y"] < top + 300, "the labels' thread is not drawn first"
        watched.screenshot(f"{app.route}-torch-trace-viewer", torch_view)
        link = torch_view.locator("a.xprof-open").get_attribute("href")
        assert link, "the view has no 'open in new tab' link"
        opened = context.request.get(link if "://" in link else app.origin + link)
        assert opened.ok, f"'open in new tab' {link}: HTTP {opened.status}"

        # 2. The JAX run's own view, with its labels.
        jax_view, jax_frame = view_frames(page, 1)
        assert "xprof summary — run marimo-jax" in jax_view.locator(".xprof-summary").inner_text()
        # In view: a frame whose run was still being prepared loads it only when looked at.
        jax_view.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        check_route(
            app,
            watched.wait(
                lambda: fetched("marimo-jax", "update"),
                lambda: f"the trace viewer's data of marimo-jax\n{data.describe()}",
                LOAD_TIMEOUT_S,
            ).frame.url,
        )
        jax_frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        watched.screenshot(f"{app.route}-jax-trace-viewer", jax_view)

        # 3. The first view lists the JAX run, stored after it was shown, and switches to it
        # in place: the same frames, a new page in the inner one.
        runs = torch_view.locator(".xprof-runs select")
        watched.wait(
            lambda: "marimo-jax" in runs.evaluate("s => [...s.options].map(o => o.value)"),
            "the torch_xla view to list the JAX run",
            LOAD_TIMEOUT_S,
        )
        outer = torch_view.locator("iframe.xprof-outer")
        outer.evaluate("f => { f.contentWindow.xprofBefore = 'switch'; }")
        data_before = len(data.all())
        runs.select_option("marimo-jax")
        watched.wait(
            lambda: any(
                f.run == "marimo-jax" and "update" in f.names for f in data.all()[data_before:]
            ),
            lambda: f"the first view's frame to fetch marimo-jax\n{data.describe()}",
            LOAD_TIMEOUT_S,
        )
        kept = outer.evaluate("f => f.contentWindow.xprofBefore")
        assert kept == "switch", "the wrapper frame was reloaded or replaced"
        watched.wait(
            lambda: "run marimo-jax" in torch_view.locator(".xprof-summary").inner_text(),
            "the first view to show the JAX run's summary",
            LOAD_TIMEOUT_S,
        )
        outer.scroll_into_view_if_needed()
        torch_frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        watched.screenshot(f"{app.route}-switched-run", torch_view)

        # 4. The app's page never left its address.
        assert navigations == [] and page.url == start
        assert not data.failed, data.failed

        # 5. The controls where they were, in both views, the tools known and a run switched.
        for view in (torch_view, jax_view):
            view.locator(".xprof-tools.xprof-surveyed").wait_for(timeout=LOAD_TIMEOUT_S * 1000)
            assert moved(layout, controls(view)) == [], moved(layout, controls(view))

        # 6. Every tool of the JAX run, as in Jupyter (one route: the tools are the same).
        if app.route == "direct":
            tools = every_tool(watched, jax_view, "marimo-jax", "update", app.route)
            assert "graph_viewer" in tools and "op_profile" in tools, tools
            assert moved(layout, controls(jax_view)) == []
    except BaseException:
        with contextlib.suppress(Exception):
            watched.screenshot(f"{app.route}-failure")
        print(f"The server's log, last lines:\n{app.log_tail()}")
        raise
    finally:
        context.close()
