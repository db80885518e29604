"""xprof_magic: ``%%xprof`` profiles a notebook cell with XProf, labels included.

``%load_ext xprof_magic`` registers the magics. Loading is cheap: the public names below
are imported on first use (PEP 562), so the extension costs no more than the magic's
options, and torch_xla or JAX only when a capture first needs one. Scripts use
:func:`capture`, :func:`last` and :func:`runs` with the same machinery; marimo, which runs
no magics, uses :func:`profile` (a decorator or a ``with`` block), whose :class:`Run`
displays itself.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from xprof_magic._version import __version__

if TYPE_CHECKING:
    from xprof_magic._analysis import Summary
    from xprof_magic._analysis.model.diagnosis import Diagnosis
    from xprof_magic._analysis.render.headline import said
    from xprof_magic._capture.capture import Capture, CaptureResult, capture, last
    from xprof_magic._cell.labels import label, step
    from xprof_magic._marimo.profile import profile
    from xprof_magic._marimo.run import Run
    from xprof_magic._runs.store import RunInfo, runs

# Each public name and the module that defines it.
_LAZY = {
    "Capture": "xprof_magic._capture.capture",
    "Diagnosis": "xprof_magic._analysis.model.diagnosis",
    "CaptureResult": "xprof_magic._capture.capture",
    "capture": "xprof_magic._capture.capture",
    "last": "xprof_magic._capture.capture",
    "label": "xprof_magic._cell.labels",
    "profile": "xprof_magic._marimo.profile",
    "said": "xprof_magic._analysis.render.headline",
    "Run": "xprof_magic._marimo.run",
    "step": "xprof_magic._cell.labels",
    "RunInfo": "xprof_magic._runs.store",
    "runs": "xprof_magic._runs.store",
}

__all__ = [
    "Capture",
    "CaptureResult",
    "Diagnosis",
    "Run",
    "RunInfo",
    "__version__",
    "capture",
    "label",
    "last",
    "load_ipython_extension",
    "profile",
    "runs",
    "said",
    "step",
    "summarize",
    "summary_text",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    """The public names of :data:`_LAZY`, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xprof_magic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def summarize(
    run: str | os.PathLike[str] | CaptureResult, logdir: str | os.PathLike[str] | None = None
) -> Summary:
    """The summary of a run: a :class:`CaptureResult`, a run folder, or a run's name in ``logdir``.

    ``logdir`` defaults to ``$XPROF_MAGIC_LOGDIR``, else ``./xprof_logs``.

    The summary saved beside the run when there is one; else reads the whole timeline (seconds for a
    100 MB capture) and saves the summary. Its fields (``diagnosis``: the bottleneck, where and the
    fix as figures, a :class:`Diagnosis`; ``labels``, ``steps``, ``compiles``, ``device`` …) are
    plain values; :func:`said` gives its verdict in words (headline, fix, evidence) and
    :func:`summary_text` renders it as the magic prints it. Never raises for a damaged run:
    ``missing`` says what is absent.
    """
    from pathlib import Path

    from xprof_magic import _analysis
    from xprof_magic._capture.capture import CaptureResult
    from xprof_magic._runs import store as _store

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
    """A summary as plain text, as ``%xprof summary`` shows it in a terminal.

    It is the text renderer a summary's own display uses (a summary shows itself as a cell's value).
    """
    from xprof_magic._analysis.render.text import render_text

    return render_text(summary)


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
