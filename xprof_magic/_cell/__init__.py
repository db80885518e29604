"""How a cell becomes labelled blocks and steps: the first stage, before any capture.

* ``rewrite`` -- a cell's (or a decorated function's) statements wrapped in labels, an AST
  rewrite; ``markers`` -- what each block is called (a statement's label, ``# xprof: NAME``);
* ``labels`` -- what the rewritten code calls at run time (through ``__import__``), and
  ``recorder`` -- one capture's label times, open blocks and kept value;
* ``sampler`` -- the cell's thread looked at 500 times a second: its cell line, and whether
  the framework's code or the user's runs there;
* ``steps`` -- where steps begin and end (the tracker), and ``step_window`` -- the
  ``--steps`` option and what is said about a run's steps.

Owns no profiler and no file: the capture (:mod:`xprof_magic._capture`) hands in its
backend's event factory and reads the totals. May import the standard library only, and
:mod:`xprof_magic._cell` itself; imported by the capture, the runs' metadata, the analysis
(the markers' and labels' names) and the fronts. Its modules import each other directly.
"""
