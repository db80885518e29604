"""Run one capture: start the trace, let the caller run its code, stop, store, report.

IPython-free: the magic and the script API (:func:`capture`) share this machinery. A
:class:`Capture` never lets its own troubles replace the outcome of the user's code: if the
code raised, that exception is what the caller sees; if storing the run fails, the code's
result still stands and the problem is reported in one line.

Long because a capture is one lifecycle (start, step window, stop, store, result) whose
failure paths are only right when read together.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from xprof_magic import _labels, _metadata, _store
from xprof_magic._backends import Backend, MetricsSnapshot, get_backend, metrics_delta
from xprof_magic._plan import DEFAULT_PORT, NO_SERVER_ENV, Plan, server_by_default
from xprof_magic._result import CaptureResult, size_warning
from xprof_magic._steps import StepTracker, end_messages, parse_steps
from xprof_magic._units import seconds

__all__ = [
    "DEFAULT_PORT",
    "NO_SERVER_ENV",
    "Capture",
    "CaptureResult",
    "Plan",
    "capture",
    "last",
    "parse_steps",
]

_last: CaptureResult | None = None


def last() -> CaptureResult | None:
    """The last capture's result in this process, or None."""
    return _last


Notify = Callable[[str], None]
T = TypeVar("T")


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


class Capture:
    """One capture: :meth:`start`, :meth:`run` the code, :meth:`stop`; or a ``with`` block.

    ``start`` checks the log directory, starts the profiler server (once per process) and
    the trace, and refuses with nothing written; ``run`` times the code; ``stop`` waits for
    the device, stops the trace and stores the run; ``result`` then holds it. The magic
    uses the three steps, so that setting up its display between start and run is not
    counted as the cell's time; scripts use ``with``.
    """

    def __init__(
        self, plan: Plan, notify: Notify = _to_stderr, namespace: dict[str, Any] | None = None
    ) -> None:
        self.plan = plan.with_name()
        self.notify = notify
        # The user's names, so that profiler functions they imported by name are guarded too.
        self.namespace = namespace
        self.result: CaptureResult | None = None
        self.recorder: _labels.Recorder | None = None
        self._backend: Backend | None = None
        self._staging: _store.Staging | None = None
        self._recording: Any = None
        self._before = MetricsSnapshot()
        self._start_ns = 0
        self._t0 = 0.0
        self._messages: list[str] = []
        self._tracing = False
        self._hooks: Any = None
        self._user_hooks: Any = None
        self._watch: Any = None
        self._trace_ns: list[int] = []
        self._partial = False
        self._workers_said = False
        self._worker_methods: list[str] = []
        self._taken: set[str] = set()

    def start(self) -> Capture:
        """Check the log directory, start the server and the trace (or arm the window).

        Raises :class:`~xprof_magic._store.LogdirError` or
        :class:`~xprof_magic._backends.TraceAlreadyRunning` with nothing written.
        """
        if self.plan.remote is not None:
            from xprof_magic import _gcs

            self._taken = _gcs.check(_gcs.parse(self.plan.remote))
        staging = _store.begin(self.plan.logdir)
        windowed = self.plan.step_window is not None
        try:
            backend = get_backend(self.plan.backend)
            self._watch = backend.watch()
            self._watch.__enter__()
            self._before = backend.metrics()
            if not windowed:
                backend.start_trace(str(staging.path))
                self._tracing = True
        except BaseException:
            self._unwatch()
            _store.discard(staging)
            raise
        self._backend, self._staging = backend, staging
        try:
            if self.plan.server:
                self._start_server(backend)
        except BaseException:
            self._abandon()
            raise
        tracker = StepTracker(
            backend.event,
            watch_syncs=self.plan.steps,
            window=self.plan.step_window,
            start_trace=self._start_window,
            stop_trace=self._stop_window,
        )
        self.recorder = _labels.Recorder(backend.event, tracker)
        self.recorder.tracing = not windowed
        self._recording = _labels.recording(self.recorder)
        self._recording.__enter__()
        user_hooks = getattr(backend, "user_hooks", None)
        if user_hooks is not None:
            try:
                self._user_hooks = user_hooks(self._user_trace, self._workers, self.namespace)
                self._user_hooks.__enter__()
            except BaseException:
                self._user_hooks = None
                self._recording.__exit__(None, None, None)
                self._abandon()
                raise
        if self.plan.steps:
            try:
                self._hooks = backend.step_hooks(tracker.synced, tracker.user_step)
                self._hooks.__enter__()
            except BaseException:
                self._recording.__exit__(None, None, None)
                self._abandon()
                raise
        return self

    def run(self, code: Callable[[], T]) -> T:
        """Run the traced code and return its value; the capture's wall time starts here."""
        __tracebackhide__ = True
        self._begin()
        return code()

    def stop(self, error: BaseException | None = None) -> CaptureResult | None:
        """Wait for the device, stop the trace and store the run; ``error`` is how the code
        ended. An interrupt while stopping is re-raised once the trace is stopped (unless
        the code itself already failed). Returns :attr:`result` (None if nothing was stored).
        """
        self._stop(error)
        return self.result

    def __enter__(self) -> Capture:
        self.start()
        self._begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop(exc)

    def _begin(self) -> None:
        """The cell's wall time starts now, and steps are counted from here."""
        self._start_ns = time.time_ns()
        self._t0 = time.perf_counter()
        assert self.recorder is not None
        self.recorder.tracker.arm()

    def _start_window(self) -> bool:
        """Start the trace where the window's first step starts; never raise into the cell."""
        backend, staging, recorder = self._backend, self._staging, self.recorder
        assert backend is not None and staging is not None and recorder is not None
        try:
            backend.start_trace(str(staging.path))
        except Exception as error:
            window = recorder.tracker.window
            stop = _STOP.get(backend.name, "the profiler's stop_trace()")
            self._messages.append(
                f"--steps {window}: the trace could not start: {error}; stop the trace that "
                f"runs ({stop}) and run the cell again"
            )
            return False
        self._tracing = True
        self._trace_ns.append(time.time_ns())
        recorder.tracing = True
        return True

    def _stop_window(self) -> None:
        """Stop the trace where the window's last step ends, the device done with it.

        The cell waits here: for the device to finish the steps already launched, then for
        the profiler to write the capture.
        """
        backend, recorder = self._backend, self.recorder
        assert backend is not None and recorder is not None
        t0 = time.perf_counter()
        self._halt("stopping the trace after the window")
        self._trace_ns.append(time.time_ns())
        recorder.tracker.release()
        paused = seconds(time.perf_counter() - t0)
        self._messages.append(
            f"the trace stopped after step {recorder.tracker.last}; the cell went on "
            f"untraced (it paused {paused} to stop)"
        )

    def _halt(self, doing: str) -> None:
        """Stop the trace mid-cell, once the device is done with what was launched (only
        when the user's code started the runtime: the magic never starts it)."""
        backend, recorder = self._backend, self.recorder
        assert backend is not None and recorder is not None
        recorder.tracing = False
        try:
            if backend.runtime_started():
                backend.wait_for_device()
            backend.stop_trace()
        except Exception as error:
            self._messages.append(f"{doing} failed: {error}")
        self._tracing = False

    def _user_trace(self, call: str) -> None:
        """The user's code starts its own trace: stop the capture's, keep what it holds.

        One profiling session per process, and the user's wins: their call goes ahead as it
        would without the capture, and the run, cut here, is marked ``partial``.
        """
        backend, recorder = self._backend, self.recorder
        assert backend is not None and recorder is not None
        if not self._tracing:
            return
        self._halt(f"stopping the trace for your {call}()")
        self._partial = True
        if not self._trace_ns:
            self._trace_ns.append(self._start_ns)
        self._trace_ns.append(time.time_ns())
        recorder.tracker.release()
        message = (
            f"your own {call}() started a trace, so the magic stopped its own there (one "
            "trace per process): this run is partial, and the rest of the cell is in yours"
        )
        self._messages.append(message)

    def _workers(self, start_method: str, traceable: bool) -> str | None:
        """The code starts worker processes: the folder they trace themselves into, when
        they can (forked, while this trace runs); else say that the run lacks them."""
        if traceable and self._tracing and self._staging is not None:
            self._worker_methods.append(start_method)
            return str(self._staging.path / _WORKERS / str(len(self._worker_methods)))
        if self._workers_said:
            return None
        self._workers_said = True
        self._messages.append(
            f"the cell started worker processes (start method {start_method!r}); their own "
            "timelines are not in this run, which holds this process only. To capture a "
            "worker, start a server in it, xp.start_server(9500 + rank, only_on_master=False) "
            "(keep the object), and capture it from here with "
            "xp.trace('localhost:<port>', logdir, duration_ms=...) while it runs; or use "
            "start_method='fork', whose workers %%xprof traces as hosts rank<N>"
        )
        return None

    def _collect_workers(self, staging: _store.Staging) -> None:
        """Move the workers' timelines into the run's session, one host ``rank<N>`` each."""
        folder = staging.path / _WORKERS
        if not self._worker_methods:
            return
        sessions = [p for p in _store.profile_dir(staging.path).glob("*") if p.is_dir()]
        hosts: list[str] = []
        spawns = sorted(folder.glob("*/rank*"), key=lambda p: (int(p.parent.name), p.name))
        for rank in spawns if len(sessions) == 1 else []:
            for xplane in sorted(rank.glob("plugins/profile/*/*.xplane.pb")):
                host, taken = rank.name, 1
                while host in hosts:
                    taken += 1
                    host = f"{rank.name}-{taken}"
                with contextlib.suppress(OSError):
                    xplane.rename(sessions[0] / f"{host}.xplane.pb")
                    hosts.append(host)
        shutil.rmtree(folder, ignore_errors=True)
        if hosts:
            self._messages.append(
                f"the workers' timelines are in this run as hosts {', '.join(hosts)} "
                "(XProf's host menu; the summary's hosts table compares them)"
            )
        else:
            self._messages.append(
                "the cell started worker processes, but none wrote its timeline (killed, "
                "or its trace could not start), so this run holds this process only"
            )

    def _start_server(self, backend: Backend) -> None:
        status = backend.start_server(self.plan.port)
        said: set[str] = backend.__dict__.setdefault("_xprof_said", set())
        if status.message and status.message not in said:
            said.add(status.message)
            self.notify(f"xprof: {status.message}")

    def _unwatch(self) -> None:
        """Close the backend's watch of this capture, once."""
        watch, self._watch = self._watch, None
        if watch is not None:
            with contextlib.suppress(Exception):
                watch.__exit__(None, None, None)

    def _abandon(self) -> None:
        """Stop the trace and drop the staged capture (a start that failed half-way)."""
        self._unwatch()
        if self._backend is not None and self._tracing:
            self._tracing = False
            with contextlib.suppress(Exception):
                self._backend.stop_trace()
        if self._staging is not None:
            _store.discard(self._staging)

    def _stop(self, exc: BaseException | None) -> None:
        backend, staging, recorder = self._backend, self._staging, self.recorder
        assert backend is not None and staging is not None and recorder is not None
        sync_error: BaseException | None = None
        if exc is None and self.plan.sync and backend.runtime_started():
            # Part of the cell: in its wall time, and a block of its own, so that the
            # compile and run of the work it launches land in a labelled block.
            try:
                with _labels.label(f"{backend.name}.sync() (--sync)"):
                    backend.sync()
            except Exception as error:
                self._messages.append(f"--sync failed: {error}")
            except BaseException as error:  # KeyboardInterrupt: stop the trace all the same
                sync_error = error
        wall_s = time.perf_counter() - self._t0
        self._recording.__exit__(None, None, None)
        if self._user_hooks is not None:
            with contextlib.suppress(Exception):
                self._user_hooks.__exit__(None, None, None)
        tracker = recorder.tracker
        tracker.finish()
        if self._hooks is not None:
            with contextlib.suppress(Exception):
                self._hooks.__exit__(None, None, None)
        self._messages.extend(end_messages(tracker, self.plan.steps))
        if not self._tracing and tracker.state in ("before", "failed"):
            self._unwatch()
            _store.discard(staging)
            for message in self._messages:
                self.notify(f"xprof: {message}")
            if sync_error is not None and exc is None:
                raise sync_error
            return
        interrupted: BaseException | None = sync_error
        try:
            if self._tracing and backend.runtime_started():
                backend.wait_for_device()
        except Exception as error:
            self._messages.append(f"waiting for the device failed: {error}")
        except BaseException as error:  # KeyboardInterrupt: stop the trace all the same
            interrupted = error
        try:
            self._store(backend, staging, recorder, exc or interrupted, wall_s)
        except BaseException as error:
            interrupted = interrupted or error
        finally:
            self._unwatch()
        if interrupted is not None and exc is None:
            raise interrupted

    def _store(
        self,
        backend: Backend,
        staging: _store.Staging,
        recorder: _labels.Recorder,
        exc: BaseException | None,
        wall_s: float,
    ) -> None:
        try:
            if self._tracing:
                self._tracing = False
                try:
                    backend.stop_trace()
                finally:
                    recorder.tracker.release()
            self._collect_workers(staging)
            end_ns = time.time_ns()
            metadata = self._metadata(backend, recorder, exc, wall_s, end_ns)
            assert self.plan.name is not None
            run_dir = _store.commit(staging, self.plan.name, metadata.to_json(), self._taken_now())
        except BaseException as error:
            _store.discard(staging)
            if not isinstance(error, Exception):
                raise
            full = (isinstance(error, OSError) and error.errno == errno.ENOSPC) or (
                "No space left" in str(error)
            )
            hint = "free space or choose another --logdir" if full else "see the error above"
            self.notify(
                f"xprof: the capture could not be stored in {self.plan.logdir}: {error}. "
                f"The cell's own result is unaffected; {hint}."
            )
            return
        if self.plan.remote is not None:
            said, run_dir = _upload(self.plan.remote, run_dir)
            self._messages.append(said)
        warning = size_warning(_store.xplane_bytes(run_dir))
        if warning:
            self._messages.append(f"warning: {warning}")
        self.result = CaptureResult(
            run=run_dir.name,
            run_dir=run_dir,
            logdir=self.plan.logdir.absolute(),
            wall_s=wall_s,
            status=metadata.status,
            error=None
            if metadata.error is None
            else {"type": metadata.error.type, "message": metadata.error.message},
            labels=recorder.labels(),
            steps=recorder.steps(),
            backend=backend.name,
            device=metadata.device,
            metadata=replace(metadata, run=run_dir.name),
            messages=self._messages,
            value=recorder.value,
        )
        global _last
        _last = self.result

    def _taken_now(self) -> set[str]:
        """Run names taken in the bucket (none for a local log directory)."""
        if self.plan.remote is None:
            return set()
        from xprof_magic import _gcs

        return self._taken | _gcs.taken(_gcs.parse(self.plan.remote))

    def _metadata(
        self,
        backend: Backend,
        recorder: _labels.Recorder,
        exc: BaseException | None,
        wall_s: float,
        end_ns: int,
    ) -> _metadata.RunMetadata:
        from xprof_magic._version import __version__

        error = None if exc is None else _metadata.RunError(type(exc).__name__, _message(exc))
        delta = metrics_delta(self._before, backend.metrics())
        tracker = recorder.tracker
        start_ns = self._trace_ns[0] if self._trace_ns else self._start_ns
        if len(self._trace_ns) > 1:
            end_ns = self._trace_ns[1]
        steps = tuple(recorder.steps())
        return _metadata.RunMetadata(
            run=self.plan.name or "",
            cell=self.plan.cell,
            cell_number=self.plan.cell_number,
            labels=tuple(recorder.labels()),
            steps=steps,
            options=self.plan.options,
            start=_iso(start_ns),
            end=_iso(end_ns),
            start_ns=start_ns,
            end_ns=end_ns,
            wall_s=wall_s,
            status="error" if exc is not None else "partial" if self._partial else "ok",
            error=error,
            backend=backend.name,
            device=backend.device(),
            host=socket.gethostname(),
            pid=os.getpid(),
            versions={**backend.versions(), "xprof_magic": __version__},
            metrics=delta,
            step_rule=tracker.rule if steps else None,
            step_window=None if tracker.window is None else str(tracker.window),
            steps_first=tracker.first if steps else None,
            messages=tuple(self._messages),
        )


