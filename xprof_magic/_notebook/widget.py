"""The widget under a cell: runs, tools and hosts dropdowns over the embedded XProf page.

Core ipywidgets only, so that it renders in JupyterLab, Notebook 7, VS Code and Colab
without a custom widget manager. Where the selected page shows is the
:class:`~xprof_magic._notebook.frame.Frame` the notebook context picks (an iframe inside the
widget, or Colab's output of its own); the widget only tells it which
:class:`~xprof_magic._notebook.frame.Page` to show, and the frame updates in place.

A run's tools are asked of the viewer in the background (:mod:`~xprof_magic._notebook.tool_survey`):
the trace viewer, always there, is offered at once, and the full list replaces it when it
comes. The summary of the selected run shows in a panel of its own
(:mod:`~xprof_magic._notebook.summary_panel`).
"""

from __future__ import annotations

import html
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from xprof_magic._backends.registry import DEFAULT_HEIGHT
from xprof_magic._notebook import compat
from xprof_magic._notebook.context import Context
from xprof_magic._notebook.frame import Areas, Frame, Page
from xprof_magic._notebook.route import route_widget
from xprof_magic._notebook.summary_panel import SummaryPanel
from xprof_magic._notebook.tool_survey import ToolAnswer, ToolQuestions
from xprof_magic._present import run as _run
from xprof_magic._runs import store as _store
from xprof_magic._viewer.process.client import TRACE_VIEWER_TOOL, Viewer
from xprof_magic._viewer.process.route import forced_route, xprof_version
from xprof_magic._viewer.survey import Survey, survey_tools
from xprof_magic._viewer.tool_pages import (
    ToolLister,
    ToolSurveyor,
    Window,
    list_tools,
    order_tools,
    page_urls,
    tool_label,
    uses_charts,
    wait_line,
)

__all__ = ["BIG_RUN_BYTES", "SURVEYED", "ViewerWidget"]

V2 = "use_trace_viewer_v2=true"
SURVEYED = "xprof-surveyed"
"""The Tool dropdown's class once the selected run's tools are final (XProf has said which
have data): from then on its options, and the page of the tool chosen, stay as they are."""
CHOICE_WIDTH = "270px"
"""Each dropdown's width: two, Refresh and the link fit an 848 px output on one line."""
BIG_RUN_BYTES = 30 * 2**20
"""About a million events: where XProf starts thinning the classic trace viewer's events."""


