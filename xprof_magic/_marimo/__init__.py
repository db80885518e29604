"""The capture where no IPython magic runs: ``xprof_magic.profile`` for marimo and scripts.

* ``function`` -- a function's body rewritten as ``%%xprof`` rewrites a cell (labels,
  ``# xprof:`` markers, ``next()`` timers, steps), read from its source;
* ``profile`` -- the decorator and the ``with`` block, over the magic's own
  :class:`~xprof_magic._capture.capture.Capture`;
* ``run`` -- the :class:`~xprof_magic._marimo.run.Run` a call or block leaves, which
  displays itself;
* ``view`` -- that display in marimo: an anywidget (``view.js``, ``view.css``) with the
  summary, the runs, tools and hosts, and XProf's page; imported when a run is first shown.

Nothing here imports IPython or marimo; ``view`` imports anywidget, which brings ipywidgets
and IPython with it. May import the stages below it (the cell, the capture, the runs, the
backends, the analysis's package-level names, the viewer), never
:mod:`xprof_magic._notebook`; nothing imports it but :mod:`xprof_magic`'s public names.
"""
