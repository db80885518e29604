"""A run under a marimo cell: its summary above XProf's page, with runs, tools and hosts.

marimo renders anywidget's widgets, not ipywidgets' own: a cell showing the Jupyter widget
gets "Jupyter widgets are not supported in marimo" (checked with marimo 0.25). So this view
is an :class:`anywidget.AnyWidget` with a few synced traits, drawn by ``view.js``: the runs
of the log directory (newest first), the run's tools (trace viewer first, those without
data named with the reason, as in Jupyter) and hosts, the summary's static HTML, and the
two URLs of the selection (the embedded page, the full UI for a new tab), the trace viewer
opened on the steps the verdict is about. A choice in the browser changes a trait; Python
answers with the new URLs, and the page changes its inner frame's address in place.

It says what the Jupyter widget says, in the same words (:mod:`xprof_magic._viewer.tool_pages`):
a tool with nothing for the run is one line in place of its page, a page whose loading
indicator has not gone after a while gets one line under it, and so does a page that draws
Google's charts where the browser cannot load them.

The page is XProf's own, served by the loopback viewer under its secret path
(:mod:`xprof_magic._viewer`), at ``http://127.0.0.1:<port>`` or through a proxy route
(``$XPROF_MAGIC_PROXY_URL``, or jupyter-server-proxy's on JupyterHub): marimo has no proxy
for other ports. Imports anywidget (and so ipywidgets and IPython), only when a run is
first shown.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from xprof_magic._backends.registry import DEFAULT_HEIGHT
from xprof_magic._present.run import SummaryPages, finish_apart, shown, viewer_said
from xprof_magic._runs import store as _store
from xprof_magic._viewer.app.inline import BUSY_MESSAGE
from xprof_magic._viewer.process import manager
from xprof_magic._viewer.process.client import (
    TRACE_VIEWER_TOOL,
    Viewer,
    ViewerError,
    locate,
    proxy_template,
    server_proxy_template,
)
from xprof_magic._viewer.process.route import route_notes, serve
from xprof_magic._viewer.survey import Survey, survey_tools
from xprof_magic._viewer.tool_pages import (
    BUSY_S,
    CHARTS_NOTE,
    CHARTS_URL,
    ROUTE_LINES,
    ToolLister,
    ToolSurveyor,
    Window,
    list_tools,
    notes,
    order_tools,
    page_urls,
    tool_label,
    uses_charts,
    wait_line,
)

if TYPE_CHECKING:
    from xprof_magic._analysis import Summary
    from xprof_magic._capture.plan import Options
    from xprof_magic._capture.result import CaptureResult
    from xprof_magic._viewer import ViewerStart

__all__ = ["SUMMARY_BUDGET_S", "RunView", "location", "view_of"]

"""Seconds on a run's timeline, from and to."""

SUMMARY_BUDGET_S = 1.0
"""The summary shown at once is read within this budget (the magic's); a bigger one is
finished in a process of its own and replaces it when ready."""
VIEWER_WAIT_S = 60.0
_HERE = Path(__file__).parent


def location(port: int, environ: Any = None) -> tuple[str, str]:
    """``(origin, prefix)`` of the viewer's port as the browser reaches it.

    A proxy route the user set, jupyter-server-proxy's on JupyterHub, else the loopback port
    itself.
    """
    environ = os.environ if environ is None else environ
    template = proxy_template(environ)
    if template is None and "JUPYTERHUB_SERVICE_PREFIX" in environ:
        template = server_proxy_template(environ)
    return locate(port, template)


