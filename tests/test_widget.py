"""The widget and the URLs it builds, against a real viewer, without a browser."""

from __future__ import annotations

import html
import json
import re
import threading
import types
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import xprof_magic
from xprof_magic import _analysis, _viewer
from xprof_magic._notebook import context as _context
from xprof_magic._notebook import frame as _frame
from xprof_magic._notebook import widget as _widget
from xprof_magic._present import run as _present
from xprof_magic._runs import store as _store
from xprof_magic._viewer import survey as _survey
from xprof_magic._viewer import tool_pages as _tools
from xprof_magic._viewer.process import route as _route


class Frames(HTMLParser):
    """Collects iframe attributes, unescaping them as a browser would."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "iframe":
            self.frames.append(dict(attrs))


def iframes(markup: str) -> list[dict[str, str | None]]:
    parser = Frames()
    parser.feed(markup)
    return parser.frames


def first_page(outer: dict[str, str | None]) -> dict[str, Any]:
    """The page the wrapper iframe ``outer`` starts on (its body's ``data-page``)."""
    found = re.search(r'<body[^>]*\sdata-page="([^"]*)"', outer["srcdoc"] or "")
    assert found, "the wrapper has no first page"
    page: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return page


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    import torch_xla

    root = tmp_path_factory.mktemp("widget")
    # A program compiled before the captures, and bigger than theirs: every capture's metadata
    # lists it, as a notebook's earlier cells' programs, yet none runs it.
    device = torch_xla.device()
    (torch.ones(64, 64, device=device) @ torch.ones(64, 64, device=device)).tanh().sum().item()
    for name in ("older", "newer"):
        with (
            xprof_magic.capture(logdir=root, name=name, server=False),
            xprof_magic.label(f"{name}-work"),
        ):
            (torch.ones(4, device=torch_xla.device()) * 2).sum().item()
    return root


@pytest.fixture(scope="module")
def viewer(logdir: Path) -> Iterator[_viewer.Viewer]:
    outcome = _viewer.ensure_viewer(logdir)
    assert isinstance(outcome, _viewer.Launched | _viewer.Reused), outcome
    yield outcome.viewer
    _viewer.stop_viewer(outcome.viewer)


def test_tools_are_ordered_trace_viewer_first() -> None:
    tools = ["memory_profile", "op_profile", "zeta", "overview_page", "trace_viewer", "alpha"]
    tools.append("trace_viewer@")
    assert _tools.order_tools(tools) == [
        "trace_viewer@",
        "overview_page",
        "op_profile",
        "memory_profile",
        "alpha",
        "zeta",
    ]


def test_widget_lists_runs_newest_first_and_selects_this_cells_run(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="older")
    assert [value for _, value in view.runs.options] == ["newer", "older"]
    assert view.runs.value == "older"
    assert view.wait_for_tools()
    assert view.tools.options[0] == ("Trace viewer", "trace_viewer@")
    assert {"overview_page", "op_profile"} <= {value for _, value in view.tools.options}
    assert view.hosts.layout.display == "none" and len(view.hosts.options) == 1
    src, full = view.urls()
    assert src is not None and full is not None
    assert src.startswith(f"http://127.0.0.1:{viewer.port}/{viewer.secret}/")
    query = parse_qs(urlsplit(src).query)
    data_url = query["trace_data_url"][0]
    assert data_url.startswith(f"/{viewer.secret}/data/plugin/profile/data?")
    assert parse_qs(urlsplit(data_url).query)["run"] == ["older"]
    (outer,) = iframes(view.frame.value)
    assert outer["class"] == "xprof-outer"
    (inner,) = iframes(outer["srcdoc"] or "")
    # The inner frame starts blank and goes to the wrapper's first page once the route from
    # the browser is known (the port, else the kernel: no error page meanwhile).
    assert inner["src"] == "about:blank"
    assert first_page(outer)["src"] == src
    assert inner["name"] == _frame.frame_name(view.page_frame.frame_id)
    assert shown(view)["src"] == src
    assert 'class="xprof-open"' in view.link.value


def test_switching_run_and_tool_changes_the_view(viewer: _viewer.Viewer, logdir: Path) -> None:
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="older")
    view.runs.value = "newer"
    data_url = parse_qs(urlsplit(view.urls()[0] or "").query)["trace_data_url"][0]
    assert parse_qs(urlsplit(data_url).query)["run"] == ["newer"]
    assert view.wait_for_tools()
    view.tools.value = "overview_page"
    src, full = view.urls()
    # Embedded with XProf's docked menu, which no overlay covers, in the form for under a
    # cell (no toolbar, no menu); the new tab as it is.
    assert full is not None and src == full + "&new_nav=true&xprof_magic=inline"
    assert "/data/plugin/profile/overview_page?" in src and "tag=overview_page" in src
    assert shown(view) == {
        "src": src,
        "full": full,
        "charts": True,
        "v2": None,
        "name": "Overview",
        "empty": "",
        "wait": "",
        "under": "",
        "base": f"http://127.0.0.1:{viewer.port}/{viewer.secret}",
        "route": "auto",
        "kernel": True,  # XProf's pages cross the kernel route too
        "version": _route.xprof_version(),
    }
    view.tools.value = "trace_viewer@"
    assert shown(view)["kernel"] is True
    assert shown(view)["charts"] is False
    assert "xprof-charts-note" in wrapper(view) and "gstatic.com/charts/loader.js" in wrapper(view)


