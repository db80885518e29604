"""Worker processes for the timeline pass of a big capture: its biggest lines, in parallel.

A 100 MB capture of torch_xla on the CPU holds most of its events on two or three
``tf_XLAEigen`` threads, each read in about a second, and reading a line is CPU work in
protobuf's runtime and numpy under one GIL. Lines are independent until their sums are
added, so the biggest go to worker processes while this process reads the rest.

A worker is a fresh interpreter running ``python -m xprof_magic._analysis.timeline.worker``,
started before the file is read (its imports take about 0.2 s) and given one task through its
stdin: its lines, still serialized, written by a thread of this process so that reading
goes on meanwhile. It answers with its lines' parts on stdout. ``multiprocessing``'s spawn
(which imports the caller's ``__main__`` again, re-running a script that has no ``if
__name__`` guard) is not used, nor ``fork`` in a process that holds threads (a kernel, a
training script); a process with one thread, as the summary's own, forks its workers
instead (:mod:`.forks`: nothing to import, nothing to send).
Anything that goes wrong in a worker costs only time: the caller reads those lines itself.

``XPROF_MAGIC_SUMMARY_WORKERS`` sets the number of workers (``0``: read everything in this
process); by default it is one less than the CPUs this process may use, at most 8.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MIN_BYTES", "WORKERS_ENV", "Pool", "WorkerFailed", "assign", "worker_count"]

WORKERS_ENV = "XPROF_MAGIC_SUMMARY_WORKERS"
MAX_WORKERS = 8
MIN_BYTES = 200_000_000
"""Timelines smaller than this are read in one process: a worker's start costs more. With
lines decoded by :mod:`.wire`, a 100 MB capture took 2.71 s (1.95 s CPU) in one process
and 2.60 s (1.61 s + 1.00 s CPU) with one worker on a busy 2-core machine: a tenth of a
second for a third more CPU. A forked worker (:mod:`.forks`) starts for nothing, but its
work does not: every page of its working set (about 150 MB for a 41 MB line) is faulted in
afresh, where one process reads its second big line in the pages of the first. On the same
machine, busy, the 100 MB capture took 0.07–0.23 s more CPU with a forked child (2.1× a
plain parse against 1.9× in one process) and was slower in six runs of eight, and the
child's own memory (most of its 160 MB) came on top of this process's."""
LINE_MIN_BYTES = 1_000_000
"""Smaller lines stay here: a worker's share of the work is worth its start only above it."""
START_BYTES = 6_000_000
"""What a worker's start (interpreter, imports, receiving its lines) is worth, in bytes of
timeline this process reads meanwhile."""
ANSWER_S = 60.0
"""How long a worker may take before its answer begins, besides a second per MB it reads
(it reads tens of MB a second): this only catches a worker that hangs."""
_WORKER_MODULE = "xprof_magic._analysis.timeline.worker"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class WorkerFailed(Exception):
    """A worker gave no answer; the caller does its share itself."""


def worker_count(total_bytes: int) -> int:
    """How many workers a timeline of ``total_bytes`` gets (0: none)."""
    wanted = os.environ.get(WORKERS_ENV, "").strip()
    if wanted.isdigit():
        return min(int(wanted), MAX_WORKERS)
    if total_bytes < MIN_BYTES:
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, MAX_WORKERS))


def assign(sizes: Sequence[int], workers: int) -> list[int]:
    """Who reads each line: ``-1`` this process, ``k`` worker ``k``.

    Longest first, each to whoever would finish it soonest, sizes standing for time: a
    worker starts :data:`START_BYTES` behind, and lines under :data:`LINE_MIN_BYTES` stay.
    """
    owner = [-1] * len(sizes)
    if workers <= 0:
        return owner
    load = [0] + [START_BYTES] * workers
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        least = 0 if sizes[i] < LINE_MIN_BYTES else min(range(len(load)), key=load.__getitem__)
        load[least] += sizes[i]
        owner[i] = least - 1
    return owner


class Pool:
    """``workers`` worker processes, started now and waiting for one task each.

    Use it in a ``with`` block: leaving it stops any worker still running.
    """

    def __init__(self, workers: int):
        self._procs: list[subprocess.Popen[bytes] | None] = []
        self._writers: dict[int, threading.Thread] = {}
        if workers <= 0:
            return
        env = _worker_env()
        for _ in range(workers):
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", _WORKER_MODULE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    cwd=_PACKAGE_ROOT,  # ``-m`` puts the folder first on sys.path: not the user's
                )
            except OSError:
                break
            self._procs.append(proc)

    @property
    def workers(self) -> int:
        """Workers still waiting for a task."""
        return len(self.live())

    def live(self) -> list[int]:
        """The numbers of the workers still waiting for a task (each takes one)."""
        return [k for k, proc in enumerate(self._procs) if proc is not None]

    def send(self, worker: int, task: Any) -> None:
        """Give worker ``worker`` its task (it answers once), from a thread.

        The worker may still be starting, and the pipe holds only a little.
        """
        proc = self._procs[worker]
        if proc is None or proc.stdin is None:
            return
        writer = threading.Thread(target=_write, args=(proc, task), daemon=True)
        writer.start()
        self._writers[worker] = writer

    def receive(self, worker: int, timeout_s: float) -> Any:
        """Worker ``worker``'s answer.

        :class:`WorkerFailed` when there is none, or none begins within ``timeout_s`` (the
        worker is stopped then).
        """
        proc = self._procs[worker]
        if proc is None or proc.stdout is None:
            raise WorkerFailed(f"worker {worker} is not running")
        writer = self._writers.pop(worker, None)
        try:
            if writer is not None:
                writer.join(timeout_s)
            with contextlib.suppress(OSError, ValueError):  # no select on this pipe: wait
                if not select.select([proc.stdout], [], [], timeout_s)[0]:
                    raise WorkerFailed(f"worker {worker} gave no answer in {timeout_s:.0f} s")
            answer = pickle.load(proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError) as error:
            raise WorkerFailed(f"worker {worker} gave no answer: {error!r}") from None
        finally:
            self._stop(worker)
        if isinstance(answer, BaseException):
            raise WorkerFailed(f"worker {worker} failed: {answer!r}")
        return answer

    def _stop(self, worker: int) -> None:
        proc, self._procs[worker] = self._procs[worker], None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        writer = self._writers.pop(worker, None)
        if writer is not None:
            writer.join()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a task's rest, unwritten to a dead worker
                    stream.close()
        proc.wait()

    def close(self) -> None:
        for worker in range(len(self._procs)):
            self._stop(worker)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _worker_env() -> dict[str, str]:
    """This process's environment, with this package importable in the worker.

    A checkout added to ``sys.path`` at run time is put on ``PYTHONPATH``; an installed
    package needs nothing (and putting site-packages ahead of the standard library could
    shadow it).
    """
    import site

    env = dict(os.environ)
    installed = {*site.getsitepackages(), site.getusersitepackages()}
    if _PACKAGE_ROOT not in {str(Path(p).resolve()) for p in installed}:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


def _write(proc: subprocess.Popen[bytes], task: Any) -> None:
    """Pickle a task into a worker's stdin and close it; a worker that died reads nothing.

    Pickled straight into the pipe, its big buffers (lines still in the mapped file) are
    written from where they are, not first copied into one payload.
    """
    if proc.stdin is None:
        return
    try:
        pickle.dump(task, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        proc.stdin.close()
    except (OSError, ValueError, pickle.PicklingError):
        pass
