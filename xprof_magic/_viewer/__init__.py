"""The viewer: one loopback XProf (or TensorBoard) server per log directory, shown under cells.

Its parts, each a sub-package, in the order a request meets them:

* :mod:`.process` -- the server process and its lifecycle: ``manager`` (which viewer serves
  a log directory: reuse, launch, stop, the typed outcomes the fronts turn into messages),
  ``launch`` (the OS process), ``client`` (a running viewer's record, URLs and JSON routes),
  ``info`` (what the process and the kernels share) and ``server`` (the process itself, run
  by file path in its own Python);
* :mod:`.app` -- what that process serves: XProf's app behind the secret ``guard``, what it
  changes in XProf's replies (``replies``, ``inline``, ``graph``) and the replies it keeps
  (``memo``);
* :mod:`.prepare` -- the background preparation of timelines: each run converted for the
  trace viewer before it is looked at (``preparer``, ``convert``, ``preview``), and the page
  said meanwhile (``preparing``).

Beside them, what the fronts ask of a viewer about a run: ``tools`` (a run's tools in the
fronts' order, names and pages, and the lines both fronts say about a page) and ``survey``
(which of them have data, and why not).

May import :mod:`xprof_magic._runs` (``store``) and, lazily in the conversion's child,
the XSpace schema of :mod:`xprof_magic._analysis`. Nothing here imports IPython or
ipywidgets; :mod:`xprof_magic._notebook` imports this subpackage, never the reverse. What the
rest of xprof_magic uses is re-exported here (``from xprof_magic import _viewer``); the
modules inside import one another by their full names, never through this package, so that
no import goes round in a circle.
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
