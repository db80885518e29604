"""On-demand capture: profile what already runs, through profiler servers, into one run.

A profiler server (torch_xla's ``xp.start_server``, JAX's ``jax.profiler.start_server``)
answers XProf's capture client with its process's timeline for a given duration. This module
asks one or several servers at once and stores what they gave as one run, one host per
address. It uses XProf's own client (what XProf's capture button calls), so capturing other
processes never imports torch_xla into the kernel: that import alone costs about 9 s.

Each address is captured in a thread of its own, into a folder of its own: an address that
does not answer costs its host only, and its line says which one and why. The run lands
atomically through :mod:`xprof_magic._runs.store`, with metadata naming addresses and options.
IPython-free: :mod:`xprof_magic._notebook.commands` wraps it as ``%xprof capture``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store

__all__ = [
    "DEFAULT_DURATION_MS",
    "CaptureError",
    "Captured",
    "Options",
    "capture",
    "host_name",
    "own_address",
    "parse_addresses",
]

DEFAULT_DURATION_MS = 2000
CONNECT_TIMEOUT_S = 2.0
_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


class CaptureError(Exception):
    """Nothing could be captured, or the request cannot be made; the message says why."""


@dataclass(frozen=True)
class Options:
    """What the capture asks of each server: XProf's capture options, same names and defaults.

    The tracer levels are those of XProf's capture dialog: host 0-3 (2: the user's and the
    framework's events), device 0-1, python 0-1 (1: every Python call, slow). ``delay_ms``
    waits before tracing starts.
    """

    duration_ms: int = DEFAULT_DURATION_MS
    host_tracer_level: int = 2
    device_tracer_level: int = 1
    python_tracer_level: int = 0
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.duration_ms <= 0:
            raise CaptureError(f"--duration-ms {self.duration_ms}: give a positive duration")
        if self.delay_ms < 0:
            raise CaptureError(f"--delay-ms {self.delay_ms}: give 0 or a positive delay")
        for name, top in (
            ("host_tracer_level", 3),
            ("device_tracer_level", 1),
            ("python_tracer_level", 1),
        ):
            level = getattr(self, name)
            if not 0 <= level <= top:
                flag = "--" + name.replace("_", "-")
                raise CaptureError(f"{flag} {level}: choose a level from 0 to {top}")

    def client_options(self) -> dict[str, int]:
        """The options XProf's client passes to the servers."""
        return {
            "host_tracer_level": self.host_tracer_level,
            "device_tracer_level": self.device_tracer_level,
            "python_tracer_level": self.python_tracer_level,
            "delay_ms": self.delay_ms,
        }


@dataclass(frozen=True)
class Captured:
    """A stored on-demand run: its folder, its hosts, and one line per address that failed."""

    logdir: Path
    run: str
    path: Path
    hosts: dict[str, str]
    failures: tuple[str, ...] = ()
    wall_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    upload: str = ""

    def text(self, failures: bool = True) -> str:
        """What was captured, then a line per failed address, then how the upload went.

        The failed addresses are left out when ``failures`` is False (the run's summary, shown next,
        has them as notes); the upload is to a ``gs://`` log directory.
        """
        names = ", ".join(f"{host} ({address})" for host, address in self.hosts.items())
        lines = [f"xprof: captured {len(self.hosts)} host(s) into run {self.run}: {names}"]
        lines += [f"xprof: {failure}" for failure in self.failures if failures]
        lines += [f"xprof: {self.upload}"] if self.upload else []
        return "\n".join(lines)


def parse_addresses(text: str) -> list[str]:
    """Parse ``HOST:PORT[,HOST:PORT...]`` into a list of addresses, duplicates dropped.

    A bare ``PORT`` means localhost; ``grpc://`` prefixes are accepted and removed.
    """
    found: list[str] = []
    for raw in text.split(","):
        item = raw.strip().removeprefix("grpc://")
        if not item:
            continue
        if item.isdigit():
            item = f"localhost:{item}"
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CaptureError(
                f"address {raw.strip()!r} is not HOST:PORT; give e.g. localhost:9012, "
                "several separated by commas"
            )
        if item not in found:
            found.append(item)
    if not found:
        raise CaptureError("no address given; give HOST:PORT, several separated by commas")
    return found


def host_name(address: str) -> str:
    """The host's name in the run (its timeline's file stem), e.g. ``localhost_9012``.

    ``localhost:9012`` gives ``localhost_9012``, so that hosts on one machine stay apart in
    XProf's hosts menu.
    """
    return _HOST_UNSAFE.sub("_", address).strip("_") or "host"


def own_address(port: int, backend: str = "torch_xla") -> tuple[str, str]:
    """This process's own profiler server as an address, started now if needed.

    ``backend`` is the profiler whose server it is (a JAX kernel never imports torch_xla
    for this). Starting torch_xla's imports torch_xla but does not
    start its runtime. Returns the address and what the backend said (empty when nothing
    worth saying); raises :class:`CaptureError` when no server of this process listens on
    ``port``.
    """
    from xprof_magic._backends.ports import listens_here
    from xprof_magic._backends.registry import get_backend

    status = get_backend(backend).start_server(port)
    if status.started and status.port is not None:
        return f"localhost:{status.port}", status.message
    if listens_here(port):
        return f"localhost:{port}", ""
    raise CaptureError(
        f"this kernel's profiler server could not start: {status.message or 'unknown reason'}"
    )


