"""The viewer's WSGI app: XProf's own, or TensorBoard's with every installed plugin.

Built in the viewer's process only (:func:`xprof_magic._viewer.process.server.main`), which
serves it on loopback behind :func:`xprof_magic._viewer.app.guard.guard`. XProf and
TensorBoard are imported inside these functions, so that importing this module costs nothing.
"""

from __future__ import annotations

import functools
import gzip
from typing import Any

from xprof_magic._viewer.app.guard import WSGIApp

__all__ = ["GZIP_LEVEL", "tensorboard_app", "xprof_app"]

GZIP_LEVEL = 1
"""The level XProf's replies are gzipped at. XProf uses 9, the slowest: 0.17 s of the 0.25 s
it takes to answer a 30 MB run's trace data (4.4 MB of JSON), for 25% fewer bytes than level 1
over loopback; that reply is rewritten at level 1 anyway
(:mod:`~xprof_magic._viewer.app.replies`)."""


class _Gzip:
    """The :mod:`gzip` module as XProf's plugin sees it: ``compress`` at :data:`GZIP_LEVEL`."""

    compress = staticmethod(functools.partial(gzip.compress, compresslevel=GZIP_LEVEL))

    def __getattr__(self, name: str) -> Any:
        return getattr(gzip, name)


def _fast_gzip() -> None:
    """Make XProf's plugin compress at :data:`GZIP_LEVEL`.

    Left as it is if its module no longer imports :mod:`gzip` under that name (another XProf).
    """
    from xprof import profile_plugin

    if getattr(profile_plugin, "gzip", None) is gzip:
        profile_plugin.gzip = _Gzip()


def xprof_app(logdir: str) -> WSGIApp:
    """XProf's own standalone app, without the gRPC worker and wildcard bind of ``xprof server``."""
    from xprof.server import DataProvider, ProfilePluginLoader, TBContext, make_wsgi_app

    context = TBContext(logdir, DataProvider(logdir), TBContext.Flags(False))
    # The guard lets its capture through toward loopback and addresses the kernel captured.
    context.hide_capture_profile_button = False
    _fast_gzip()
    plugin = ProfilePluginLoader().load(context)
    if plugin is None:
        raise ImportError("XProf's profile plugin did not load; see the lines above")
    app: WSGIApp = make_wsgi_app(plugin)
    return app


def tensorboard_app(logdir: str, prefix: str) -> WSGIApp:
    """TensorBoard's WSGI app with every installed plugin, profile included.

    TensorBoard builds its app inside ``launch`` and hands it to a ``server_class``; this one
    only keeps it, so that cheroot can serve it on loopback under the guard.
    """
    from tensorboard import default, program

    kept: list[WSGIApp] = []

    class _KeepApp:
        def __init__(self, wsgi_app: WSGIApp, flags: Any) -> None:
            kept.append(wsgi_app)

        def serve_forever(self) -> None:
            return None

        def get_url(self) -> str:
            return ""

    board = program.TensorBoard(plugins=default.get_plugins(), server_class=_KeepApp)
    board.configure(
        argv=[
            "tensorboard",
            "--logdir",
            logdir,
            "--path_prefix",
            prefix,
            "--load_fast",
            "false",
            "--host",
            "127.0.0.1",
        ]
    )
    board.launch()
    return kept[0]
