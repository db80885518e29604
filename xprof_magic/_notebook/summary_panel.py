"""The summary panel above the viewer: the summary of the run the viewer shows.

It is a display of its own, apart from the viewer's: replacing a pending summary then
renders the panel again, never the viewer's frame. The summary of the cell's own run comes
from the cell's display, through :meth:`SummaryPanel.show` (as the widget is built, and again
when the display shows); for any other run, the panel shows the summary saved beside it,
read and rendered once, when that run is selected (about 35 ms for a 30 MB run's on 2 cores).
"""

from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from xprof_magic._notebook import compat
from xprof_magic._present.run import SummaryPages
from xprof_magic._viewer.tool_pages import Window

__all__ = ["SummaryPanel"]


class SummaryPanel:
    """The summary of the selected run, in a collapsible panel, whole.

    No box of its own that would scroll inside the output (the summary folds its long tables
    itself).
    """

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.html = widgets.HTML()
        self.html.add_class("xprof-summary")
        self.panel = widgets.Accordion(children=[self.html], selected_index=0)
        self.panel.set_title(0, "Summary")
        self.panel.add_class("xprof-summary-panel")
        self._pages = SummaryPages(logdir, _missing)
        self._coming: set[str] = set()
        self._run: str | None = None
        self._lock = threading.Lock()

    def show(self, run: str, page: str, window: Window | None = None, coming: bool = False) -> None:
        """Show ``run``'s summary as HTML, and the timeline's seconds its verdict is about.

        The seconds are :meth:`~xprof_magic._analysis.Summary.verdict_window`'s. Shown at once if
        the viewer shows that run, else kept for when it does; ``coming``: a pending summary, whose
        window comes with the full one.
        """
        with self._lock:
            self._pages.give(run, page, window)
            (self._coming.add if coming else self._coming.discard)(run)
            if run == self._run:
                self.html.value = page

    def expect(self, run: str, window: Window | None, coming: bool = False) -> None:
        """``run``'s verdict window, known before its summary is shown.

        ``coming``: not known yet, it comes with the summary (a pending one's, finished apart),
        which :meth:`show` gives.
        """
        with self._lock:
            self._pages.give_window(run, window)
            if coming:
                self._coming.add(run)

    def coming(self, run: str | None) -> bool:
        """Whether ``run``'s window is still to come with its summary (:meth:`expect`)."""
        with self._lock:
            return run in self._coming

    def follow(self, run: str | None) -> None:
        """The viewer now shows ``run``: show its summary, given or saved."""
        with self._lock:
            self._run = run
            self.html.value = self._pages.page(run) if run is not None else ""

    def window(self, run: str | None) -> Window | None:
        """The seconds on ``run``'s timeline that its verdict is about (None: unknown)."""
        with self._lock:
            return self._pages.window(run) if run is not None else None

    def widget_bundle(self) -> dict[str, Any]:
        """The panel's widget part of a MIME bundle (the caller adds text and HTML)."""
        bundle = compat.widget_bundle(self.panel)
        bundle.pop("text/plain", None)
        return bundle


def _missing(run: str) -> str:
    name = html.escape(run)
    return f"<i>No summary of {name} yet: %xprof summary {name}</i>"