def test_the_charts_note_is_for_the_pages_that_draw_charts(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """Google's charts are loaded by the tools that draw with them only (XProf's front end):
    the graph viewer draws fine without them, so its page carries no charts note."""
    assert _tools.uses_charts("overview_page") and _tools.uses_charts("memory_viewer")
    assert not any(map(_tools.uses_charts, ("trace_viewer@", "op_profile", "graph_viewer")))
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    assert view.wait_for_tools()
    view.tools.value = "graph_viewer"
    assert shown(view)["charts"] is False and shown(view)["name"] == "Graph viewer"
    view.tools.value = "memory_viewer"
    assert shown(view)["charts"] is True


def test_a_new_selection_updates_the_frame_in_place(viewer: _viewer.Viewer, logdir: Path) -> None:
    """The wrapper iframe is written once: a new run or tool changes only the page state it
    follows, so the frontend never rebuilds the frame (no reload flash, no lost scroll)."""
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="older")
    written = view.frame.value
    changes: list[Any] = []
    view.frame.observe(changes.append, names="value")
    assert view.wait_for_tools()
    view.runs.value = "newer"
    assert view.wait_for_tools()
    view.tools.value = "overview_page"
    assert changes == [] and view.frame.value == written
    (outer,) = iframes(written)
    assert shown(view)["src"] == view.urls()[0] and "overview_page" in shown(view)["src"]
    assert view.page_state.layout.display == "none"
    (span,) = Spans.of(view.page_state.value)
    assert span["data-xprof-frame"] == view.page_frame.frame_id
    assert f'data-frame="{view.page_frame.frame_id}"' in (outer["srcdoc"] or "")


def test_tools_arrive_in_the_background_and_a_stale_answer_is_dropped(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """The viewer's answer never holds up the dropdowns; one for a run left meanwhile is
    kept for later, not shown."""
    release = threading.Event()
    asked: list[str] = []

    def list_tools(_: _viewer.Viewer, run: str) -> list[str]:
        asked.append(run)
        if run == "older":
            release.wait(60)
            return ["overview_page", "trace_viewer@"]
        return ["op_profile", "trace_viewer@"]

    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="older", list_tools=list_tools
    )
    assert not release.is_set()  # built while the viewer had not answered
    assert [value for _, value in view.tools.options] == ["trace_viewer@"]
    assert "trace_viewer_index.html" in (view.urls()[0] or "")
    view.runs.value = "newer"
    release.set()
    assert view.wait_for_tools()
    assert [value for _, value in view.tools.options] == ["trace_viewer@", "op_profile"]
    view.runs.value = "older"
    assert [value for _, value in view.tools.options] == ["trace_viewer@", "overview_page"]
    assert asked == ["older", "newer"]


