"""What a profiled cell shows: the summary, and the viewer widget when one can render.

Each display is one MIME bundle: the widget where widgets render, static HTML of the summary
where they do not (a saved notebook, nbconvert, GitHub), and text/plain for terminals. A
summary too big for the cell's time budget is finished in a process of its own, and the
display is updated in place when it is ready.

Only a widget shown imports ipywidgets (:mod:`.widget`): a terminal gets the text and the
viewer's URL, ``--no-display`` and the line commands need no widget library, and a notebook
without ipywidgets gets the static summary and one line saying how to have the viewer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from IPython.display import DisplayHandle, display

from xprof_magic._present.run import announce, finish_apart, viewer_said
from xprof_magic._units import wrapped

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from xprof_magic._analysis import Summary
    from xprof_magic._capture.result import CaptureResult
    from xprof_magic._notebook.context import Context
    from xprof_magic._notebook.widget import ViewerWidget
    from xprof_magic._runs.store import RunInfo
    from xprof_magic._viewer.process.client import Viewer
    from xprof_magic._viewer.process.manager import ViewerStart

__all__ = [
    "SUMMARY_BUDGET_S",
    "CellDisplay",
    "Rendered",
    "kept_rendered",
    "remember",
    "report",
    "show_run",
    "summary_bundle",
    "summary_now",
    "viewer_line",
    "waits_for_updates",
]

# The summary shown when the cell ends is read in the kernel within this budget: about
# 20 MB of timeline on a busy 2-core machine (bench: 10 MB in 0.3-0.5 s); a bigger one is
# shown from the metadata first and finished in a process of its own.
SUMMARY_BUDGET_S = 1.0


@dataclass(frozen=True)
class Rendered:
    """A summary rendered once: the text and the static HTML that all its displays use."""

    summary: Summary
    text: str
    page: str

    @classmethod
    def of(cls, summary: Summary) -> Rendered:
        """The summary as it displays itself: its own text and static HTML."""
        shown = summary._repr_mimebundle_()
        return cls(summary, shown["text/plain"], shown["text/html"])

    def bundle(self, extra_text: str = "") -> dict[str, Any]:
        """text/plain and static text/html; a pending summary says the full one follows."""
        text, page = self.text, self.page
        if self.summary.pending:
            text += (
                "\n(summary pending: the full one replaces this; "
                f"%xprof summary {self.summary.run})"
            )
            page += "<p><i>Summary pending: the full one replaces this when ready.</i></p>"
        return {"text/plain": text + extra_text, "text/html": page}


KEPT_RUNS = 4
"""The rendered summaries a kernel keeps (:func:`remember`): its newest runs'."""
_kept: OrderedDict[str, tuple[tuple[int, int, int], Rendered]] = OrderedDict()
_kept_lock = threading.Lock()


def _saved_stamp(run_dir: Path) -> tuple[int, int, int] | None:
    """The saved summary file's inode, size and time, or None where there is none."""
    from xprof_magic._runs.store import SUMMARY_FILE

    try:
        found = (Path(run_dir) / SUMMARY_FILE).stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def remember(rendered: Rendered, run_dir: Path) -> None:
    """Keep a complete summary, rendered, for the next display of its run in this kernel.

    ``%xprof view RUN`` after the cell that captured it read the saved summary and rendered it
    again before anything showed: 0.04 to 0.06 s for a 30 MB run on a 2-core machine, more on
    a busy one. Only a complete summary already saved beside its run is kept, under that
    file's inode, size and time, so that a summary saved since (the run captured again, a
    newer version's) is read.
    """
    if not rendered.summary.complete or rendered.summary.pending:
        return
    stamp = _saved_stamp(run_dir)
    if stamp is None:
        return
    with _kept_lock:
        _kept[str(Path(run_dir).absolute())] = (stamp, rendered)
        _kept.move_to_end(str(Path(run_dir).absolute()))
        while len(_kept) > KEPT_RUNS:
            _kept.popitem(last=False)


