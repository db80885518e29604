"""The background preparation of timelines: each run converted before it is looked at.

* ``preparer`` -- the :class:`~xprof_magic._viewer.prepare.preparer.Preparer` thread: which
  run next, one low-priority child at a time, paused while a capture's staging folder is
  alive;
* ``convert`` -- that child: XProf's own converter in a scratch folder, and the commit that
  moves its caches in with ``cache_version.txt`` last;
* ``preview`` -- a large run's first events cut into a small XSpace, converted first;
* ``preparing`` -- the WSGI side: the page said until a run is ready, and the trace data
  requests that wait for it.

Runs in the viewer's process. May import :mod:`xprof_magic._viewer.app` (the guard's routes
and WSGI types), :mod:`xprof_magic._runs` (``store``) and the standard library; XProf only in
the conversion's child, the XSpace schema (:mod:`xprof_magic._analysis.timeline.xspace`) only
inside the preview's cut. Its modules import each other directly.
"""
