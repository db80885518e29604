"""What ``xprof_magic.profile(...)`` was asked, checked once, and the capture plan it makes.

The options are ``%%xprof``'s, by keyword; a bad one is refused when ``profile`` is called,
before any function runs. IPython-free, marimo-free.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from xprof_magic._backends import detect as _detect
from xprof_magic._backends.registry import BACKENDS, DEFAULT_HEIGHT, DEFAULT_PORT
from xprof_magic._capture import plan as _plan
from xprof_magic._cell.step_window import StepWindow, parse_steps
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store

if TYPE_CHECKING:
    from xprof_magic._viewer import ViewerStart
    from xprof_magic._viewer.process.client import ViewerKind

__all__ = ["VIEWERS", "Options", "in_marimo"]

VIEWERS = ("xprof", "tensorboard")


def in_marimo() -> bool:
    """Whether this runs in a marimo notebook or app (never imports marimo to find out)."""
    marimo = sys.modules.get("marimo")
    try:
        return bool(marimo is not None and marimo.running_in_notebook())
    except Exception:
        return False


@dataclass(frozen=True)
class Options:
    """What ``profile(...)`` was asked, checked once: the magic's options, by keyword."""

    logdir: _logdir.Logdir
    name: str | None = None
    steps: bool = False
    window: StepWindow | None = None
    sync: bool = False
    labels: bool = True
    backend: str = "auto"
    server: bool = True
    port: int = DEFAULT_PORT
    viewer: ViewerKind = "xprof"
    viewer_port: int | None = None
    height: int = DEFAULT_HEIGHT
    given: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, **given: Any) -> Options:
        """The options, or ``ValueError`` naming the bad one and its fix (``LogdirError`` for
        a log directory that is not one)."""
        port, viewer_port, height = given["port"], given["viewer_port"], given["height"]
        if not 0 < port < 65536:
            raise ValueError(f"port={port} is not a port; use a number from 1 to 65535")
        if viewer_port is not None and not 0 < viewer_port < 65536:
            raise ValueError(f"viewer_port={viewer_port} is not a port; use 1 to 65535")
        if not 100 <= height <= 10000:
            raise ValueError(f"height={height} is out of range; use 100 to 10000 pixels")
        backend, viewer = given["backend"], given["viewer"]
        if backend != "auto" and backend not in BACKENDS:
            choices = ", ".join(["auto", *sorted(BACKENDS)])
            raise ValueError(f"backend={backend!r} is not a backend; use one of {choices}")
        if viewer not in VIEWERS:
            raise ValueError(f"viewer={viewer!r}: use 'xprof' or 'tensorboard'")
        try:
            steps, window = parse_steps(given["steps"])
        except ValueError as error:
            raise ValueError(f"steps={given['steps']!r}: {error}") from None
        name = given["name"]
        if name is not None:
            _store.safe_run_name(name)  # a name with no usable character fails here, not later
        server = _plan.server_by_default() if given["server"] is None else given["server"]
        return cls(
            logdir=_logdir.Logdir.parse(given["logdir"]),
            name=name,
            steps=steps,
            window=window,
            sync=given["sync"],
            labels=given["labels"],
            backend=backend,
            server=server,
            port=port,
            viewer=cast("ViewerKind", viewer),
            viewer_port=viewer_port,
            height=height,
            given={k: v for k, v in given.items() if v not in (None, False)},
        )

    def plan(
        self, name: str | None, source: str, cell: str | None, namespace: Any, first_line: int = 1
    ) -> _plan.Plan:
        """The capture's plan; ``source`` and ``namespace`` choose the backend for ``auto``;
        ``first_line`` is the editor's number of ``cell``'s first line."""
        backend = self.backend
        if backend == "auto":
            backend, message = _detect.choose_backend(source, namespace)
            if message:
                print(f"xprof: {message}", file=sys.stderr)
        return _plan.Plan(
            logdir=self.logdir,
            name=name,
            labels=self.labels,
            steps=self.steps,
            step_window=self.window,
            sync=self.sync,
            server=self.server,
            port=self.port,
            backend=backend,
            cell=cell,
            cell_first_line=first_line,
            options={"api": "profile", **{k: _plain(v) for k, v in self.given.items()}},
        )

    def begin_viewer(self) -> ViewerStart | None:
        """The viewer, started now where a run will be shown (marimo), else None: a script
        starts no server it does not ask for."""
        if not in_marimo():
            return None
        from xprof_magic._viewer.process import manager

        return manager.begin_viewer(self.logdir.local, port=self.viewer_port, kind=self.viewer)


def _plain(value: Any) -> Any:
    """An option as the run's metadata keeps it: JSON's own types, else its text (a path)."""
    return value if isinstance(value, bool | int | float | str) else str(value)
