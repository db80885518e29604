"""The ``%xprof`` line commands: runs, view, summary, compare, viewer, capture.

Each command reads the log directory the last profiled cell used (or the default) and shows
what it finds; mistakes raise IPython's ``UsageError``, one line naming the fix.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.display import display

from xprof_magic._backends.registry import BACKEND_CHOICES, DEFAULT_HEIGHT
from xprof_magic._capture import ondemand as _ondemand
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store

__all__ = ["SUBCOMMANDS", "Session", "run_command"]

SUBCOMMANDS = (
    "runs, view [RUN], summary [RUN], compare RUN_A RUN_B, viewer, viewer stop, "
    "capture [ADDR[,ADDR...]]"
)


@dataclass
class Session:
    """What the line commands remember of this kernel's profiled cells."""

    logdir: _logdir.Logdir | None = None
    viewer_kind: Any = "xprof"
    viewer_port: int | None = None

    def current(self) -> _logdir.Logdir:
        """The log directory the last profiled cell used, else the default."""
        if self.logdir is not None:
            return self.logdir
        try:
            return _logdir.Logdir.parse()
        except _store.LogdirError as error:
            raise UsageError(f"${_store.LOGDIR_ENV}: {error}") from None

    def current_logdir(self) -> Path:
        """The local folder of :meth:`current`."""
        return self.current().local


def run_command(session: Session, shell: Any, line: str) -> None:
    """Parse and run one ``%xprof`` line."""
    try:
        words = shlex.split(line)
    except ValueError as error:
        raise UsageError(f"%xprof {line}: {error}; check the quotes") from None
    if not words:
        raise UsageError(
            "%xprof needs a subcommand, or use %%xprof as a cell magic; "
            f"subcommands: {SUBCOMMANDS}. See %xprof?"
        )
    command, rest = words[0], words[1:]
    if command == "view" and len(rest) <= 1:
        return _view(session, shell, rest[0] if rest else None)
    if command == "viewer" and rest in ([], ["stop"]):
        return _viewer_command(session, stop=bool(rest))
    if command == "summary" and len(rest) <= 1:
        return _summary(session, rest[0] if rest else None)
    if command == "compare" and len(rest) == 2:
        return _compare(session, *rest)
    if command == "capture":
        return _capture(session, shell, rest)
    if command == "runs" and len(rest) <= 1:
        return _runs(rest[0] if rest else None, session)
    raise UsageError(
        f"%xprof {command}: unknown subcommand or arguments; subcommands: {SUBCOMMANDS}. "
        "See %xprof?"
    )


def _sync(logdir: _logdir.Logdir) -> None:
    """Copy down the runs other hosts wrote to a ``gs://`` log directory, saying which."""
    if logdir.remote is None:
        return
    from xprof_magic._runs import gcs as _gcs

    try:
        synced = _gcs.sync(logdir.remote)
    except _store.LogdirError as error:
        print(f"xprof: {error}; showing the local copy only")
        return
    if synced.runs:
        print(f"xprof: copied {len(synced.runs)} run(s) from {logdir}: {', '.join(synced.runs)}")
    for failure in synced.failures:
        print(f"xprof: {failure}")


def _runs(text: str | None, session: Session) -> None:
    """The runs of ``text``, else of the log directory the last profiled cell used."""
    if text is None:
        logdir = session.current()
    else:
        try:
            logdir = _logdir.Logdir.parse(text)
        except _store.LogdirError as error:
            raise UsageError(str(error)) from None
    _sync(logdir)
    found = _store.runs(logdir.local)
    if not found:
        print(f"xprof: no runs in {logdir.local.absolute()}")
    for run in found:
        status = (run.metadata or {}).get("status", "?")
        print(f"{run.name}  [{status}]  {run.path}")


def _run_name(session: Session, run: str | None) -> tuple[Path, str, list[_store.RunInfo]]:
    """The log directory in use, a run in it (the newest when none is named), and its runs.

    Listing the runs reads each one's metadata: a caller that needs them takes these.
    """
    current = session.current()
    _sync(current)
    logdir = current.local
    found = _store.runs(logdir)
    names = [r.name for r in found]
    if not names:
        raise UsageError(f"no runs in {logdir.absolute()}; profile a cell with %%xprof first")
    if run is not None and run not in names:
        raise UsageError(f"no run {run!r} in {logdir.absolute()}; %xprof runs lists the runs there")
    return logdir, run or names[0], found


def _view(session: Session, shell: Any, run: str | None) -> None:
    from xprof_magic._notebook import show
    from xprof_magic._viewer.process import manager

    logdir, name, found = _run_name(session, run)
    start = manager.begin_viewer(logdir, port=session.viewer_port, kind=session.viewer_kind)
    run_dir = _store.run_path(logdir, name)
    show.show_run(shell, start, logdir, run_dir, DEFAULT_HEIGHT, found=found)


def _whole_summary(run_dir: Path) -> Any:
    """The run's complete summary: saved, or read now (in a process of its own when big)."""
    from xprof_magic import _analysis
    from xprof_magic._notebook import show

    return _analysis.summary_of(run_dir, budget_s=show.SUMMARY_BUDGET_S, apart=True)


