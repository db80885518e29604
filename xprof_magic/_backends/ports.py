"""The profiler servers' port checks, shared by the backends: whether a port is free, why a
server must not start on it, whether this very process listens there."""

from __future__ import annotations

import contextlib
import errno
import os
import socket

from xprof_magic._backends import ServerStatus

__all__ = ["listens_here", "port_is_free", "port_refusal"]


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` on any interface; an unexpected bind error
    (other than the port being in use, or no IPv6) is raised.

    The profiler servers bind the dual-stack wildcard and do not raise on a busy port (they
    log and serve nothing), so the port is checked first, the way they will bind it.
    """
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, port))
            return True
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return False
            if family == socket.AF_INET6:
                continue
            raise
    return True


def port_refusal(port: int, server: str, own: str = "") -> ServerStatus | None:
    """Why the profiler server called ``server`` ("JAX's profiler server") must not start on
    ``port``, or None when the port is free. ``own``: what to say instead when this very
    process already listens there (the user's own server); "" says it as any busy port."""
    try:
        free = port_is_free(port)
    except OSError as error:
        return ServerStatus(
            port,
            False,
            f"cannot use port {port} for {server} ({error.strerror or error}); "
            "use --port N for another port or --no-server to skip it",
        )
    if free:
        return None
    if own and listens_here(port):
        return ServerStatus(port, False, own)
    return ServerStatus(
        port,
        False,
        f"port {port} is busy, so {server} (on-demand capture) was not started; "
        "use --port N for another port or --no-server to skip it",
    )


def listens_here(port: int) -> bool:
    """Whether this very process listens on TCP ``port`` (Linux's ``/proc``; else False).

    A listening socket of ``/proc/self/net/tcp*`` whose inode is one of this process's
    open file descriptors.
    """
    inodes: set[str] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    if not inodes:
        return False
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
    return False
