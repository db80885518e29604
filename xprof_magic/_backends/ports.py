"""The profiler servers' port checks, shared by the backends.

Whether a port is free, which port a server starts on (the next free one when another kernel holds
the asked one), why none, whether this very process listens there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket

__all__ = ["PORT_TRIES", "listens_here", "port_is_free", "server_port"]

PORT_TRIES = 16
"""How many ports, from the one asked for, a profiler server tries in turn: each kernel on
the machine (a second notebook, a restarted one) holds one while it lives."""


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` on any interface.

    An unexpected bind error (other than the port being in use, or no IPv6) is raised.

    The profiler servers bind the dual-stack wildcard and do not raise on a busy port (they log and
    serve nothing), so the port is checked first, the way they will bind it.
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


def server_port(
    port: int, server: str, own: str = "", tries: int = PORT_TRIES
) -> tuple[int | None, str]:
    """The port ``server`` starts on, and what to say about it, once; or None and why.

    Args:
        server: its name in messages ("JAX's profiler server").
        port: the port asked for, returned when it is free (nothing to say); when another process
            holds it (a second notebook's kernel finds the first's server there), the next free one
            of the ``tries`` from it, named; or None and, in one line, why none.
        own: what to say when this very process already listens on ``port`` (the user's own server);
            "" takes it as any busy port.
    """
    try:
        if port_is_free(port):
            return port, ""
    except OSError as error:
        return None, (
            f"cannot use port {port} for {server} ({error.strerror or error}); "
            "use --port N for another port or --no-server to skip it"
        )
    if own and listens_here(port):
        return None, own
    for other in range(port + 1, min(port + tries, 65536)):
        with contextlib.suppress(OSError):
            if port_is_free(other):
                return other, (
                    f"port {port} is busy (another kernel's server?), so {server} "
                    f"(on-demand capture) listens on port {other}"
                )
    return None, (
        f"ports {port} to {port + tries - 1} are all busy, so {server} (on-demand capture) "
        "was not started; %%xprof does not need it"
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
