"""The viewer: one loopback XProf (or TensorBoard) server per log directory, shown under cells.

May import the runs, and in the conversion's child the XSpace schema of the analysis; never
IPython. Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""

from xprof_magic._viewer.process.client import Viewer, ViewerError, ViewerKind, fetch_json
from xprof_magic._viewer.process.manager import (
    Failed,
    Launched,
    Restarted,
    Reused,
    ViewerOutcome,
    ViewerStart,
    begin_viewer,
    ensure_viewer,
    find_viewer,
    list_viewers,
    stop_viewer,
)

__all__ = [
    "Failed",
    "Launched",
    "Restarted",
    "Reused",
    "Viewer",
    "ViewerError",
    "ViewerKind",
    "ViewerOutcome",
    "ViewerStart",
    "begin_viewer",
    "ensure_viewer",
    "fetch_json",
    "find_viewer",
    "list_viewers",
    "stop_viewer",
]
