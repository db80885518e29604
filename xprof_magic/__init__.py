"""xprof_magic: ``%%xprof`` profiles a notebook cell with XProf, labels included.

``%load_ext xprof_magic`` registers the magics. Loading is cheap: torch_xla is imported
only when a capture first needs it. Scripts use :func:`capture`, :func:`last` and
:func:`runs` with the same machinery.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from xprof_magic._capture import Capture, CaptureResult, capture, last
from xprof_magic._labels import label, step
from xprof_magic._store import RunInfo, runs
from xprof_magic._version import __version__

if TYPE_CHECKING:
    from xprof_magic._analysis import Summary
    from xprof_magic._analysis.diagnosis import Diagnosis

__all__ = [
    "Capture",
    "CaptureResult",
    "Diagnosis",
    "RunInfo",
    "__version__",
    "capture",
    "label",
    "last",
    "load_ipython_extension",
    "runs",
    "step",
    "summarize",
    "summary_text",
    "unload_ipython_extension",
]


def summarize(
    run: str | os.PathLike[str] | CaptureResult, logdir: str | os.PathLike[str] | None = None
) -> Summary:
    """The summary of a run: a :class:`CaptureResult`, a run folder, or a run's name in
    ``logdir`` (default ``$XPROF_MAGIC_LOGDIR``, else ``./xprof_logs``).

    The summary saved beside the run when there is one; else reads the whole timeline
    (seconds for a 100 MB capture) and saves the summary. Its fields (``diagnosis``: the
    bottleneck, where and the fix, a :class:`Diagnosis`; ``notes``, ``labels``,
    ``steps``, ``compiles``, ``device`` …) are plain values; :func:`summary_text` renders it
    as the magic prints it. Never raises for a damaged run: ``missing`` says what is absent.
    """
    from pathlib import Path

    from xprof_magic import _analysis, _store

    if isinstance(run, CaptureResult):
        folder = run.run_dir
    else:
        folder = Path(run)
        if not folder.is_dir() and os.sep not in str(run):
            folder = _store.run_path(
                _store.local_logdir(logdir) if logdir is not None else _store.default_logdir(),
                str(run),
            )
    return _analysis.summary_of(folder, budget_s=None)


def summary_text(summary: Summary) -> str:
    """A summary as plain text, as ``%xprof summary`` shows it in a terminal."""
    from xprof_magic import _analysis

    return _analysis.render_text(summary)


def __getattr__(name: str) -> Any:
    """``Diagnosis``, the type of ``summarize(run).diagnosis``, imported when first asked for
    (it lives with the analysis, which ``import xprof_magic`` does not load)."""
    if name == "Diagnosis":
        from xprof_magic._analysis.diagnosis import Diagnosis

        return Diagnosis
    raise AttributeError(f"module 'xprof_magic' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%xprof`` and ``%xprof`` (``%load_ext xprof_magic``)."""
    from xprof_magic._notebook.magic import XprofMagics

    ipython.register_magics(XprofMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics (``%unload_ext xprof_magic``)."""
    from xprof_magic._notebook.magic import XprofMagics

    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("xprof", None)
    ipython.magics_manager.registry.pop(XprofMagics.__name__, None)
