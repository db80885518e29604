"""What a profiled cell shows: the summary, and the viewer widget when one can render.

Each display is one MIME bundle: the widget where widgets render, static HTML of the summary
where they do not (a saved notebook, nbconvert, GitHub), and text/plain for terminals. A
summary too big for the cell's time budget is finished in a process of its own, and the
display is updated in place when it is ready.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from IPython.display import DisplayHandle, display

from xprof_magic import _analysis, _store
from xprof_magic._analysis import Summary
from xprof_magic._result import PROTOBUF_LIMIT_BYTES

__all__ = [
    "SUMMARY_BUDGET_S",
    "CellDisplay",
    "finish_summary",
    "full_summary",
    "summary_bundle",
    "summary_now",
    "waits_for_updates",
]

# The summary shown when the cell ends is read in the kernel within this budget: about
# 20 MB of timeline on a busy 2-core machine (bench: 10 MB in 0.3-0.5 s); a bigger one is
# shown from the metadata first and finished in a process of its own.
SUMMARY_BUDGET_S = 1.0
# Protobuf cannot parse a message over 2 GiB: such a timeline cannot be read at all.
FULL_SUMMARY_MAX_BYTES = PROTOBUF_LIMIT_BYTES - 1


def too_big(run_dir: Path) -> int | None:
    """The timeline's size when it is too large to read for a summary, else None."""
    size = _store.xplane_bytes(run_dir)
    return size if size > FULL_SUMMARY_MAX_BYTES else None


def metadata_only(run_dir: Path, size: int) -> Summary:
    """A summary from the metadata alone, saying why the timeline was not read."""
    quick = _analysis.summarize(run_dir, budget_s=0.0)
    reason = (
        f"the timeline ({size / 2**20:.0f} MB) is too large to read: protobuf cannot parse "
        "a message over 2 GB, so labels, steps and the backend's metrics come from the "
        "capture's metadata; profile fewer steps next time (--steps A:B traces only a window)"
    )
    return replace(quick, pending=False, missing=(*quick.missing, reason))


def full_summary(run_dir: Path) -> Summary:
    """The complete summary, saved beside the capture; big ones read in a process of their own."""
    saved = _analysis.load_summary(run_dir)
    if saved is not None and not saved.pending:
        return saved
    size = too_big(run_dir)
    if size is not None:
        return metadata_only(run_dir, size)
    if _analysis.estimate_read_s(run_dir) > SUMMARY_BUDGET_S:
        saved, _ = _analysis.summarize_in_subprocess(run_dir)
        if saved is not None:
            return saved
    summary = _analysis.summarize(run_dir, budget_s=None)
    if summary.complete:
        with contextlib.suppress(OSError):
            _analysis.save_summary(summary, run_dir)
    return summary


def summary_now(run_dir: Path, budget_s: float | None = None) -> Summary:
    """The saved summary, or one read within ``budget_s`` (default :data:`SUMMARY_BUDGET_S`),
    or a quick one marked pending."""
    budget_s = SUMMARY_BUDGET_S if budget_s is None else budget_s
    saved = _analysis.load_summary(run_dir)
    if saved is not None and saved.complete:
        return saved
    size = too_big(run_dir)
    if size is not None:
        return metadata_only(run_dir, size)
    summary = _analysis.summarize(run_dir, budget_s=budget_s)
    if summary.complete:
        with contextlib.suppress(OSError):
            _analysis.save_summary(summary, run_dir)
    return summary


def finish_summary(run_dir: Path, on_ready: Callable[[Summary], None]) -> threading.Thread:
    """Read the whole timeline in a subprocess; call ``on_ready`` from a thread when done."""

    def work() -> None:
        summary, reason = _analysis.summarize_in_subprocess(run_dir)
        if summary is None:
            summary = _analysis.summarize(run_dir, budget_s=0.0)
            print(f"xprof: the full summary of {run_dir.name} failed: {reason}")
        on_ready(summary)

    thread = threading.Thread(target=work, name="xprof-summary", daemon=True)
    thread.start()
    return thread


def summary_bundle(summary: Summary, extra_text: str = "") -> dict[str, Any]:
    """text/plain and static text/html of a summary."""
    text = _analysis.render_text(summary)
    page = _analysis.render_html(summary)
    if summary.pending:
        text += f"\n(summary pending: the full one replaces this; %xprof summary {summary.run})"
        page += "<p><i>Summary pending: the full one replaces this when ready.</i></p>"
    return {"text/plain": text + extra_text, "text/html": page}


class CellDisplay:
    """What shows under one cell, and the in-place update when a pending summary is ready.

    With widgets, the summary (its panel, with static HTML and text as fallbacks) and the
    viewer are two displays, and only the summary's is updated: updating a display renders it
    again, and the viewer's iframe would load XProf a second time.
    """

    def __init__(self, summary: Summary, view: Any = None, widgets: bool = False) -> None:
        self.summary = summary
        self.view = view
        self.widgets = widgets and view is not None
        self.handle: DisplayHandle | None = None

    def bundle(self) -> dict[str, Any]:
        """The summary's bundle; without widgets, it also says where the viewer is."""
        if not self.widgets:
            extra_text = f"\n{self.view.text()}" if self.view is not None else ""
            return summary_bundle(self.summary, extra_text)
        self.view.show_summary(self.summary)
        data = summary_bundle(self.summary)
        data.update(self.view.summary_widget_bundle())
        return data

    def show(self) -> None:
        self.handle = display(self.bundle(), raw=True, display_id=True)
        if self.widgets:
            display(self.view.widget_bundle(), raw=True)
            if self.view.context.kind == "colab":
                from xprof_magic._notebook import colab

                colab.display_frame(self.view)

    def update(self, summary: Summary) -> None:
        self.summary = summary
        if self.handle is not None:
            self.handle.update(self.bundle(), raw=True)


def waits_for_updates(shell: Any) -> bool:
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


def report(shell: Any, result: Any, start: Any, logdir: Path, height: int) -> None:
    """The text summary, then the summary and viewer display; never fails the cell."""
    if result is None:
        return
    try:
        print(result.text())
        _widget().announce(logdir)
        if start is not None:
            show_run(shell, start, logdir, result.run, height)
    except Exception as error:
        print(f"xprof: the run was stored, but showing it failed: {error!r}")


def show_run(shell: Any, start: Any, logdir: Path, run: str, height: int) -> None:
    """The summary and the viewer under the cell; a pending summary updates in place."""
    from xprof_magic._notebook.context import detect
    from xprof_magic._viewer import manager

    run_dir = _store.run_path(logdir, run)
    summary = summary_now(run_dir)
    if summary.pending and not waits_for_updates(shell):
        summary = full_summary(run_dir)
    outcome = start.wait(timeout=VIEWER_WAIT_S)
    view = None
    context = detect(shell)
    if isinstance(outcome, manager.Failed):
        print(f"xprof: no viewer: {outcome.message}")
    else:
        if isinstance(outcome, manager.Restarted | manager.Launched):
            print(f"xprof: {outcome.message} Stop it with %xprof viewer stop.")
        view = _widget().ViewerWidget(outcome.viewer, context, logdir, run=run, height=height)
    shown = CellDisplay(summary, view, widgets=context.has_widgets)
    shown.show()
    if summary.pending and context.has_widgets:
        finish_summary(run_dir, shown.update)


def _widget() -> Any:
    """The widget module, imported on first display: ipywidgets is not needed to load."""
    from xprof_magic._notebook import widget

    return widget