def test_the_tool_dropdown_says_once_the_selected_runs_tools_are_final(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """Its class :data:`~xprof_magic._notebook.widget.SURVEYED` is there only while the run
    shown has had XProf's answer of which tools have data: what a browser test waits for
    before it reads the dropdown, which changes until then."""
    release = threading.Event()

    def survey(
        _: _viewer.Viewer, run: str, tools: Sequence[str], run_dir: Path | None
    ) -> _survey.Survey:
        if run == "older":
            release.wait(60)
        return _survey.Survey(empty={"op_profile": "no device ops"})

    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", survey=survey
    )
    assert view.wait_for_tools()
    assert _widget.SURVEYED in view.tools._dom_classes
    assert ("Op profile (no device ops)", "op_profile") in view.tools.options
    view.runs.value = "older"
    assert _widget.SURVEYED not in view.tools._dom_classes
    release.set()
    assert view.wait_for_tools()
    assert _widget.SURVEYED in view.tools._dom_classes
    view.runs.value = "newer"
    assert _widget.SURVEYED in view.tools._dom_classes


def test_a_viewer_that_cannot_list_tools_leaves_the_trace_viewer_and_says_why(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    def list_tools(_: _viewer.Viewer, run: str) -> list[str]:
        raise _viewer.ViewerError(f"the viewer did not answer for {run}; run the cell again")

    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", list_tools=list_tools
    )
    assert view.wait_for_tools()
    assert [value for _, value in view.tools.options] == ["trace_viewer@"]
    assert "did not answer for newer; run the cell again" in view.status.value


def test_a_new_capture_is_announced_to_shown_widgets(viewer: _viewer.Viewer, logdir: Path) -> None:
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="older")
    with xprof_magic.capture(logdir=logdir, name="latest", server=False):
        pass
    _present.announce(logdir)
    assert view.runs.options[0][1] == "latest"
    assert view.runs.value == "older"  # the user's selection stays