class ViewerWidget:
    """Runs, tools and hosts for one log directory, and the selected page embedded."""

    def __init__(
        self,
        viewer: Viewer,
        context: Context,
        logdir: Path,
        run: str | None = None,
        *,
        height: int = DEFAULT_HEIGHT,
        frame: Frame | None = None,
        found: Sequence[_store.RunInfo] | None = None,
        window: Window | None = None,
        window_coming: bool = False,
        summary_page: str | None = None,
        list_tools: ToolLister = list_tools,
        survey: ToolSurveyor = survey_tools,
    ) -> None:
        """Build the viewer widget for the runs in ``logdir``, served by ``viewer``.

        Args:
            run: The run to select.
            frame: Where the page shows (default: the one ``context`` picks).
            found: The runs in ``logdir``, when the caller has listed them.
            window: The seconds on ``run``'s timeline that its verdict is about, so that the
                trace viewer opens there from the first.
            window_coming: Instead of ``window``: it comes with ``run``'s summary (a pending
                one's), and the trace viewer waits for it rather than open on the whole
                timeline first.
            summary_page: ``run``'s summary as HTML, where the caller has it rendered: the
                summary panel shows it from the first, rather than read and render the
                saved one again (about 35 ms for a 30 MB run's on 2 cores, before anything showed).
            list_tools: How the viewer is asked for a run's tools.
            survey: How the viewer is asked which of a run's tools have data.
        """
        self.viewer = viewer
        self.context = context
        self.logdir = Path(logdir)
        self.logdir_key = str(self.logdir.resolve())
        self.height = height
        self.page_frame = frame if frame is not None else context.frame(viewer, height)
        self.summaries = SummaryPanel(self.logdir)
        if run is not None and summary_page is not None:
            self.summaries.show(run, summary_page, window, coming=window_coming)
        elif run is not None and (window is not None or window_coming):
            self.summaries.expect(run, window, coming=window_coming)
        self._questions = ToolQuestions(
            viewer, self._run_dir, self._take_tools, list_tools=list_tools, survey=survey
        )
        self._tools_cache: dict[str, list[str]] = {}
        # Per run: the tools without data and why, and the program per-program tools open on.
        self._surveys: dict[str, Survey] = {}
        # Held while the dropdowns change, by the kernel's thread or a tools answer's thread.
        self._lock = threading.RLock()
        self._updating = False
        self._tools_error = ""
        self._build()
        self.runs.observe(self._on_run, names="value")
        self.tools.observe(self._on_view, names="value")
        self.hosts.observe(self._on_view, names="value")
        self.refresh.on_click(lambda _: self.refresh_runs())
        self.refresh_runs(select=run, found=found)
        _run.shown(self)

    def _build(self) -> None:
        """Build the dropdowns and the areas they fill: the viewer box.

        The box is displayed apart from the summary panel (replacing a pending summary then
        re-renders the panel only).
        """
        # Fixed widths: a select as wide as its longest option would grow when the tools'
        # reasons or a new run come, and push the row onto two lines (a long option is cut
        # in the closed select, whole in its list).
        label = {"description_width": "initial"}
        self.runs = widgets.Dropdown(
            description="Run", layout=widgets.Layout(width=CHOICE_WIDTH), style=label
        )
        self.tools = widgets.Dropdown(
            description="Tool", layout=widgets.Layout(width=CHOICE_WIDTH), style=label
        )
        self.hosts = widgets.Dropdown(
            description="Host", layout=widgets.Layout(width=CHOICE_WIDTH), style=label
        )
        self.refresh = widgets.Button(
            description="Refresh",
            icon="refresh",
            tooltip="Look for runs written elsewhere",
            layout=widgets.Layout(width="auto"),
        )
        self.link = widgets.HTML()
        self.frame = widgets.HTML()
        self.page_state = widgets.HTML(layout=widgets.Layout(display="none"))
        self.status = widgets.HTML()
        self.route = route_widget(self.viewer) if self.context.kernel_route else None
        for widget, css in (
            (self.runs, "xprof-runs"),
            (self.tools, "xprof-tools"),
            (self.hosts, "xprof-hosts"),
            (self.refresh, "xprof-refresh"),
            (self.link, "xprof-link"),
            (self.frame, "xprof-frame"),
            (self.page_state, "xprof-page-state"),
            (self.status, "xprof-status"),
        ):
            widget.add_class(css)
        controls = widgets.HBox(
            [self.runs, self.tools, self.hosts, self.refresh, self.link],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        parts = [controls, self.status, self.frame, self.page_state]
        self.box = widgets.VBox(parts + ([self.route] if self.route is not None else []))
        self.box.add_class("xprof-viewer")

    def _run_dir(self, run: str) -> Path:
        return _store.run_path(self.logdir, run)

    def refresh_runs(
        self, select: str | None = None, found: Sequence[_store.RunInfo] | None = None
    ) -> None:
        """Re-list the runs, newest first, keeping (or moving to) the selected one.

        The runs are ``found``, else read now.
        """
        if found is None:
            found = _store.runs(self.logdir)
        with self._lock:
            current = select or self.runs.value
            options = [(_run_label(r), r.name) for r in found]
            names = [name for _, name in options]
            self._updating = True
            try:
                self.runs.options = options
                self.runs.value = current if current in names else (names[0] if names else None)
            finally:
                self._updating = False
            self._on_run()

    def _on_run(self, change: Any = None) -> None:
        with self._lock:
            if self._updating:
                return
            run = self.runs.value
            self._updating = True
            try:
                if run is None:
                    self.tools.options, self.hosts.options = [], []
                    self.tools.remove_class(SURVEYED)
                else:
                    known = self._tools_cache.get(run)
                    self._offer_tools(known or order_tools([TRACE_VIEWER_TOOL, self.tools.value]))
                    hosts = list(_store.hosts(self._run_dir(run)))
                    self.hosts.options = hosts
                    self.hosts.value = hosts[0] if hosts else None
                    self.hosts.layout.display = "" if len(hosts) > 1 else "none"
            finally:
                self._updating = False
            if run is not None and run not in self._tools_cache:
                self._questions.ask(run)
            self.summaries.follow(run)
            self.refresh_view()

    def _offer_tools(self, tools: list[str]) -> None:
        """Set the tool options, keeping the selected tool where the run has it.

        A tool without data for the run is named with the reason.
        """
        keep = self.tools.value if self.tools.value in tools else None
        survey = self._surveys.get(self.runs.value or "")
        empty = survey.empty if survey else {}
        self.tools.options = [(tool_label(t, empty.get(t)), t) for t in tools]
        self.tools.value = keep or (tools[0] if tools else None)
        (self.tools.add_class if survey else self.tools.remove_class)(SURVEYED)

    def _take_tools(self, answer: ToolAnswer) -> None:
        """Take an answer about a run's tools, from its question's thread.

        The answer is kept for the run, and offered if the run is still the one selected.
        """
        with self._lock:
            if answer.tools and answer.survey is not None:
                self._tools_cache[answer.run] = answer.tools
                self._surveys[answer.run] = answer.survey
            if answer.ticket != self._questions.latest or answer.run != self.runs.value:
                return  # The user moved on; the cache keeps the answer for a return to this run.
            if answer.problem:
                self._tools_error = f"<span style='color:#b00'>{html.escape(answer.problem)}</span>"
                self.status.value = self._tools_error
            if not answer.tools:
                return  # The trace viewer offered meanwhile stays, and the next visit asks again.
            if self._tools_error and self.status.value == self._tools_error:
                self.status.value = ""
            self._updating = True
            try:
                self._offer_tools(answer.tools)
            finally:
                self._updating = False
            self.refresh_view()

    def wait_for_tools(self, timeout: float = 30.0) -> bool:
        """Block until the tool lists asked for so far have arrived (scripts, tests).

        Returns False if one is still pending after ``timeout`` seconds.
        """
        return self._questions.wait(timeout)

    def show_summary(
        self, run: str, page: str, window: Window | None = None, coming: bool = False
    ) -> None:
        """Give the summary panel ``run``'s summary (the way a summary comes in once built).

        Args:
            run: The run the summary is of; shown at once if that run is the one selected,
                else when it is selected.
            page: The summary, as HTML.
            window: The seconds on the timeline its verdict is about, where the trace viewer
                opens (:meth:`~xprof_magic._analysis.Summary.verdict_window`).
            coming: The summary is pending, and the trace viewer waits for the window that
                comes with the full one (it opens on it then).
        """
        self.summaries.show(run, page, window, coming)
        if run == self.runs.value:
            self.refresh_view()

    def widget_bundle(self) -> dict[str, Any]:
        """The viewer's MIME bundle (dropdowns and the embedded page); text/plain says where."""
        bundle = compat.widget_bundle(self.box)
        bundle["text/plain"] = self.text()
        return bundle

    def summary_widget_bundle(self) -> dict[str, Any]:
        """The summary panel's widget part of a MIME bundle (the caller adds text and HTML)."""
        return self.summaries.widget_bundle()

    def _on_view(self, change: Any = None) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:
        """Show the selected page: the frame changes only what changed, in place."""
        with self._lock:
            if self._updating:
                return
            page = self.page()
            areas = self.page_frame.show(page)
            if page is None:
                areas = Areas(f"<i>No runs in {html.escape(str(self.logdir))} yet.</i>")
            self.frame.value, self.page_state.value = areas.frame, areas.state
            self.link.value = areas.link

    def page(self) -> Page | None:
        """What the frame shows for the selection (None: no run)."""
        src, full = self.urls()
        if src is None or full is None:
            return None
        tool = self.tools.value or TRACE_VIEWER_TOOL
        charts = uses_charts(tool)
        survey = self._surveys.get(self.runs.value or "", Survey())
        empty, under = survey.empty.get(tool, ""), survey.said.get(tool, "")
        wait = wait_line(tool, self.summaries.coming(self.runs.value))
        origin, prefix = self.context.locate(self.viewer.port)
        return Page(
            src,
            full,
            charts,
            self.v2_url(),
            tool_label(tool),
            empty,
            wait,
            under,
            base=origin + prefix + self.viewer.base_path,
            route=forced_route(),
            kernel=self.viewer.kind == "xprof",
            version=xprof_version(),
        )

    def urls(self) -> tuple[str | None, str | None]:
        """The browser's URLs of the embedded page and of the full UI, for the selection."""
        run, tool, host = self.runs.value, self.tools.value, self.hosts.value
        if run is None:
            return None, None
        location = self.context.locate(self.viewer.port)
        survey, window = self._surveys.get(run), self.summaries.window(run)
        return page_urls(self.viewer, run, tool, host, location, survey, window)

    def v2_url(self) -> str | None:
        """XProf's Trace Viewer v2 on the selection, for a big run in the trace viewer (else None).

        A big run is one of :data:`BIG_RUN_BYTES` or more. v2 is asked for by URL, so the browser
        saves no choice; the inline trace viewer stays the classic one, which always works.
        """
        run, tool, host = self.runs.value, self.tools.value, self.hosts.value
        if run is None or tool != TRACE_VIEWER_TOOL or self.viewer.kind != "xprof":
            return None
        if _store.xplane_bytes(_store.run_path(self.logdir, run)) < BIG_RUN_BYTES:
            return None
        origin, prefix = self.context.locate(self.viewer.port)
        return f"{origin}{self.viewer.tool_path(run, tool, host, prefix=prefix)}&{V2}"

    def text(self) -> str:
        """Where to look, for frontends without widgets.

        The URL carries the viewer's secret, so it is shown only where no widget can render (a
        terminal), not saved with a notebook's outputs.
        """
        src, _ = self.urls()
        if not src:
            return f"XProf: no runs in {self.logdir}"
        if self.context.has_widgets:
            return f"XProf viewer on 127.0.0.1:{self.viewer.port} (run {self.runs.value})"
        return f"XProf: {src}"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = compat.widget_bundle(self.box, **kwargs)
        bundle["text/plain"] = self.text()
        return bundle


def _run_label(run: _store.RunInfo) -> str:
    when = datetime.fromtimestamp(run.created).strftime("%H:%M:%S") if run.created else ""
    status = (run.metadata or {}).get("status")
    mark = " ✗" if status == "error" else ""
    return f"{run.name}{mark}  ({when})" if when else f"{run.name}{mark}"
