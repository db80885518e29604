"""The view a run shows in marimo, against a real viewer, without a browser: its runs, tools,
hosts, summary and URLs, and where the browser reaches the viewer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import xprof_magic
from xprof_magic import _viewer
from xprof_magic._marimo import view as _view
from xprof_magic._present import run as _present
from xprof_magic._viewer import survey as _survey


def _capture(root: Path, name: str) -> None:
    import torch
    import torch_xla

    with xprof_magic.capture(logdir=root, name=name, server=False), xprof_magic.label(name):
        (torch.ones(4, device=torch_xla.device()) * 2).sum().item()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("marimo-view")
    for name in ("older", "newer"):
        _capture(root, name)
    return root


@pytest.fixture(scope="module")
def viewer(logdir: Path) -> Iterator[_viewer.Viewer]:
    outcome = _viewer.ensure_viewer(logdir)
    assert isinstance(outcome, _viewer.Launched | _viewer.Reused), outcome
    yield outcome.viewer
    _viewer.stop_viewer(outcome.viewer)


def _run_of(url: str) -> str:
    data_url = parse_qs(urlsplit(url).query)["trace_data_url"][0]
    return parse_qs(urlsplit(data_url).query)["run"][0]


def test_the_view_lists_runs_newest_first_and_embeds_the_trace_viewer_of_its_run(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    view = _view.RunView(viewer, logdir, "older")
    assert [name for name, _ in view.runs] == ["newer", "older"]
    assert view.run == "older" and view.tool == "trace_viewer@"
    assert view.src.startswith(f"http://127.0.0.1:{viewer.port}/{viewer.secret}/")
    assert "/trace_viewer_index.html?" in view.src and _run_of(view.src) == "older"
    assert view.full.startswith(f"http://127.0.0.1:{viewer.port}/{viewer.secret}/")
    assert len(view.hosts) == 1 and view.host == view.hosts[0]
    assert view.wait_for_tools()
    assert view.tools[0] == ["trace_viewer@", "Trace viewer"]
    assert {"overview_page", "op_profile"} <= {tool for tool, _ in view.tools}
    assert "No summary of older yet" in view.summary  # a capture() run saves none


def test_picking_a_run_and_a_tool_changes_the_pages_and_the_summary(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    view = _view.RunView(viewer, logdir, "older", summary_html="<p>the older summary</p>")
    assert view.summary == "<p>the older summary</p>"
    view.run = "newer"
    assert _run_of(view.src) == "newer" and "tag=trace_viewer%40" in view.full
    assert "No summary of newer yet" in view.summary
    assert view.wait_for_tools()
    view.tool = "overview_page"
    assert view.src == view.full + "&new_nav=true&xprof_magic=inline"
    assert "/data/plugin/profile/overview_page?" in view.src and "run=newer" in view.src
    view.run = "older"
    assert view.summary == "<p>the older summary</p>" and "run=older" in view.src


def test_a_new_run_in_the_log_directory_joins_the_views_shown_there(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    view = _view.RunView(viewer, logdir, "newer")
    _capture(logdir, "latest")
    _present.announce(logdir)
    assert view.runs[0][0] == "latest"
    assert view.run == "newer"  # the selection stays where the person left it
    view.refreshed += 1  # the Refresh button
    assert view.run == "newer" and len(view.runs) == 3


def test_the_view_says_what_the_jupyter_widget_says_in_its_words(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """A tool with nothing for the run is one line in place of its page, the line for a
    page still loading names the tool, the charts note is for pages that draw charts; the
    Tool choice says when XProf has told which tools have data."""
    from xprof_magic._viewer import tool_pages as _tools

    view = _view.RunView(viewer, logdir, "older")
    assert view.empty == "" and view.charts is False  # the trace viewer
    assert view.notes["busy_ms"] == int(_tools.BUSY_S * 1000)
    assert view.notes["charts_url"] == _tools.CHARTS_URL
    assert view.wait_for_tools() and view.surveyed
    view.tool = "op_profile"
    assert view.empty == (
        "xprof: Op profile has nothing to show for this run: no device ops in a CPU capture. "
        "Pick another tool, or open it in a new tab."
    )
    view.tool = "overview_page"
    assert view.empty == "" and view.charts is True
    assert view.busy.startswith("xprof: Overview is still loading after 45 s")
    view.tool = "graph_viewer"
    assert view.empty == "" and view.charts is False
    view.tool = "memory_viewer"
    assert view.under == _survey.CPU_MEMORY_VIEWER and view.empty == ""
    view.tool = "overview_page"
    assert view.under == ""


def test_a_pending_summarys_trace_viewer_waits_for_its_window(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """A summary finished apart (too big for the budget) brings the trace viewer's window:
    meanwhile the view says so in place of the trace viewer (other tools show at once),
    and when it comes the trace viewer opens on the verdict's steps."""
    from dataclasses import replace

    from xprof_magic._analysis import StepStats, summarize
    from xprof_magic._runs import store as _store
    from xprof_magic._viewer import tool_pages as _tools

    view = _view.RunView(viewer, logdir, "older", window_coming=True)
    assert view.wait == _tools.WAIT_NOTE and view.src  # the address, kept until it waits no more
    assert view.wait_for_tools()
    view.tool = "op_profile"
    assert view.wait == ""
    view.tool = "trace_viewer@"
    assert view.wait == _tools.WAIT_NOTE
    whole = summarize(_store.run_path(logdir, "older"), budget_s=None)
    steps = StepStats(
        "step", "trace", 3, (0.03, 0.002, 0.002), 0.03, None, None, None, (0,), (0.0, 0.03, 0.032)
    )
    whole = replace(whole, steps=steps, diagnosis=replace(whole.diagnosis, warm_up=1))
    window = whole.verdict_window()
    assert window is not None
    view.show_summary(whole)
    start, end = _tools.view_range(window)
    assert view.wait == "" and f"view_start={start:.3f}&view_end={end:.3f}" in view.src