def kept_rendered(run_dir: Path) -> Rendered | None:
    """The summary :func:`remember` kept for ``run_dir``, if its saved file is still the same."""
    with _kept_lock:
        found = _kept.get(str(Path(run_dir).absolute()))
    if found is None or found[0] != _saved_stamp(run_dir):
        return None
    return found[1]


def summary_bundle(summary: Summary) -> dict[str, Any]:
    """text/plain and static text/html of a summary."""
    return Rendered.of(summary).bundle()


class CellDisplay:
    """What shows under one cell, and the in-place update when a pending summary is ready.

    With widgets, the summary (its panel, with static HTML and text as fallbacks) and the
    viewer are two displays, and only the summary's is updated: updating a display renders it
    again, and the viewer's iframe would load XProf a second time. The summary reaches the
    widget one way: :meth:`ViewerWidget.show_summary`, from :meth:`bundle`.
    """

    def __init__(
        self,
        rendered: Rendered,
        view: ViewerWidget | None = None,
        widgets: bool = False,
        where: str = "",
    ) -> None:
        """``where``: where the viewer is, in words, for a display without a widget."""
        self.rendered = rendered
        self.view = view
        self.widgets = widgets and view is not None
        self.where = where
        self.handle: DisplayHandle | None = None
        self.final = False

    def bundle(self) -> dict[str, Any]:
        """The summary's bundle; without widgets, it also says where the viewer is."""
        if self.view is None or not self.widgets:
            return self.rendered.bundle(f"\n{self.where}" if self.where else "")
        summary = self.rendered.summary
        window = summary.verdict_window()
        # A pending summary's window comes with the one that replaces it (final: that one,
        # even when reading the timeline failed and it is still the metadata's).
        coming = summary.pending and not self.final
        self.view.show_summary(summary.run, self.rendered.page, window, coming)
        data = self.rendered.bundle()
        data.update(self.view.summary_widget_bundle())
        return data

    def show(self) -> None:
        self.handle = display(self.bundle(), raw=True, display_id=True)
        if self.view is not None and self.widgets:
            display(self.view.widget_bundle(), raw=True)
            self.view.page_frame.display()

    def update(self, summary: Summary) -> None:
        """Show the summary that replaces a pending one (the last: nothing follows it)."""
        self.final = True
        self.rendered = Rendered.of(summary)
        remember(self.rendered, Path(summary.run_dir))
        if self.handle is not None:
            self.handle.update(self.bundle(), raw=True)


def waits_for_updates(shell: InteractiveShell | None) -> bool:
    """Whether the client that ran this cell still listens once the cell has ended.

    nbclient (and so nbconvert and papermill) reads a cell's messages only until the kernel is
    idle again, so a summary finished later never reaches the saved notebook. It is told apart
    by its requests: it sends them with ``allow_stdin`` false, since no one is there to type,
    where JupyterLab, Notebook, VS Code and Colab allow ``input()``. A client wrongly taken
    for a batch one only waits for its summary at the cell's end.
    """
    kernel = getattr(shell, "kernel", None)
    if kernel is None or not hasattr(kernel, "get_parent"):
        return True
    try:
        request = kernel.get_parent("shell")
    except Exception:
        return True
    content = request.get("content") if isinstance(request, dict) else None
    return not (isinstance(content, dict) and content.get("allow_stdin") is False)


VIEWER_WAIT_S = 60.0
NO_WIDGETS = (
    "xprof: the viewer is not shown under the cell without ipywidgets (pip install "
    "ipywidgets); XProf serves this log directory on 127.0.0.1:{port}"
)
"""Said once per kernel where widgets would render but ipywidgets cannot be imported."""
_said_no_widgets = threading.Event()


def _widgets() -> ModuleType | None:
    """The widget module (it imports ipywidgets), or None where ipywidgets is missing."""
    try:
        from xprof_magic._notebook import widget
    except ImportError:
        return None
    return widget


