"""The viewer's server process and its lifecycle, from the kernel's side and from its own.

* ``manager`` -- which viewer serves a log directory: reuse, launch, stop, and the typed
  outcomes the fronts turn into messages;
* ``launch`` -- starting a server process, telling it from a recycled pid, ending it;
* ``client`` -- a running viewer: the :class:`~xprof_magic._viewer.process.client.Viewer`
  record, its URLs (``locate`` and the proxy templates), JSON from its routes;
* ``info`` -- what the process and the kernels share: the info file it records itself in,
  the clients folder the kernels using it register in, its exit codes;
* ``server`` -- the process itself, run by file path in its own Python (the kernel never
  imports it): it builds the app (:mod:`xprof_magic._viewer.app`,
  :mod:`xprof_magic._viewer.prepare`), serves it on loopback and exits when no kernel uses it.

May import :mod:`xprof_magic._viewer.app` and :mod:`xprof_magic._viewer.prepare` (the routes
a client asks, the app a server serves) and the standard library; cheroot in the server's
process only. Never IPython. Its modules import each other directly.
"""
