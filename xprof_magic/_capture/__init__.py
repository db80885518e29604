"""One capture's lifecycle: the plan, the trace, the run it records, its result.

* ``plan`` -- what a capture is asked to do, decided before anything runs (a frozen
  :class:`~xprof_magic._capture.plan.Plan`);
* ``capture`` -- :class:`~xprof_magic._capture.capture.Capture`, start · run · stop, and
  the script API (:func:`xprof_magic.capture`, :func:`xprof_magic.last`);
* ``trace`` -- the one trace and the step window that switches it; ``record`` -- the run's
  metadata from a stopped capture; ``result`` -- what the caller gets back;
* ``ondemand`` -- ``%xprof capture``: profiler servers that already run, into one run.

May import :mod:`xprof_magic._cell`, :mod:`xprof_magic._runs`, :mod:`xprof_magic._backends`
(the registry, the protocol; a profiler's module only through its registry entry) and
``_units``/``_version``; never the analysis, the viewer or a front. IPython-free. Its
modules import each other directly, never through this package.
"""
