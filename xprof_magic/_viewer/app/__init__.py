"""The app the viewer's process serves: XProf (or TensorBoard) behind the secret guard.

* ``guard`` -- the gate every request passes: the secret path, loopback, paths normalised
  and kept inside the log directory, on-demand capture targets;
* ``apps`` -- XProf's and TensorBoard's WSGI apps, XProf's replies gzipped at level 1;
* ``replies`` -- what the viewer changes in XProf's replies (the labels' thread first, the
  front-end files kept, the graph page's renderer), with ``inline`` (the embedded pages'
  form for under a cell) and ``graph`` (the graph viewer's renderer, served from this
  machine, which ``python -m xprof_magic graph-renderer`` installs);
* ``memo`` -- XProf's data replies kept and given again while a run's capture is the same.

May import :mod:`xprof_magic._runs` (``store``: a run's folder, the atomic JSON write) and
the standard library; werkzeug, xprof and tensorboard only inside functions, in the server's
process. Its modules import each other directly.
"""
