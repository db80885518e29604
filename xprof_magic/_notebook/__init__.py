"""The Jupyter front: ``%%xprof`` and ``%xprof``, and what they show under a cell.

* ``magic`` -- the magics' options (``magic_arguments``) into a plan; ``execute`` -- a cell
  read once and compiled as IPython runs it; ``commands`` -- the line magic's commands;
* ``show`` -- a finished capture under its cell: the summary, once, and the widget (only
  a widget shown imports ipywidgets: a terminal gets the text and the viewer's URL);
* ``widget``, ``summary_panel``, ``tools`` -- the viewer under the cell, the summary above
  it, the tools a run has and which have data, asked in the background;
* ``frame``, ``context``, ``colab`` -- where the page shows, which frontend this is, and
  Colab's output-frame embedding; ``compat`` -- IPython 7.34 and ipywidgets 7 (Colab).

The only code that imports IPython or ipywidgets (but for the marimo view). May import every
stage below it (the viewer, the analysis, the capture, the runs, the cell, the backends),
never :mod:`xprof_magic._marimo`; nothing imports it but the extension hooks of
:mod:`xprof_magic`, lazily.
"""