def _full_summary(session: Session, run: str | None) -> Any:
    logdir, name, _ = _run_name(session, run)
    return _whole_summary(_store.run_path(logdir, name))


def _summary(session: Session, run: str | None) -> None:
    from xprof_magic._notebook import show

    display(show.summary_bundle(_full_summary(session, run)), raw=True)


def _compare(session: Session, run_a: str, run_b: str) -> None:
    from xprof_magic import _analysis

    both = _analysis.compare(_full_summary(session, run_a), _full_summary(session, run_b))
    display({"text/plain": both.text(), "text/html": both.html()}, raw=True)


def _viewer_command(session: Session, stop: bool) -> None:
    from xprof_magic._viewer.process import manager

    logdir = session.current_logdir()
    kind = session.viewer_kind
    found = manager.find_viewer(logdir, kind)
    if found is None:
        print(f"xprof: no {kind} viewer runs for {logdir.absolute()}")
        return
    if stop:
        stopped = manager.stop_viewer(found)
        state = "stopped" if stopped else "could not be stopped; try !kill"
        print(f"xprof: the viewer (pid {found.pid}, port {found.port}) {state}")
        return
    print(
        f"xprof: {kind} viewer, pid {found.pid}, listening on 127.0.0.1:{found.port}, "
        f"serving {found.logdir}; its log: {found.log_path}"
    )


class _Parser(argparse.ArgumentParser):
    """argparse that fails with one ``UsageError`` line instead of exiting."""

    def error(self, message: str) -> Any:
        raise UsageError(f"%xprof capture: {message}; see %xprof capture --help")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        if message:
            print(message)
        raise _Done


class _Done(Exception):
    """``--help`` was shown."""


def _capture_parser() -> _Parser:
    parser = _Parser(
        prog="%xprof capture",
        description="Capture running profiler servers for a while into one run, one host "
        "per address. No address: this kernel's own server (started now if needed), e.g. "
        "while a training loop runs in a thread.",
    )
    parser.add_argument("addresses", nargs="?", default=None, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--duration-ms", type=int, default=_ondemand.DEFAULT_DURATION_MS)
    parser.add_argument("--name", default=None, help="run name (default: a time stamp)")
    parser.add_argument(
        "--logdir", default=None, help="log directory or gs://BUCKET/PATH (default: the session's)"
    )
    parser.add_argument("--host-tracer-level", type=int, default=2, help="0-3 (default 2)")
    parser.add_argument("--device-tracer-level", type=int, default=1, help="0-1 (default 1)")
    parser.add_argument("--python-tracer-level", type=int, default=0, help="0-1 (default 0)")
    parser.add_argument("--delay-ms", type=int, default=0, help="wait before tracing")
    parser.add_argument("--port", type=int, default=None, help="own server's port (no address)")
    parser.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="whose server is this kernel's own (no address; default: what the kernel imported)",
    )
    parser.add_argument("--no-display", action="store_true", help="print the summary only")
    return parser


def _capture(session: Session, shell: Any, words: list[str]) -> None:
    try:
        args = _capture_parser().parse_args(words)
    except _Done:
        return
    try:
        logdir = _logdir.Logdir.parse(args.logdir) if args.logdir else session.current()
        options = _ondemand.Options(
            duration_ms=args.duration_ms,
            host_tracer_level=args.host_tracer_level,
            device_tracer_level=args.device_tracer_level,
            python_tracer_level=args.python_tracer_level,
            delay_ms=args.delay_ms,
        )
        addresses = _addresses(args, shell)
        captured = _ondemand.capture(addresses, logdir, options, name=args.name)
    except (_ondemand.CaptureError, _store.LogdirError, ValueError) as error:
        raise UsageError(f"%xprof capture: {error}") from None
    session.logdir = logdir
    print(captured.text(failures=False))  # the summary below says which address failed
    _tell_viewers(list(captured.hosts.values()))
    if args.no_display:
        from xprof_magic._notebook import show

        display(show.summary_bundle(_whole_summary(captured.path)), raw=True)
        return
    _view(session, shell, captured.run)


def _addresses(args: Any, shell: Any) -> list[str]:
    """The addresses to capture: those given, else this kernel's own server's."""
    from xprof_magic._backends.detect import choose_backend
    from xprof_magic._backends.registry import DEFAULT_PORT

    if args.addresses is not None:
        return _ondemand.parse_addresses(args.addresses)
    backend = args.backend
    if backend == "auto":
        backend, _ = choose_backend("", getattr(shell, "user_ns", {}))
    address, said = _ondemand.own_address(args.port or DEFAULT_PORT, backend)
    if said:
        print(f"xprof: {said}")
    return [address]


def _tell_viewers(addresses: list[str]) -> None:
    """Let the viewers' capture button reach the addresses this kernel has captured."""
    from xprof_magic._viewer.app import guard
    from xprof_magic._viewer.process import os_process

    try:
        guard.allow_capture(os_process.viewer_dir(), addresses)
    except Exception as error:
        print(f"xprof: the viewer's capture button cannot reach {', '.join(addresses)}: {error}")
