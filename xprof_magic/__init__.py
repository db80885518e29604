"""xprof_magic: ``%%xprof`` profiles a notebook cell with XProf, labels included.

``%load_ext xprof_magic`` registers the magics. Loading is cheap: torch_xla is imported
only when a capture first needs it. Scripts use :func:`capture`, :func:`last` and
:func:`runs` with the same machinery.
"""

from __future__ import annotations

from typing import Any

from xprof_magic._capture import Capture, CaptureResult, capture, last
from xprof_magic._labels import label, step
from xprof_magic._store import RunInfo, runs
from xprof_magic._version import __version__

__all__ = [
    "Capture",
    "CaptureResult",
    "RunInfo",
    "__version__",
    "capture",
    "label",
    "last",
    "load_ipython_extension",
    "runs",
    "step",
    "unload_ipython_extension",
]


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