_WORKERS = "workers"
_STOP = {
    "torch_xla": "torch_xla.debug.profiler.stop_trace()",
    "jax": "jax.profiler.stop_trace()",
}


def _upload(remote: str, run_dir: Path) -> tuple[str, Path]:
    """Upload a committed run to its ``gs://`` log directory: the line that says how it went,
    and the run's folder (renamed if the bucket had its name by then)."""
    from xprof_magic import _gcs

    try:
        uploaded = _gcs.upload(_gcs.parse(remote), run_dir)
    except (_gcs.UploadError, _store.LogdirError) as error:
        return f"warning: {error}", run_dir
    return uploaded.text(), uploaded.run_dir


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose message could not be read>"


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).astimezone().isoformat()


def capture(
    logdir: str | os.PathLike[str] | None = None,
    name: str | None = None,
    *,
    steps: bool | str = False,
    sync: bool = False,
    server: bool | None = None,
    port: int = DEFAULT_PORT,
    backend: str = "torch_xla",
) -> Capture:
    """Trace a block of a script into one run, with the magic's machinery.

    ``with xprof_magic.capture(logdir="logs", name="train") as cap: ...`` then
    ``cap.result`` (also :func:`xprof_magic.last`) describes the run. Label blocks by hand
    with :func:`xprof_magic.label`; ``steps``/``sync`` mean what ``--steps``/``--sync`` do:
    ``steps=True`` marks steps, ``steps="100:103"`` traces only steps 100 to 102 (raises
    ``ValueError`` for a window that is not one).
    """
    marks, window = parse_steps(steps)
    text = str(logdir) if logdir is not None else _store.default_logdir_text()
    plan = Plan(
        logdir=_store.local_logdir(text),
        remote=text if _store.is_remote(text) else None,
        name=name,
        labels=False,
        steps=marks,
        step_window=window,
        sync=sync,
        server=server_by_default() if server is None else server,
        port=port,
        backend=backend,
        options={"api": True, "steps": steps, "sync": sync},
    )
    return Capture(plan)
