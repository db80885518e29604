"""Stage 2, build: a run's metadata and its timeline's facts -> a summary.

:func:`~.build.build` makes the :class:`~xprof_magic._analysis.model.summary.Summary`:
labels and steps (:mod:`.blocks`), the device, its threads and top ops (:mod:`.device`),
every host of a multi-host run (:mod:`.hosts`), measured with the interval arithmetic of
:mod:`.spans`. Its modules import each other directly, never through this package.
"""