def test_without_a_viewer_the_view_shows_the_summary_and_says_why() -> None:
    logdir = Path("/nonexistent/logs")
    view = _view.RunView(None, logdir, None, status="xprof: no viewer: port 1 is in use")
    assert view.src == view.full == "" and view.runs == []
    assert "No runs in /nonexistent/logs yet" in view.summary
    assert view.status.startswith("xprof: no viewer")


def test_the_browser_reaches_the_viewer_on_loopback_or_through_a_proxy_route() -> None:
    assert _view.location(8000, {}) == ("http://127.0.0.1:8000", "")
    assert _view.location(8000, {"XPROF_MAGIC_PROXY_URL": "/proxy/%PORT%/"}) == (
        "",
        "/proxy/8000",
    )
    hub = {"JUPYTERHUB_SERVICE_PREFIX": "/user/x/"}
    assert _view.location(9, hub) == ("", "/user/x/proxy/9")  # jupyter-server-proxy
    assert _view.location(9, {**hub, "XPROF_MAGIC_PROXY_URL": "none"})[0].startswith("http://")
    full = {"TENSORBOARD_PROXY_URL": "https://hub.example/user/x/proxy/%PORT%/"}
    assert _view.location(9, full) == ("https://hub.example", "/user/x/proxy/9")


def test_a_run_shows_its_view_with_its_summary_and_the_viewer_started_for_it(
    logdir: Path, viewer: _viewer.Viewer
) -> None:
    profiled = xprof_magic.profile(logdir=logdir, name="shown")(_capture_nothing)
    profiled()
    run = profiled.run
    assert run is not None and run.viewer is None  # outside marimo no viewer starts early
    view = run._display_()
    assert isinstance(view, _view.RunView) and view is run._display_()
    assert view.viewer is not None and view.viewer.port == viewer.port  # the running one
    assert view.run == "shown" and "xprof summary — run shown" in view.summary


def _capture_nothing() -> int:
    return 1


def test_a_marimo_kernels_thread_is_drawn_first_as_pythons_is() -> None:
    """In a marimo app the labels land on the kernel's main thread, named ``marimo``."""
    import json

    from xprof_magic._viewer.app import replies

    sent = (
        '{"traceEvents":[{"args":{"name":"tf_XLAEigen"},"name":"thread_name","ph":"M",'
        '"pid":1,"tid":2},{"args":{"name":"marimo"},"name":"thread_name","ph":"M",'
        '"pid":1,"tid":9}]}'
    )
    events = json.loads(replies.label_threads_first(sent.encode()))["traceEvents"]
    sorts = {e["tid"]: e["args"]["sort_index"] for e in events if e["name"] == "thread_sort_index"}
    assert sorts == {9: replies.TOP_SORT_INDEX}