def capture(
    addresses: list[str],
    logdir: _logdir.Logdir | str | os.PathLike[str],
    options: Options | None = None,
    name: str | None = None,
) -> Captured:
    """Capture ``addresses`` at once for ``options.duration_ms`` into one run of ``logdir``.

    A ``gs://`` log directory's run is written to its local mirror and uploaded once
    stored. Raises :class:`CaptureError` when no address gave a timeline (each one's line in
    the message), and :class:`xprof_magic._runs.store.LogdirError` when ``logdir`` (or the bucket)
    cannot hold a run, before anything is captured, or the run could not be stored.
    """
    options = options or Options()
    if not addresses:
        raise CaptureError("no address given; give HOST:PORT, several separated by commas")
    if not isinstance(logdir, _logdir.Logdir):
        logdir = _logdir.Logdir.parse(logdir)
    run_name = _store.safe_run_name(name) if name else None
    staging = _logdir.stage(logdir)
    started_ns = time.time_ns()
    try:
        hosts, failures, wall_s = _gather(addresses, staging.path, options)
        ended_ns = time.time_ns()
        run_name = run_name or _store.default_run_name(datetime.now(), None)
        meta = _run_metadata(addresses, hosts, options, failures, started_ns, ended_ns, wall_s)
        stored = _logdir.store(logdir, staging, run_name, meta)
    finally:
        _store.discard(staging)
    return Captured(
        logdir=staging.logdir,
        run=stored.run_dir.name,
        path=stored.run_dir,
        hosts=hosts,
        failures=tuple(failures),
        wall_s=wall_s,
        metadata=meta,
        upload=stored.upload,
    )


def _gather(
    addresses: list[str], staging: Path, options: Options
) -> tuple[dict[str, str], list[str], float]:
    """Capture every address into the staged session.

    Returns the hosts (name to address), a line per address that failed, and the wall time;
    raises :class:`CaptureError` when none gave one.
    """
    started = time.perf_counter()
    results = _capture_all(addresses, staging, options)
    wall_s = time.perf_counter() - started
    session = _store.profile_dir(staging) / "session"
    session.mkdir(parents=True)
    hosts: dict[str, str] = {}
    failures: list[str] = []
    for address, (xplane, failure) in zip(addresses, results, strict=True):
        if xplane is None:
            failures.append(failure)
            continue
        host = host_name(address)
        os.replace(xplane, session / f"{host}{_store.XPLANE_SUFFIX}")
        hosts[host] = address
    for index in range(len(addresses)):
        shutil.rmtree(staging / f"address{index}", ignore_errors=True)
    if not hosts:
        raise CaptureError(
            "nothing was captured: " + ("; ".join(failures) or "no address gave a timeline")
        )
    return hosts, failures, wall_s


def _capture_all(
    addresses: list[str], staging: Path, options: Options
) -> list[tuple[Path | None, str]]:
    """Each address's timeline file (or None and the reason), captured in parallel threads.

    XProf's client is a C call through ctypes, which releases the GIL while it waits.
    """
    results: list[tuple[Path | None, str]] = [(None, "not captured")] * len(addresses)

    def one(index: int, address: str) -> None:
        results[index] = _capture_one(address, staging / f"address{index}", options)

    threads = [
        threading.Thread(target=one, args=(i, a), name=f"xprof-capture-{a}", daemon=True)
        for i, a in enumerate(addresses)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        # Interrupted: the C calls cannot be cancelled, and end with their duration; let them
        # finish writing before the caller removes the staging folder under them.
        grace_s = (options.delay_ms + options.duration_ms) / 1000 + 30
        for thread in threads:
            thread.join(timeout=grace_s)
        raise
    return results


def _capture_one(address: str, folder: Path, options: Options) -> tuple[Path | None, str]:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        return None, (
            f"{address} does not answer ({reason}); is its profiler server running there, "
            "e.g. xp.start_server(PORT, only_on_master=False) or "
            "jax.profiler.start_server(PORT)? The other hosts are kept"
        )
    from xprof.convert import _pywrap_profiler_plugin as client

    try:
        client.trace(
            address, str(folder), "", True, options.duration_ms, 1, options.client_options()
        )
    except Exception as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return None, (
            f"{address} answered but gave no trace ({reason}); is it a profiler server, "
            "and did its process run anything during the capture? The other hosts are kept"
        )
    found = sorted(_store.profile_dir(folder).glob(f"*/*{_store.XPLANE_SUFFIX}"))
    if not found:
        return None, f"{address} answered but wrote no timeline; try again with a longer capture"
    return found[0], ""


def _run_metadata(
    addresses: list[str],
    hosts: dict[str, str],
    options: Options,
    failures: list[str],
    start_ns: int,
    end_ns: int,
    wall_s: float,
) -> dict[str, Any]:
    from xprof_magic._version import __version__

    meta = _metadata.RunMetadata(
        options={
            "mode": "on-demand",
            "addresses": list(addresses),
            "hosts": dict(hosts),
            "duration_ms": options.duration_ms,
            **options.client_options(),
        },
        start=_iso(start_ns),
        end=_iso(end_ns),
        start_ns=start_ns,
        end_ns=end_ns,
        wall_s=wall_s,
        status="partial" if failures else "ok",
        host=socket.gethostname(),
        pid=os.getpid(),
        versions={"xprof_magic": __version__},
        messages=tuple(failures),
    )
    return meta.to_json()


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat()
