"""The viewer: one loopback XProf (or TensorBoard) server per log directory, shown under cells.

* ``manager`` -- which viewer serves a log directory: info files, reuse, launch, stop, and
  the typed outcomes the notebook turns into messages;
* ``launch`` -- starting a server process: the viewer folder, its log, why a start failed;
* ``client`` -- a running viewer: the :class:`~xprof_magic._viewer.client.Viewer` record,
  its URLs, and JSON from its routes over loopback HTTP;
* ``server`` -- the server process itself, run by file path in its own Python, and ``info``
  -- what it shares with the kernels: its info file, its clients folder, its exit codes;
* ``guard`` -- the server's gate: only under the secret path, never outside the log directory;
* ``replies`` and ``graph`` -- what the server changes in XProf's replies, and the graph
  viewer's renderer it serves from this machine.

Nothing here imports IPython or ipywidgets; :mod:`xprof_magic._notebook` imports this
subpackage, never the reverse. What the rest of xprof_magic uses is re-exported here
(``from xprof_magic import _viewer``); the modules inside import one another by their full
names, never through this package, so that no import goes round in a circle.
"""

from xprof_magic._viewer.client import Viewer, ViewerError, ViewerKind, fetch_json
from xprof_magic._viewer.manager import (
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