def viewer_line(
    viewer: Viewer, context: Context, run_dir: Path, window: tuple[float, float] | None = None
) -> str:
    """Where to look where no widget renders (a terminal): the run's trace viewer's URL.

    The URL is the one the browser reaches, opened on the steps its verdict is about
    (``window``). It carries the viewer's secret, so it is said only there, never in a notebook's
    outputs.
    """
    from xprof_magic._runs import store as _store
    from xprof_magic._viewer.tool_pages import page_urls

    hosts = _store.hosts(run_dir)
    location = context.locate(viewer.port)
    src, _ = page_urls(
        viewer, run_dir.name, None, hosts[0] if hosts else None, location, window=window
    )
    return f"XProf: {src}"


def report(
    shell: InteractiveShell | None,
    result: CaptureResult | None,
    start: ViewerStart | None,
    logdir: Path,
    height: int,
) -> None:
    """The text summary, then the summary and viewer display; never fails the cell.

    Where the summary is shown, the text leaves the labelled blocks to it (its table has the
    timeline's times), so each block is said once under the cell.
    """
    if result is None:
        return
    summary = None
    try:
        if start is not None:
            summary = summary_now(shell, result.run_dir)
    except Exception as error:
        print(wrapped(f"xprof: the summary of {result.run} failed: {error!r}"))
    try:
        print(result.text(blocks=summary is None))
        found = announce(logdir)
        if start is not None:
            show_run(shell, start, logdir, result.run_dir, height, found=found, summary=summary)
    except Exception as error:
        print(wrapped(f"xprof: the run was stored, but showing it failed: {error!r}"))


def summary_now(shell: InteractiveShell | None, run_dir: Path) -> Summary:
    """The summary shown under the cell, read within :data:`SUMMARY_BUDGET_S` or whole.

    A bigger one comes from the metadata and is finished later; it is read whole at once for a
    client that stops listening when the cell ends.
    """
    from xprof_magic import _analysis
    from xprof_magic._runs import store as _store

    with _store.working(run_dir):
        return _analysis.summary_of(
            run_dir, budget_s=SUMMARY_BUDGET_S, apart=not waits_for_updates(shell)
        )


def show_run(
    shell: InteractiveShell | None,
    start: ViewerStart,
    logdir: Path,
    run_dir: Path,
    height: int,
    *,
    found: Sequence[RunInfo] | None = None,
    summary: Summary | None = None,
) -> None:
    """Show the summary of ``run_dir`` and the viewer of ``logdir`` under the cell.

    The summary is ``summary``, else the one this kernel last showed of the run
    (:func:`kept_rendered`), else read now (:func:`summary_now`); the viewer's runs are
    ``found``, when the caller has listed them. A pending summary updates in place.
    """
    from xprof_magic._notebook.context import detect

    rendered = None if summary is not None else kept_rendered(run_dir)
    if rendered is None:
        rendered = Rendered.of(summary or summary_now(shell, run_dir))
        remember(rendered, run_dir)
    outcome = start.wait(timeout=VIEWER_WAIT_S)
    view, where = None, ""
    context = detect(shell)
    widget = _widgets() if context.has_widgets else None
    viewer, said = viewer_said(outcome)
    if said:
        stop = " Stop it with %xprof viewer stop." if viewer is not None else ""
        print(wrapped(said + stop))
    if viewer is not None:
        window = rendered.summary.verdict_window()
        if widget is not None:
            view = widget.ViewerWidget(
                viewer,
                context,
                logdir,
                run=run_dir.name,
                height=height,
                frame=context.frame(viewer, height),
                found=found,
                window=window,
                window_coming=rendered.summary.pending,
                summary_page=rendered.page,
            )
        elif context.has_widgets:
            if not _said_no_widgets.is_set():
                _said_no_widgets.set()
                print(wrapped(NO_WIDGETS.format(port=viewer.port)))
        else:
            where = viewer_line(viewer, context, run_dir, window)
    shown = CellDisplay(rendered, view, widgets=view is not None, where=where)
    shown.show()
    if rendered.summary.pending and view is not None:
        finish_apart(run_dir, shown.update)
