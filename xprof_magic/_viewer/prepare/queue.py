"""Each run's timeline converted before it is looked at: the viewer's :class:`Preparer`.

XProf converts a run for its trace viewer on its first ``trace_viewer@`` request (9 of the
11 s to a 30 MB capture's first paint); the viewer does it ahead of the click, with XProf's
converter in a child (:mod:`xprof_magic._viewer.prepare.convert`), writing XProf's own caches:

- a run committed while the viewer runs (or in the two minutes before it started) is queued
  at once; any other run when a request first names it (``run=``: the widget showing it,
  ``%xprof view``, the runs dropdown); runs asked for go first, the last asked first, then
  the newest; a run asked for preempts the conversion of one nobody asked for;
- one child at a time, at the lowest CPU priority (``SCHED_IDLE``, nice 19), stopped
  (``SIGSTOP``) while a capture into the log directory is in progress (its staging folder,
  :func:`xprof_magic._runs.store.capturing`), killed past a memory bound
  (:func:`~xprof_magic._viewer.prepare.convert.memory_bound`); when someone waits for the run and
  other work (not a cell's capture or summary, :func:`xprof_magic._runs.store.working`) keeps
  the CPUs so busy that the child barely runs, it is raised to normal priority, as XProf's
  own conversion on that request would run (in place where allowed, else started again);
- never twice: a run whose caches XProf would read is ready and left alone, and no
  conversion of ours starts while XProf serves the run's trace data itself;
- a large run's first events are converted first, to be looked at meanwhile
  (:mod:`~xprof_magic._viewer.prepare.preview`).

:mod:`xprof_magic._viewer.prepare.waiting_page` is the WSGI side: the page said while a run is not
ready, and the requests that ask for a run. Standard library only: the viewer's process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from xprof_magic._runs import store as _store
from xprof_magic._viewer.prepare import convert, preview

__all__ = ["SCRATCH_DIR", "Preparer"]

SCRATCH_DIR = ".xprof_magic_prepare"
"""Under the log directory: the conversions in progress, ``<pid>-<hex>`` each."""
RECENT_S = 120.0
"""A run committed this long before the viewer started counts as new: converted at once."""
TICK_S, WAITING_S, STARVED_S, STARVED_SHARE = 0.2, 1.5, 2.0, 0.25
WAIT_S = 900.0  # how long a trace data request waits for our conversion before XProf


@dataclass
class _Run:
    """One run's state.

    ``idle`` (there, nobody asked), ``queued``, ``converting``, ``ready``, ``failed``
    (``reason``) or ``none`` (no timeline to convert).
    """

    name: str
    created: float
    state: str = "idle"
    asked: float = 0.0
    since: float = 0.0
    reason: str = ""
    bytes: int = 0
    ready_at: float = 0.0
    served: bool = False
    """XProf has answered a trace data request for it: the frame has what it paints."""


@dataclass
class _Child:
    run: _Run
    process: subprocess.Popen[bytes]
    scratch: Path
    log: IO[bytes]
    hosts: tuple[str, ...]
    started: float
    bound: int
    urgent: bool
    paused: bool = False
    mark: tuple[float, float] = (0.0, 0.0)
    """When its CPU time was last looked at, and that time, for :meth:`Preparer._starved`."""


class Preparer:
    """The viewer's background conversions of one log directory (see the module)."""

    def __init__(self, logdir: str, root: str, version: str | None = None) -> None:
        self.logdir = Path(logdir)
        self.profile = _store.profile_dir(logdir)
        self.scratch = self.logdir / SCRATCH_DIR
        self.root = root
        self.version = version if version is not None else convert.xprof_version()
        self._runs: dict[str, _Run] = {}
        self._started = time.time()
        self._lock = threading.Condition()
        self._child: _Child | None = None
        self._xprof: Counter[str] = Counter()
        self._waiting: Counter[str] = Counter()
        self._polled: dict[str, float] = {}
        self._rate: float | None = None  # seconds per byte, from the last conversion
        self.previews = preview.Previews(self.scratch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="xprof-prepare", daemon=True)

    def start(self) -> Preparer:
        convert.clean_scratch(self.scratch)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._thread.join(5)
        with self._lock:
            if self._child is not None:
                self._end(self._child, kill=True)
            self.previews.clear()

    def want(self, name: str, retry: bool = False) -> None:
        """Someone looks at run ``name``: convert it now, before the others.

        A failed run only with ``retry`` (its timeline asked for again, not another tool's request).
        """
        with self._lock:
            if (run := self._find(name)) is None:
                return
            run.asked = time.monotonic()
            if run.state == "idle" or (retry and run.state == "failed"):
                run.state, run.since, run.reason = "queued", run.asked, ""
            self._lock.notify_all()

    def status(self, name: str) -> dict[str, Any]:
        """The run's state for the page.

        ``state``, ``seconds`` since it was asked for or queued, ``left`` (an estimate, or None),
        ``paused``, ``reason``.
        """
        with self._lock:
            run = self._find(name)
            if run is None:
                return {"state": "none"}
            now = time.monotonic()
            child = self._child
            converting = child is not None and child.run is run
            left = None
            if converting and self._rate is not None and child is not None:
                left = round(max(0.0, self._rate * run.bytes - (now - child.started)), 1)
            self._polled[name] = now
            return {
                "state": run.state,
                "seconds": round(now - run.since, 1) if run.since else 0.0,
                "left": left,
                "paused": bool(converting and child is not None and child.paused)
                or (run.state == "queued" and _store.capturing(self.logdir)),
                "reason": run.reason,
                "mb": round(run.bytes / 1e6, 1),
                "preview": self.previews.span(name) if run.state != "ready" else None,
            }

    def preview(self, name: str) -> Path | None:
        """The folder of run ``name``'s preview (:mod:`~xprof_magic._viewer.prepare.preview`)."""
        with self._lock:
            return self.previews.folder(name)

    def wait(self, name: str, timeout: float = WAIT_S, shown: float = 0.0) -> None:
        """Return once run ``name`` is neither queued nor converting (or after ``timeout``).

        Someone waits for its timeline (see :meth:`_starved`). With ``shown`` (another tool's
        request, which competes with the first paint), wait until XProf has served the run's trace
        data too, or ``shown`` seconds passed since it was ready with no request for it.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self._waiting[name] += not shown
            try:
                while not self._stop.is_set() and (run := self._find(name)) is not None:
                    now = time.monotonic()
                    unseen = not run.served and now < run.ready_at + shown
                    if now >= deadline or not (
                        run.state in ("queued", "converting")
                        or (shown and (self._xprof[name] or (run.state == "ready" and unseen)))
                    ):
                        return
                    self._lock.wait(min(deadline - now, 0.25 if shown else 1.0))
            finally:
                self._waiting[name] -= not shown

    @contextlib.contextmanager
    def xprof_converts(self, name: str, timeout: float = WAIT_S) -> Iterator[None]:
        """Let XProf serve run ``name``'s trace data itself once ours is done, or after ``timeout``.

        XProf may convert it then (ours stopped after ``timeout``): never two conversions at once.
        """
        with self._lock:
            self.wait(name, timeout)
            self._xprof[name] += 1
            if (child := self._child) is not None and child.run.name == name:
                self._end(child, kill=True)
                child.run.state = "queued"
        try:
            yield
        finally:
            with self._lock:
                self._xprof[name] -= 1
                run = self._runs.get(name)
                if run is not None and run.state != "converting" and self._prepared(run):
                    run.state, run.served = "ready", True
                self._lock.notify_all()

    # The preparer's thread.

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                try:
                    self._scan()
                    self._drive()
                except OSError:
                    pass  # a run folder removed under us: the next tick sees it gone
                except Exception as error:  # said; the thread lives on
                    reason = f"the preparer failed: {type(error).__name__}: {error}"
                    if (child := self._child) is not None:  # failed: the next ask tries again
                        self._end(child, kill=True)
                        self._fail(child.run, reason)
                    else:
                        _log(reason)
                self._lock.wait(TICK_S)

    def _find(self, name: str) -> _Run | None:
        run = self._runs.get(name)
        if run is None and "/" not in name and (self.profile / name).is_dir():
            self._scan()
            run = self._runs.get(name)
        return run

    def _prepared(self, run: _Run) -> bool:
        hosts = _store.hosts(self.profile / run.name)
        return convert.is_prepared(self.profile / run.name, hosts, self.version)

    def _scan(self) -> None:
        try:
            entries = list(os.scandir(self.profile))
        except OSError:
            return
        present = {entry.name for entry in entries}
        for entry in entries:
            if not entry.is_dir() or entry.name in self._runs:
                continue
            created = entry.stat().st_mtime
            run = _Run(entry.name, created)
            run_dir = self.profile / entry.name
            run.bytes = _store.xplane_bytes(run_dir)
            if not _store.hosts(run_dir):
                run.state = "none"
            elif self._prepared(run):
                run.state = "ready"
            elif created >= self._started - RECENT_S:
                run.state, run.since = "queued", time.monotonic()
            self._runs[entry.name] = run
        for gone in set(self._runs) - present:
            if self._child is None or self._child.run.name != gone:
                del self._runs[gone]

    def _drive(self) -> None:
        capturing = _store.capturing(self.logdir)
        child = self._child
        if child is not None:
            if capturing != child.paused:
                child.process.send_signal(signal.SIGSTOP if capturing else signal.SIGCONT)
                child.paused = capturing
                child.mark = (time.monotonic(), convert.cpu_s(child.process.pid))
            if child.process.poll() is None:
                self._watch(child)
                return
            self._finish(child)
        if capturing:
            return
        run = self._next()
        if run is not None:
            self._begin(run)

    def _next(self) -> _Run | None:
        queued = [r for r in self._runs.values() if r.state == "queued" and not self._xprof[r.name]]
        if not queued:
            return None
        run = max(queued, key=lambda r: (r.asked, r.created))
        if self._prepared(run):  # XProf converted it meanwhile: never twice
            run.state = "ready"
            self._lock.notify_all()
            return self._next()
        return run

    def _begin(self, run: _Run, urgent: bool = False) -> None:
        run_dir = self.profile / run.name
        hosts = _store.hosts(run_dir)
        scratch = self.scratch / f"{os.getpid()}-{uuid.uuid4().hex}"
        try:
            convert.scratch_for(run_dir, scratch, hosts)
            log = open(scratch / "convert.log", "wb")  # noqa: SIM115  (closed in _end)
        except OSError as error:
            convert.remove_scratch(scratch)
            self._fail(run, f"cannot link the capture for conversion: {error.strerror or error}")
            return
        try:
            keep = 0 if self.previews.folder(run.name) else preview.wanted(run.bytes)
            process = convert.start(self.root, scratch, hosts, urgent, log, keep)
        except OSError as error:  # no process to be had (fork refused, no memory)
            log.close()
            convert.remove_scratch(scratch)
            self._fail(run, f"cannot start the conversion: {error.strerror or error}")
            return
        run.state = "converting"
        run.since = run.since or time.monotonic()
        bound = convert.memory_bound(run.bytes)
        now = time.monotonic()
        self._child = _Child(run, process, scratch, log, hosts, now, bound, urgent, mark=(now, 0))

    def _watch(self, child: _Child) -> None:
        """Kill a child past its memory bound or converting an unwanted run; adopt its done preview.

        Unwanted: a run nobody asked for when one is asked for (that run goes back to the queue).
        """
        if self.previews.take(child.run.name, child.scratch):
            _log(f"a preview of run {child.run.name} in {time.monotonic() - child.started:.1f} s")
        if convert.rss(child.process.pid) > child.bound:
            self._end(child, kill=True)
            self._fail(
                child.run,
                f"the conversion needed more than {child.bound / 1e6:,.0f} MB of memory "
                f"(the bound: {convert.MAX_MB_ENV})",
            )
            return
        if self._starved(child):
            _log(f"the machine is busy: preparing run {child.run.name} at normal priority")
            child.urgent = convert.hurry(child.process.pid)  # in place: its work is kept
            if not child.urgent:
                self._end(child, kill=True)
                self._begin(child.run, urgent=True)
            return
        if child.run.asked:
            return
        if any(r.state == "queued" and r.asked for r in self._runs.values()):
            self._end(child, kill=True)
            child.run.state = "queued"

    def _starved(self, child: _Child) -> bool:
        """Whether someone waits for the child's run while it starves.

        Someone waits: its page asked within :data:`WAITING_S`, or a data request waits. It starves:
        at the lowest priority and not paused, it got under :data:`STARVED_SHARE` of a CPU over
        :data:`STARVED_S`: other work keeps the CPUs busy, and without help the conversion would not
        end.
        """
        now = time.monotonic()
        if child.urgent or child.paused or _store.capturing(self.logdir, summaries=True):
            child.mark = (now, convert.cpu_s(child.process.pid))
            return False
        name = child.run.name
        if not (self._waiting[name] or self._polled.get(name, 0) > now - WAITING_S):
            child.mark = (now, convert.cpu_s(child.process.pid))
            return False
        since, cpu = child.mark
        if now - since < STARVED_S:
            return False
        used = convert.cpu_s(child.process.pid)
        child.mark = (now, used)
        return (used - cpu) / (now - since) < STARVED_SHARE

    def _finish(self, child: _Child) -> None:
        run, code = child.run, child.process.returncode
        self._end(child, kill=False)
        run_dir = self.profile / run.name
        if code == 0 and run_dir.is_dir():
            try:
                done = convert.commit(child.scratch, run_dir, child.hosts, self.version)
            except OSError as error:
                done = False
                reason = f"cannot write the caches into the run: {error.strerror or error}"
            else:
                reason = "XProf's converter wrote no cache"
            if done:
                took = time.monotonic() - child.started
                self._rate = took / max(run.bytes, 1)
                run.state, run.reason, run.ready_at = "ready", "", time.monotonic()
                _log(f"prepared the timeline of run {run.name} in {took:.1f} s")
                self._lock.notify_all()
            else:
                self._fail(run, reason)
        elif run_dir.is_dir():
            self._fail(run, convert.why_ended(code, child.scratch / "convert.log"))
        convert.remove_scratch(child.scratch)

    def _end(self, child: _Child, kill: bool) -> None:
        if kill and child.process.poll() is None:
            child.process.kill()
            child.process.wait()
        child.log.close()
        if kill:
            convert.remove_scratch(child.scratch)
        self._child = None

    def _fail(self, run: _Run, reason: str) -> None:
        run.state, run.reason = "failed", reason
        _log(f"could not prepare the timeline of run {run.name}: {reason}")
        self._lock.notify_all()


def _log(message: str) -> None:
    print(f"[xprof_magic viewer {time.strftime('%F %T')}] {message}", file=sys.stderr, flush=True)