class RunView(anywidget.AnyWidget):
    """The runs of one log directory, the selected one's summary, and its XProf page."""

    _esm = _HERE / "view.js"
    _css = _HERE / "view.css"
    runs = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)
    run = traitlets.Unicode("").tag(sync=True)
    tools = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)
    tool = traitlets.Unicode("").tag(sync=True)
    hosts = traitlets.List(traitlets.Unicode()).tag(sync=True)
    host = traitlets.Unicode("").tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)
    src = traitlets.Unicode("").tag(sync=True)
    full = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(DEFAULT_HEIGHT).tag(sync=True)
    refreshed = traitlets.Int(0).tag(sync=True)
    empty = traitlets.Unicode("").tag(sync=True)
    """The line in place of a tool that has nothing for the run ("": the page shows)."""
    under = traitlets.Unicode("").tag(sync=True)
    """A line under the page, about XProf's page itself (the survey's)."""
    wait = traitlets.Unicode("").tag(sync=True)
    """The line in place of the trace viewer while its window comes with a pending summary
    (the page is not loaded until it has come)."""
    busy = traitlets.Unicode("").tag(sync=True)
    """The line under a page still loading after ``notes["busy_ms"]``."""
    charts = traitlets.Bool(False).tag(sync=True)
    """The page draws with Google's charts (the note under it if they cannot load)."""
    surveyed = traitlets.Bool(False).tag(sync=True)
    """The selected run's tools are final: XProf has said which have data."""
    notes = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        viewer: Viewer | None,
        logdir: Path,
        run: str | None = None,
        *,
        height: int = DEFAULT_HEIGHT,
        summary_html: str | None = None,
        status: str = "",
        where: tuple[str, str] | None = None,
        window: Window | None = None,
        window_coming: bool = False,
        list_tools: ToolLister = list_tools,
        survey: ToolSurveyor = survey_tools,
    ) -> None:
        """The view of the runs in ``logdir``, ``run`` selected.

        Args:
            viewer: The one serving ``logdir`` (None: summaries only, ``status`` says why).
            where: Its ``(origin, prefix)`` for the browser (default: :func:`location`).
            summary_html: ``run``'s, when the caller has rendered it.
            window: The seconds on its timeline that its verdict is about, where the trace viewer
                opens.
            window_coming: The window comes with ``run``'s full summary (:meth:`show_summary`), and
                the trace viewer waits for it rather than open on the whole timeline first.
        """
        super().__init__(
            height=height,
            status=status,
            notes={
                "charts_note": CHARTS_NOTE,
                "charts_url": CHARTS_URL,
                "busy_type": BUSY_MESSAGE,
                "busy_ms": int(BUSY_S * 1000),
            },
        )
        self.viewer = viewer
        self.logdir = Path(logdir)
        self.logdir_key = str(self.logdir.resolve())
        self.where = where or (location(viewer.port) if viewer is not None else ("", ""))
        if viewer is not None:
            self.notes = {**self.notes, **route_notes(viewer, self.where), "lines": ROUTE_LINES}
            self.on_msg(self._on_msg)
        self._list_tools, self._survey = list_tools, survey
        self._tools: dict[str, list[str]] = {}
        self._surveys: dict[str, Survey] = {}
        self._pages = SummaryPages(self.logdir, _missing)
        if run and summary_html:
            self._pages.give(run, summary_html, window)
        elif run and window:
            self._pages.give_window(run, window)
        self._coming = {run} if run and window_coming else set()
        self._lock = threading.RLock()
        self._quiet = False
        self._asked = 0
        self._threads: list[threading.Thread] = []
        self.observe(self._on_run, names="run")
        self.observe(self._on_view, names=["tool", "host"])
        self.observe(lambda _: self.refresh_runs(), names="refreshed")
        self.refresh_runs(select=run)
        shown(self)

    def _on_msg(self, _: Any, content: Any, buffers: Any) -> None:
        """A request of the kernel route (``route_page.js``), answered from a thread of its own.

        Its own thread keeps marimo's kernel free while the viewer converts.
        """
        send = lambda c, b: self.send(c, buffers=b or None)  # noqa: E731
        threading.Thread(target=serve, args=(self.viewer, content, send), daemon=True).start()

    def refresh_runs(
        self, select: str | None = None, found: Sequence[_store.RunInfo] | None = None
    ) -> None:
        """List the runs again (``found``, else read now), keeping or moving to a selection."""
        found = _store.runs(self.logdir) if found is None else found
        with self._lock, self.hold_sync():
            names = [r.name for r in found]
            wanted = select or self.run
            self._quiet = True
            try:
                self.runs = [[r.name, _run_label(r)] for r in found]
                self.run = wanted if wanted in names else (names[0] if names else "")
            finally:
                self._quiet = False
            self._show_run()

    def _on_run(self, change: Any = None) -> None:
        if not self._quiet:
            with self._lock, self.hold_sync():
                self._show_run()

    def _show_run(self) -> None:
        run = self.run
        self._quiet = True
        try:
            if not run:
                self.tools, self.hosts, self.tool, self.host = [], [], "", ""
            else:
                self._offer(self._tools.get(run) or order_tools([TRACE_VIEWER_TOOL, self.tool]))
                hosts = list(_store.hosts(_store.run_path(self.logdir, run)))
                self.hosts = hosts
                self.host = self.host if self.host in hosts else (hosts[0] if hosts else "")
        finally:
            self._quiet = False
        self.summary = self._summary_of(run)
        if run and run not in self._tools and self.viewer is not None:
            self._ask_tools(run)
        self._point()

    def _offer(self, tools: list[str]) -> None:
        """The tool options, keeping the tool picked where the run has it.

        A tool without data for the run is named with the reason.
        """
        empty = self._surveys.get(self.run, Survey()).empty
        self.tools = [[t, tool_label(t, empty.get(t))] for t in tools]
        self.tool = self.tool if self.tool in tools else (tools[0] if tools else "")
        self.surveyed = self.run in self._surveys

    def _on_view(self, change: Any = None) -> None:
        if not self._quiet:
            with self._lock:
                self._point()

    def _point(self) -> None:
        """The URLs of the selection: the page the view embeds and the one a new tab opens."""
        if self.viewer is None or not self.run:
            self.src = self.full = self.empty = self.wait = self.under = ""
            self.charts = False
            return
        survey = self._surveys.get(self.run)
        tool, host = self.tool or TRACE_VIEWER_TOOL, self.host or None
        window = self._pages.window(self.run)
        # Set before the address: a page that waits is never loaded on the address without.
        self.wait = wait_line(tool, self.run in self._coming)
        self.src, self.full = page_urls(
            self.viewer, self.run, tool, host, self.where, survey, window
        )
        name, reason = tool_label(tool), (survey or Survey()).empty.get(tool, "")
        said = {k: v.replace("{name}", name) for k, v in notes(bool(self.full)).items()}
        self.empty = said["empty"].replace("{reason}", reason) if reason else ""
        self.under = "" if reason else (survey or Survey()).said.get(tool, "")
        self.busy, self.charts = said["busy"], uses_charts(tool)

    def _ask_tools(self, run: str) -> None:
        """Ask the viewer for the run's tools in a thread (seconds on a big run).

        The trace viewer is offered meanwhile, and the answer replaces it unless the person moved
        on.
        """
        self._asked += 1
        thread = threading.Thread(
            target=self._take_tools, args=(run, self._asked), name="xprof-view-tools", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _take_tools(self, run: str, ticket: int) -> None:
        assert self.viewer is not None
        try:
            tools = order_tools(self._list_tools(self.viewer, run))
        except ViewerError as error:
            with self._lock:
                self.status = str(error)
            return
        self._show_tools(run, ticket, tools, None)
        if tools:
            survey = self._survey(self.viewer, run, tools, _store.run_path(self.logdir, run))
            self._show_tools(run, ticket, sorted(tools, key=lambda t: t in survey.empty), survey)

    def _show_tools(self, run: str, ticket: int, tools: list[str], survey: Survey | None) -> None:
        with self._lock, self.hold_sync():
            if survey is not None:
                self._tools[run], self._surveys[run] = tools, survey
            if ticket != self._asked or run != self.run or not tools:
                return
            self._quiet = True
            try:
                self._offer(tools)
            finally:
                self._quiet = False
            self._point()

    def wait_for_tools(self, timeout: float = 30.0) -> bool:
        """Block until the tool lists asked for so far have come (tests, scripts)."""
        for thread in list(self._threads):
            thread.join(timeout)
        return not any(t.is_alive() for t in self._threads)

    def show_summary(self, summary: Summary) -> None:
        """Show a run's summary, at once if that run is selected, else when it is.

        The trace viewer opens on its verdict's steps (one that waited for them opens now).
        """
        from xprof_magic._analysis import render_html

        page = render_html(summary)
        with self._lock, self.hold_sync():
            self._pages.give(summary.run, page, summary.verdict_window())
            self._coming.discard(summary.run)
            if summary.run == self.run:
                self.summary = page
                self._point()

    def _summary_of(self, run: str) -> str:
        """The panel's HTML for ``run``: the summary given or saved, rendered once."""
        if not run:
            return f"<i>No runs in {html.escape(str(self.logdir))} yet.</i>"
        return self._pages.page(run)


def _missing(run: str) -> str:
    name = html.escape(run)
    return f"<i>No summary of {name} yet: xprof_magic.summarize({name!r})</i>"


def _run_label(run: _store.RunInfo) -> str:
    when = datetime.fromtimestamp(run.created).strftime("%H:%M:%S") if run.created else ""
    mark = " ✗" if (run.metadata or {}).get("status") == "error" else ""
    return f"{run.name}{mark}  ({when})" if when else f"{run.name}{mark}"


def view_of(result: CaptureResult, options: Options, start: ViewerStart | None) -> RunView:
    """The view of a stored run: its summary now, and the viewer, waited for up to a minute.

    A big summary finishes apart and replaces it. The viewer is ``start``, else begun now; a
    failed one is one line in the view.
    """
    from xprof_magic import _analysis

    start = start or manager.begin_viewer(
        result.logdir, port=options.viewer_port, kind=options.viewer
    )
    summary = _analysis.summary_of(result.run_dir, budget_s=SUMMARY_BUDGET_S)
    viewer, status = viewer_said(start.wait(timeout=VIEWER_WAIT_S))
    view = RunView(
        viewer,
        result.logdir,
        result.run,
        height=options.height,
        summary_html=_analysis.render_html(summary),
        status=status,
        window=summary.verdict_window(),
        window_coming=summary.pending,
    )
    if summary.pending:
        finish_apart(result.run_dir, view.show_summary, name="xprof-view-summary")
    return view
