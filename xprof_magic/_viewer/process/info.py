"""Where a viewer records itself, and who uses it: what its process and the kernels share.

A server writes one 0600 info file (:func:`info_path`, :data:`INFO_FORMAT`: its pid, port,
log directory and secret) once it listens, and removes it when it ends; a kernel finds a
viewer by reading those files (:func:`records`). Beside each file is a clients folder where
the kernels using that server register, an empty file each named by pid
(:func:`register_client`); the server reads it (:class:`Clients`) and exits
:data:`DEFAULT_GRACE_S` after the last of them died. A server that cannot start says why by
its exit code (``EXIT_*``).

Imported by the kernel (:mod:`xprof_magic._viewer.process.manager`,
:mod:`xprof_magic._viewer.process.os_process`) and by the server's process
(:mod:`xprof_magic._viewer.process.server`), which the kernel never imports. Standard library
only, and the client's :class:`~xprof_magic._viewer.process.client.Viewer` record.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from xprof_magic._viewer.process.client import KINDS, Viewer

__all__ = [
    "DEFAULT_GRACE_S",
    "EXIT_BAD_CONFIG",
    "EXIT_MISSING_DEPENDENCY",
    "EXIT_PORT_IN_USE",
    "INFO_FORMAT",
    "INFO_PREFIX",
    "INFO_SUFFIX",
    "Clients",
    "alive",
    "clients_path",
    "info_path",
    "read_info",
    "records",
    "register_client",
    "write_info",
]

INFO_PREFIX = "viewer-"
INFO_SUFFIX = ".json"
# 2: this layout. Info files without "format" were written by the earlier layout
# (``_viewer_server.py``, ``"version": 1``) and hold the same fields.
INFO_FORMAT = 2

DEFAULT_GRACE_S = 120.0
"""How long the server outlives the last kernel that used it, with no request meanwhile: long
enough for a restarted kernel to reuse it, short enough that headless runs leave none behind."""

EXIT_BAD_CONFIG = 2
EXIT_PORT_IN_USE = 3
EXIT_MISSING_DEPENDENCY = 4


def info_path(info_dir: str, pid: int) -> str:
    """Where the server with this pid records itself; one file per process, like TensorBoard."""
    return os.path.join(info_dir, f"{INFO_PREFIX}{pid}{INFO_SUFFIX}")


def clients_path(info_dir: str, pid: int) -> str:
    """Where the kernels using server ``pid`` register, an empty file each named by pid."""
    return os.path.join(info_dir, f"{INFO_PREFIX}{pid}.clients")


def register_client(info_dir: str, server_pid: int, client_pid: int) -> None:
    """Record ``client_pid`` as a user of the server; missing folder: the server is gone."""
    _touch(os.path.join(clients_path(info_dir, server_pid), str(client_pid)))


def _touch(path: str) -> None:
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))


def alive(pid: int) -> bool:
    """Whether a process runs; a zombie (a kernel dead but not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True


class Clients:
    """The kernels that use this server, from its clients folder, and when one last lived."""

    def __init__(self, folder: str, first: list[int]) -> None:
        self.folder = folder
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for pid in first:
            _touch(os.path.join(folder, str(pid)))
        self._last_alive = time.monotonic()
        self._registered = bool(first)

    def pids(self) -> list[int]:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        return [int(name) for name in names if name.isdigit()]

    def gone_for(self) -> float | None:
        """Seconds since a registered kernel was last seen alive.

        None if none ever registered (a server started by hand), 0 while one lives. Dead ones are
        dropped.
        """
        pids = self.pids()
        self._registered = self._registered or bool(pids)
        if not self._registered:
            return None
        living = False
        for pid in pids:
            if alive(pid):
                living = True
            else:
                _remove(os.path.join(self.folder, str(pid)))
        if living:
            self._last_alive = time.monotonic()
            return 0.0
        return time.monotonic() - self._last_alive

    def remove(self) -> None:
        for pid in self.pids():
            _remove(os.path.join(self.folder, str(pid)))
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)


def write_info(path: str, info: dict[str, Any]) -> None:
    """Write atomically with mode 0600: the file holds the secret."""
    tmp = f"{path}.tmp"
    _remove(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(tmp, flags, 0o600), "w") as stream:
        json.dump(info, stream)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_info(path: Path) -> Viewer | None:
    """The viewer an info file records; None if unreadable or of a newer format."""
    try:
        info = json.loads(path.read_text())
        if int(info.get("format", 1)) > INFO_FORMAT:
            return None
        return Viewer(
            pid=int(info["pid"]),
            port=int(info["port"]),
            logdir=str(info["logdir"]),
            secret=str(info["secret"]),
            kind=info["kind"] if info["kind"] in KINDS else "xprof",
            log_path=str(info["log_path"]),
            started=float(info["started"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def records(directory: Path) -> list[tuple[Path, Viewer]]:
    """Every readable info file in ``directory``, and the viewer it records."""
    found = []
    for path in directory.glob(f"{INFO_PREFIX}*{INFO_SUFFIX}"):
        viewer = read_info(path)
        if viewer is not None:
            found.append((path, viewer))
    return found
