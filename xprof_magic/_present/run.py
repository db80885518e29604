"""What the Jupyter and marimo fronts do alike with a finished run.

The viewer's outcome said in one line, a pending summary finished in a process of its own, each
run's summary page (with its verdict's window), given or saved beside the run and rendered once, and
the views shown lately told of a new run. Each front keeps only its display calls.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from xprof_magic._runs import store as _store
from xprof_magic._units import wrapped
from xprof_magic._viewer.process import manager
from xprof_magic._viewer.tool_pages import Window

if TYPE_CHECKING:
    from xprof_magic._analysis import Summary
    from xprof_magic._viewer import Viewer

__all__ = [
    "LIVE_VIEWS",
    "Shown",
    "SummaryPages",
    "announce",
    "finish_apart",
    "shown",
    "viewer_said",
]


def viewer_said(outcome: manager.ViewerOutcome) -> tuple[Viewer | None, str]:
    """The viewer a start came to (None: it failed), and the line to say of it.

    The line is "" when there is nothing to say: a viewer found running.
    """
    if isinstance(outcome, manager.Failed):
        return None, f"xprof: no viewer: {outcome.message}"
    if isinstance(outcome, manager.Restarted | manager.Launched):
        return outcome.viewer, f"xprof: {outcome.message}"
    return outcome.viewer, ""


def finish_apart(
    run_dir: Path, on_ready: Callable[[Summary], None], name: str = "xprof-summary"
) -> threading.Thread:
    """Read the whole timeline in a process of its own; call ``on_ready`` from a thread when done.

    ``on_ready`` is called whatever happens (a failure is said, and the metadata's summary given).
    """

    def work() -> None:
        from xprof_magic import _analysis

        try:
            with _store.working(run_dir):
                summary, reason = _analysis.summarize_in_subprocess(run_dir)
        except Exception as error:  # on_ready is called whatever happens: the display waits
            summary, reason = None, repr(error)
        if summary is None:
            summary = _analysis.summary_of(run_dir, budget_s=0.0)
            print(wrapped(f"xprof: the full summary of {run_dir.name} failed: {reason}"))
        on_ready(summary)

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread


class SummaryPages:
    """Each run's summary as static HTML, and its verdict's window.

    The window is the timeline's seconds the trace viewer opens on. Given by the front for its own
    run, else the summary saved beside the run, rendered once (a millisecond or two). ``missing``
    says, in the front's words, how to get the summary of a run that has none saved yet.
    """

    def __init__(self, logdir: Path, missing: Callable[[str], str]) -> None:
        self.logdir = Path(logdir)
        self.missing = missing
        self._pages: dict[str, str] = {}
        self._windows: dict[str, Window | None] = {}
        self._lock = threading.RLock()

    def give(self, run: str, page: str, window: Window | None = None) -> None:
        """``run``'s page, rendered by the caller, and its window."""
        with self._lock:
            self._pages[run] = page
            self._windows[run] = window

    def give_window(self, run: str, window: Window | None) -> None:
        """``run``'s window, known before its page."""
        with self._lock:
            self._windows[run] = window

    def has(self, run: str) -> bool:
        with self._lock:
            return run in self._pages

    def page(self, run: str) -> str:
        """``run``'s page: given, else saved (rendered now, once), else the ``missing`` line."""
        with self._lock:
            page = self._pages.get(run)
            if page is not None:
                return page
            from xprof_magic import _analysis

            saved = _analysis.load_summary(_store.run_path(self.logdir, run))
            if saved is None:
                return self.missing(run)
            page = self._pages[run] = _analysis.render_html(saved)
            self._windows[run] = saved.verdict_window()
            return page

    def window(self, run: str) -> Window | None:
        """``run``'s window (its saved summary read for it where none was given)."""
        with self._lock:
            if run not in self._pages and run not in self._windows:
                self.page(run)
            return self._windows.get(run)


class Shown(Protocol):
    """A view under a cell that lists a log directory's runs: what :func:`announce` needs of it.

    The Jupyter widget, or marimo's view.
    """

    logdir_key: str

    def refresh_runs(self, *, found: list[_store.RunInfo] | None = None) -> Any: ...


LIVE_VIEWS = 16
"""The views kept up to date, the newest: the frontends keep every cell's output alive, and
refreshing them all would cost more with every cell."""
_live: collections.deque[Shown] = collections.deque(maxlen=LIVE_VIEWS)


def shown(view: Shown) -> None:
    """``view`` is under a cell now: :func:`announce` tells it of new runs."""
    _live.append(view)


def announce(logdir: Path) -> list[_store.RunInfo] | None:
    """A run was stored in ``logdir``: the views shown lately for it list it.

    The runs are listed once for all of them, and returned for the next view (None: no view was
    there to tell, and nothing was listed).
    """
    key = str(Path(logdir).resolve())
    views = [view for view in list(_live) if view.logdir_key == key]
    if not views:
        return None
    found = _store.runs(logdir)
    for view in views:
        with contextlib.suppress(Exception):  # a view whose cell ran again is closed
            view.refresh_runs(found=found)
    return found
