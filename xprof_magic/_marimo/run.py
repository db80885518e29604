"""A profiled call or block as its caller sees it: the :class:`Run` that displays itself.

In marimo the run is a cell's output: ``_display_`` gives the view of :mod:`.view`
(imported then, with anywidget). Elsewhere it shows as the summary's static HTML, or as
the short text the magic prints. IPython-free, marimo-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xprof_magic._capture import plan as _plan
from xprof_magic._present import run as _present

if TYPE_CHECKING:
    from xprof_magic._analysis import Summary
    from xprof_magic._capture.plan import Options
    from xprof_magic._capture.result import CaptureResult
    from xprof_magic._viewer import ViewerStart

__all__ = ["Run", "announce"]


class Run:
    """One profiled call or block: its capture's result, shown as the magic shows a cell.

    In marimo, end a cell with it: the verdict and summary, the per-step chart, a runs
    dropdown and XProf's trace viewer inline, with a link to open it in a new tab. ``result``
    is the :class:`~xprof_magic.CaptureResult` (None while running, or when nothing was
    stored); ``summary`` the run's full summary.
    """

    def __init__(self, plan: _plan.Plan, options: Options, viewer: ViewerStart | None) -> None:
        self.plan = plan
        self.options = options
        self.viewer = viewer
        self.result: CaptureResult | None = None
        self._summary: Summary | None = None
        self._view: Any = None

    @property
    def name(self) -> str:
        return self.result.run if self.result is not None else self.plan.name or ""

    @property
    def summary(self) -> Summary | None:
        """The run's summary (read whole the first time: seconds for 100 MB), or None."""
        if self.result is None:
            return None
        if self._summary is None or self._summary.pending:
            from xprof_magic import _analysis

            self._summary = _analysis.summary_of(self.result.run_dir, budget_s=None)
        return self._summary

    def text(self) -> str:
        """The short text the magic prints under a cell."""
        if self.result is None:
            return f"xprof: run {self.plan.name} stored nothing (see the messages above)"
        return self.result.text()

    def _display_(self) -> Any:
        """marimo's display protocol: the run's view (built once).

        Without anywidget, the summary and how to get the rest.
        """
        if self.result is None:
            return _Html(self._repr_html_())
        if self._view is None:
            try:
                from xprof_magic._marimo import view
            except ImportError as error:
                return _Html(
                    f"{self._repr_html_()}<p><i>xprof: the runs and XProf need anywidget "
                    f"({error}): pip install anywidget</i></p>"
                )
            self._view = view.view_of(self.result, self.options, self.viewer)
        return self._view

    def _repr_html_(self) -> str:
        """Outside marimo: the summary as static HTML (no viewer, no secret in the page)."""
        summary = self.summary
        if summary is None:
            from html import escape

            return f"<pre>{escape(self.text())}</pre>"
        from xprof_magic import _analysis

        return _analysis.render_html(summary)

    def __repr__(self) -> str:
        return self.text()


def announce(run: Run) -> None:
    """Tell the views shown lately that a run was stored."""
    if run.result is not None:
        _present.announce(run.result.logdir)


class _Html:
    """Static HTML for marimo's display protocol."""

    def __init__(self, page: str) -> None:
        self.page = page

    def _mime_(self) -> tuple[str, str]:
        return "text/html", self.page