def test_proxy_template_puts_the_prefix_into_the_page_and_its_data_url(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    context = _context.detect(
        shell=types.SimpleNamespace(kernel=object()),
        environ={"XPROF_MAGIC_PROXY_URL": "/user/ada/proxy/%PORT%/"},
        modules={},
    )
    assert context == _context.Context("proxy", "/user/ada/proxy/%PORT%/")
    view = _widget.ViewerWidget(viewer, context, logdir, run="newer")
    src, _ = view.urls()
    prefix = f"/user/ada/proxy/{viewer.port}/{viewer.secret}"
    assert src is not None and src.startswith(prefix + "/data/plugin/profile/")
    data_url = parse_qs(urlsplit(src).query)["trace_data_url"][0]
    assert data_url.startswith(prefix + "/data/plugin/profile/data?")


@pytest.mark.parametrize(
    ("shell", "environ", "kind"),
    [
        (types.SimpleNamespace(), {}, "terminal"),
        (types.SimpleNamespace(kernel=object()), {}, "jupyter"),
        (types.SimpleNamespace(kernel=object()), {"VSCODE_PID": "1"}, "vscode"),
        (types.SimpleNamespace(kernel=object()), {"TENSORBOARD_PROXY_URL": "/p/%PORT%/"}, "proxy"),
        (
            types.SimpleNamespace(kernel=object()),
            {"XPROF_MAGIC_PROXY_URL": "none", "TENSORBOARD_PROXY_URL": "/p/%PORT%/"},
            "jupyter",
        ),
        (
            types.SimpleNamespace(kernel=object()),
            {"JUPYTERHUB_SERVICE_PREFIX": "/user/x/"},
            "proxy",
        ),
    ],
)
def test_context_detection(shell: Any, environ: dict[str, str], kind: str) -> None:
    assert _context.detect(shell=shell, environ=environ, modules={}).kind == kind


def test_hub_prefix_builds_the_server_proxy_route() -> None:
    shell = types.SimpleNamespace(kernel=object())
    context = _context.detect(shell, {"JUPYTERHUB_SERVICE_PREFIX": "/user/x/"}, {})
    assert context.locate(8000) == ("", "/user/x/proxy/8000")
    full = _context.Context("proxy", "https://hub.example/user/x/proxy/%PORT%/")
    assert full.locate(9) == ("https://hub.example", "/user/x/proxy/9")


def test_display_bundle_text_names_the_viewer_and_keeps_the_secret_to_terminals(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == f"XProf viewer on 127.0.0.1:{viewer.port} (run newer)"
    terminal = _widget.ViewerWidget(viewer, _context.Context("terminal"), logdir, run="newer")
    assert terminal.text().startswith(f"XProf: http://127.0.0.1:{viewer.port}/{viewer.secret}/")


def test_the_wrapper_silences_xprofs_history_calls(viewer: _viewer.Viewer, logdir: Path) -> None:
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    (outer,) = iframes(view.frame.value)
    assert "history.pushState=history.replaceState=function(){}" in (outer["srcdoc"] or "")


def test_summary_panel_follows_the_selected_run(viewer: _viewer.Viewer, logdir: Path) -> None:
    from xprof_magic import _analysis
    from xprof_magic._runs import store as _store

    older = _store.run_path(logdir, "older")
    _analysis.save_summary(_analysis.summarize(older, budget_s=None), older)
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="older")
    assert "xprof summary — run older" in view.summaries.html.value
    view.runs.value = "newer"
    assert "No summary of newer yet" in view.summaries.html.value
    newer = _analysis.summarize(_store.run_path(logdir, "newer"), budget_s=None)
    view.show_summary("newer", _analysis.render_html(newer))
    assert "xprof summary — run newer" in view.summaries.html.value
    saved = _analysis.load_summary(older)
    assert saved is not None
    view.show_summary("older", _analysis.render_html(saved))
    assert "run newer" in view.summaries.html.value  # another run's summary does not replace it


def test_a_widget_given_its_runs_summary_does_not_read_the_saved_one(
    viewer: _viewer.Viewer, logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell's display and ``%xprof view`` render their run's summary once and give it to
    the widget, whose panel shows it from the first: it never reads and renders the saved
    summary again before anything shows (about 35 ms of a 30 MB run's). Another run's saved
    summary is read when that run is selected."""
    older = _store.run_path(logdir, "older")
    _analysis.save_summary(_analysis.summarize(older, budget_s=None), older)
    read: list[Path] = []
    load = _analysis.load_summary
    here = threading.get_ident()

    def reading(run_dir: Path) -> Any:
        # This test's thread only: the widgets of earlier tests, on the same log directory,
        # may still read the newest run's summary from their tools answers' threads.
        if threading.get_ident() == here:
            read.append(Path(run_dir))
        return load(run_dir)

    monkeypatch.setattr(_analysis, "load_summary", reading)
    given = "<p>the summary of newer, given</p>"
    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", summary_page=given
    )
    assert view.summaries.html.value == given and read == []
    view.runs.value = "older"
    assert "xprof summary — run older" in view.summaries.html.value and read == [older]


def test_xprof_view_lists_the_runs_once(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``%xprof view`` hands the runs it listed to name its run on to the widget: listing
    reads every run's metadata (up to a megabyte of JSON each for a long loop's)."""
    from xprof_magic._notebook import commands, show
    from xprof_magic._viewer.process import manager

    listed: list[Path] = []
    runs = _store.runs

    def listing(where: Any = None) -> list[_store.RunInfo]:
        listed.append(Path(where))
        return runs(where)

    shown: dict[str, Any] = {}
    monkeypatch.setattr(_store, "runs", listing)
    monkeypatch.setattr(manager, "begin_viewer", lambda *args, **kwargs: None)
    monkeypatch.setattr(show, "show_run", lambda *args, **kwargs: shown.update(kwargs))
    monkeypatch.setenv(_store.LOGDIR_ENV, str(logdir))
    commands.run_command(commands.Session(), None, "view older")
    assert len(listed) == 1
    assert [run.name for run in shown["found"]] == [run.name for run in runs(logdir)]


def test_the_summary_shows_whole_and_the_trace_viewer_opens_on_its_verdicts_steps(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """No box of the panel's own scrolls the summary; the trace viewer's first range is the
    window the verdict is about, a margin each side, in XProf's own ``view_start`` and
    ``view_end`` (ms); other runs keep theirs, and the new tab is XProf's whole timeline."""
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    layout = view.summaries.html.layout
    assert not layout.max_height and layout.overflow in (None, "", "visible")
    src, full = view.urls()
    assert "view_start" not in (src or "")
    view.show_summary("newer", "<p>newer</p>", (1.0, 2.0))
    src, full = view.urls()
    query = parse_qs(urlsplit(src or "").query)
    assert (query["view_start"], query["view_end"]) == (["970.000"], ["2030.000"])
    assert shown(view)["src"] == src and "view_start" not in (full or "")
    view.show_summary("older", "<p>older</p>", (5.0, 6.0))
    assert shown(view)["src"] == src  # the selected run's page stays
    view.runs.value = "older"
    assert "view_start=4970.000" in (view.urls()[0] or "")
    # Known when the widget is made, so its frame's first page is already the window's.
    made = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", window=(1.0, 2.0)
    )
    (outer,) = iframes(made.frame.value)
    assert "view_start=970.000" in first_page(outer)["src"]


def test_a_pending_summarys_trace_viewer_waits_and_opens_first_on_the_verdicts_steps(
    ip: Any, viewer: _viewer.Viewer, logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary too big for the cell's budget comes in two: from the metadata at once (no
    steps on the timeline, so no window), then whole. The trace viewer is not loaded on the
    whole timeline meanwhile, to move to the verdict's steps seconds later: its frame shows
    one line in its place, and the first trace-viewer address it loads carries the full
    summary's window in XProf's ``view_start`` and ``view_end``. (``ip``: a shell, so that
    the summary's display can be updated in place.)"""
    from dataclasses import replace

    from xprof_magic._analysis import StepStats
    from xprof_magic._notebook import show
    from xprof_magic._viewer.process import manager

    pages: list[_frame.Page | None] = []

    class Recording(_frame.IframeFrame):
        def show(self, page: _frame.Page | None) -> _frame.Areas:
            pages.append(page)
            return super().show(page)

    frames: list[Recording] = []

    def frame(self: _context.Context, viewer: _viewer.Viewer, height: int) -> Recording:
        frames.append(Recording(height))
        return frames[-1]

    ready: list[Any] = []
    monkeypatch.setattr(_context, "detect", lambda shell=None: _context.Context("jupyter"))
    monkeypatch.setattr(_context.Context, "frame", frame)
    monkeypatch.setattr(show, "finish_apart", lambda run_dir, on_ready: ready.append(on_ready))
    run_dir = _store.run_path(logdir, "newer")
    whole = _analysis.summarize(run_dir, budget_s=None)
    starts = (0.010, 0.040, 0.042, 0.044)
    steps = StepStats("step", "trace", 4, (0.030, 0.002, 0.002, 0.002), 0.03, None, None, None)
    whole = replace(
        whole,
        steps=replace(steps, compiling=(0,), starts_s=starts),
        diagnosis=replace(whole.diagnosis, scope="steps", warm_up=1),
    )
    window = whole.verdict_window()
    assert window is not None
    quick = replace(whole, pending=True, complete=False, steps=steps)
    assert quick.verdict_window() is None

    class Started:
        def wait(self, timeout: float = 0.0) -> manager.Reused:
            return manager.Reused(viewer)

    show.show_run(None, Started(), logdir, run_dir, 400, summary=quick)  # type: ignore[arg-type]
    assert len(ready) == 1 and len(frames) == 1
    assert pages and all(p is not None and p.wait for p in pages), pages
    (outer,) = iframes(frames[0]._wrapper)
    (inner,) = iframes(outer["srcdoc"] or "")
    assert inner["src"] == "about:blank"  # the wrapper starts on no page
    assert "the trace viewer opens on the steps the verdict is about" in pages[-1].wait
    ready[0](whole)
    loaded = [p for p in pages if p is not None and not p.wait and not p.empty]
    assert loaded, pages
    query = parse_qs(urlsplit(loaded[0].src).query)
    start, end = _tools.view_range(window)
    assert (query["view_start"], query["view_end"]) == ([f"{start:.3f}"], [f"{end:.3f}"])
    # Reading the timeline failed: the summary that replaces the pending one is the
    # metadata's again. The trace viewer waits no longer, on no window.
    pages.clear()
    show.show_run(None, Started(), logdir, run_dir, 400, summary=quick)  # type: ignore[arg-type]
    assert pages and pages[-1] is not None and pages[-1].wait
    ready[1](quick)
    assert pages[-1] is not None and not pages[-1].wait and "view_start" not in pages[-1].src


def test_a_run_shown_again_takes_the_summary_this_kernel_rendered(
    viewer: _viewer.Viewer, logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%xprof view RUN`` after the cell that showed RUN neither reads its saved summary nor
    renders it again (0.04 to 0.06 s before the frame showed, for a 30 MB run); a summary
    saved since, or one not complete, is read as before."""
    run_dir = _store.run_path(logdir, "newer")
    summary = _analysis.summarize(run_dir, budget_s=None)
    saved = _analysis.save_summary(summary, run_dir)
    try:
        _kept_while_saved(viewer, logdir, run_dir, summary, monkeypatch)
    finally:  # the module's other tests take this run without a saved summary
        saved.unlink()


def _kept_while_saved(
    viewer: _viewer.Viewer,
    logdir: Path,
    run_dir: Path,
    summary: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from xprof_magic._notebook import show
    from xprof_magic._viewer.process import manager

    assert summary.complete
    rendered = show.Rendered.of(summary)
    show.remember(rendered, run_dir)
    assert show.kept_rendered(run_dir) is rendered

    shown: list[show.Rendered] = []
    monkeypatch.setattr(show.CellDisplay, "show", lambda self: shown.append(self.rendered))
    monkeypatch.setattr(_context, "detect", lambda shell=None: _context.Context("jupyter"))

    def read(shell: Any, run_dir: Path) -> Any:
        read.runs.append(run_dir)  # type: ignore[attr-defined]
        return summary

    read.runs = []  # type: ignore[attr-defined]
    monkeypatch.setattr(show, "summary_now", read)

    class Started:
        def wait(self, timeout: float = 0.0) -> manager.Reused:
            return manager.Reused(viewer)

    show.show_run(None, Started(), logdir, run_dir, 400)  # type: ignore[arg-type]
    assert shown == [rendered] and read.runs == []  # type: ignore[attr-defined]

    # Saved again (the run captured again under its name, a newer version's summary): read.
    _analysis.save_summary(summary, run_dir)
    assert show.kept_rendered(run_dir) is None
    show.show_run(None, Started(), logdir, run_dir, 400)  # type: ignore[arg-type]
    assert read.runs == [run_dir] and shown[-1] is not rendered  # type: ignore[attr-defined]
    assert show.kept_rendered(run_dir) is shown[-1]  # and kept in its turn
    # A pending summary is never kept.
    show.remember(show.Rendered.of(replace(summary, pending=True, complete=False)), run_dir)
    assert show.kept_rendered(run_dir) is shown[-1]


def test_a_tool_without_data_shows_why_in_place_of_its_page(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """XProf's page of a tool that has nothing for the run only spins: the frame shows the
    survey's reason instead, in one line, and does not load the page; Colab's frame too."""
    from xprof_magic._notebook import colab

    def survey(*_: Any) -> _survey.Survey:
        return _survey.Survey({"hlo_stats": "no device ops in a CPU capture"})

    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", survey=survey
    )
    assert view.wait_for_tools()
    view.tools.value = "hlo_stats"
    assert shown(view)["empty"] == "no device ops in a CPU capture"
    assert shown(view)["name"] == "HLO stats"
    line = _frame.notes(True)["empty"]
    assert "{name}" in line and "{reason}" in line and "new tab" in line
    page = view.page()
    assert page is not None
    fresh = _frame.IframeFrame(300).show(page)
    (outer,) = iframes(fresh.frame)
    (inner,) = iframes(outer["srcdoc"] or "")
    assert inner["src"] == "about:blank"  # XProf's page is not loaded
    said = colab.script(1, page.src, "/probe", 300, "f", page=page)
    assert (
        "xprof: HLO stats has nothing to show for this run: no device ops in a CPU capture. "
        "Pick another tool." in said
    )
    view.tools.value = "overview_page"
    assert shown(view)["empty"] == "" and shown(view)["name"] == "Overview"


def test_tools_with_data_lead_and_the_others_say_why(viewer: _viewer.Viewer, logdir: Path) -> None:
    """XProf's answers for a real CPU capture: no device ops, so the device tools go last."""
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    assert view.wait_for_tools()
    labels = dict((value, label) for label, value in view.tools.options)
    values = [value for _, value in view.tools.options]
    assert values[0] == "trace_viewer@"
    assert labels["op_profile"] == "Op profile (no device ops in a CPU capture)"
    assert labels["hlo_stats"].endswith("(no device ops in a CPU capture)")
    assert labels["overview_page"] == "Overview"
    empty = [v for v in values if "(" in labels[v]]
    assert empty and values[-len(empty) :] == empty
    view.tools.value = "graph_viewer"
    query = parse_qs(urlsplit(view.urls()[0] or "").query)
    # Which program: test_the_program_tools_open_on_a_program_the_capture_ran.
    assert query["module_name"][0] in _survey.modules(viewer, "newer")
    assert query["node_name"][0]  # the entry's root op: the graph viewer has an op to search
    # XProf's memory viewer shows the program's planned buffers as "HBM": on the CPU client
    # that is host memory, and no allocation was measured: one line under its page says so.
    view.tools.value = "memory_viewer"
    assert labels["memory_viewer"] == "Memory viewer"
    assert shown(view)["under"] == _survey.CPU_MEMORY_VIEWER and not shown(view)["empty"]
    assert "Device memory section" in _survey.CPU_MEMORY_VIEWER
    view.tools.value = "overview_page"
    assert shown(view)["under"] == ""


def test_the_program_tools_open_on_a_program_the_capture_ran(
    viewer: _viewer.Viewer, logdir: Path
) -> None:
    """The metadata lists the process's every program (an earlier cell's too); the saved
    summary says which ran, and the graph viewer opens on one of those."""
    run_dir = _store.run_path(logdir, "newer")
    listed = _survey.modules(viewer, "newer")
    summary = _analysis.summarize(run_dir, budget_s=None)
    ran = [name for name, _ in summary.programs]
    assert ran and set(ran) < set(listed), (ran, listed)  # one ran; the earlier one did not
    assert _survey.ran(listed, run_dir) == list(listed)  # no saved summary: any may be it
    saved = _analysis.save_summary(summary)
    try:
        assert _survey.ran(listed, run_dir) == ran
        view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
        assert view.wait_for_tools()
        view.tools.value = "graph_viewer"
        query = parse_qs(urlsplit(view.urls()[0] or "").query)
        assert query["module_name"] == [ran[0]]
    finally:
        saved.unlink()


def test_the_memory_viewer_opens_on_the_largest_program(
    viewer: _viewer.Viewer, logdir: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for program, size in (("jit__normal(1)", 10), ("jit_train_step(2)", 900), ("jit_iota(3)", 5)):
        (run_dir / f"{program}.hlo_proto.pb").write_bytes(b"x" * size)
    programs = ["jit__normal(1)", "jit_iota(3)", "jit_train_step(2)", "jit_gone(4)"]
    assert _survey.largest(programs, run_dir) == "jit_train_step(2)"
    assert _survey.largest(programs, tmp_path / "none") is None

    def survey(*_: Any) -> _survey.Survey:
        return _survey.Survey({}, "jit_train_step(2)")

    view = _widget.ViewerWidget(
        viewer, _context.Context("jupyter"), logdir, run="newer", survey=survey
    )
    assert view.wait_for_tools()
    view.tools.value = "memory_viewer"
    src, full = view.urls()
    assert src is not None and parse_qs(urlsplit(src).query)["module_name"] == ["jit_train_step(2)"]
    assert full is not None and "module_name" not in full


def test_trace_viewer_v2_is_offered_for_big_runs_only(
    viewer: _viewer.Viewer, logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By URL (no saved choice), in a new tab, behind a WebGPU check in the browser."""
    view = _widget.ViewerWidget(viewer, _context.Context("jupyter"), logdir, run="newer")
    assert view.wait_for_tools()
    assert view.v2_url() is None and shown(view)["v2"] is None
    monkeypatch.setattr(_widget, "BIG_RUN_BYTES", 1)
    view.refresh_view()
    v2 = view.v2_url()
    assert v2 is not None and v2.endswith("&use_trace_viewer_v2=true")
    assert "/data/plugin/profile/trace_viewer@?" in v2
    assert shown(view)["v2"] == v2
    assert 'class="xprof-v2" hidden' in wrapper(view) and "requestAdapter" in wrapper(view)
    view.tools.value = "overview_page"
    assert view.v2_url() is None and shown(view)["v2"] is None


def wrapper(view: _widget.ViewerWidget) -> str:
    """The wrapper page of the widget's frame, as the browser reads it."""
    return str(iframes(view.frame.value)[0]["srcdoc"])


class Spans(HTMLParser):
    """Collects span attributes, unescaping them as a browser would."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "span":
            self.spans.append(dict(attrs))

    @classmethod
    def of(cls, markup: str) -> list[dict[str, str | None]]:
        parser = cls()
        parser.feed(markup)
        return parser.spans


def shown(view: _widget.ViewerWidget) -> dict[str, Any]:
    """The page the widget's frame is told to show: its hidden state element, as the
    wrapper's script reads it."""
    (span,) = Spans.of(view.page_state.value)
    page: dict[str, Any] = json.loads(span["data-page"] or "")
    return page
