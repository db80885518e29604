"""Forked workers for a big capture's biggest lines, in a process where forking is safe.

A forked child shares its parent's memory: the modules already imported, the file already
mapped. It starts in a few milliseconds and is sent nothing, where a fresh interpreter
(:mod:`.pool`) costs its imports (about 0.2 s of CPU) and a copy of its lines. It is used
where such workers are (past :data:`.pool.MIN_BYTES`, or as ``XPROF_MAGIC_SUMMARY_WORKERS``
asks), in their place.

Forking is safe only where the process has a single thread: a thread that holds a lock
when the process forks leaves it held for ever in the child. :func:`safe` asks the system
(``/proc/self/task``), not Python alone, and a process that cannot tell never forks. The
summary's own process (``python -m xprof_magic._analysis``, started by
:func:`~xprof_magic._analysis.cache.summarize_in_subprocess` with one BLAS thread) has one
thread; a notebook's kernel, a training script with threads, or a test runner read every
line themselves, or start :mod:`.pool`'s fresh interpreters past its size.

A child runs its share and writes the pickled parts (or the exception that stopped it) to
a pipe, then ends at once (``os._exit``: nothing of the parent's runs at its exit). Anything
that goes wrong costs only time: the parent reads those lines itself (:mod:`.parallel`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from xprof_magic._analysis.timeline import pool
from xprof_magic._analysis.timeline.pool import WorkerFailed

__all__ = ["Forks", "assign", "safe"]

HERE_WEIGHT = 4
"""How many bytes of a line kept here (a Python thread's) one byte of a runtime thread's line
is worth in time: a Python thread's events are nested deeper, hold the blocks and steps, and
cost about four times as much a byte (0.22 s for the 5.7 MB Python line of the 100 MB
bench capture, 0.42 s for a 41 MB runtime line)."""


def assign(sizes: Sequence[int], here: Sequence[bool], workers: int) -> list[int]:
    """Who reads each line: ``-1`` this process, ``k`` child ``k``.

    Lines marked ``here`` (Python threads': their blocks and steps are many small objects,
    which would cost more to send back than to make) and lines under
    :data:`.pool.LINE_MIN_BYTES` stay; the others go longest first to whoever would finish
    soonest, this process starting with its own lines' time (:data:`HERE_WEIGHT`) and a
    child with nothing to start (no imports, nothing sent).
    """
    owner = [-1] * len(sizes)
    if workers <= 0:
        return owner
    load = [HERE_WEIGHT * sum(size for size, kept in zip(sizes, here, strict=True) if kept)]
    load += [0] * workers
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if here[i] or sizes[i] < pool.LINE_MIN_BYTES:
            continue
        least = min(range(len(load)), key=load.__getitem__)
        load[least] += sizes[i]
        owner[i] = least - 1
    return owner


def safe() -> bool:
    """Whether this process may fork: it has one thread, as the system counts them."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc (not Linux): the threads cannot be counted
        return False


class Forks:
    """Up to ``workers`` children, each forked when given its share (:meth:`send`).

    Use it in a ``with`` block: leaving it stops any child still running.
    """

    def __init__(self, workers: int):
        self._count = max(0, workers)
        self._kids: dict[int, tuple[int, int]] = {}  # worker: (pid, read end of its pipe)
        self._used: set[int] = set()
        self._ending: list[int] = []  # children that answered: waited for in close()

    @property
    def workers(self) -> int:
        """Children that may still be started."""
        return len(self.live())

    def live(self) -> list[int]:
        """The numbers of the children not started yet (each takes one share).

        Empty once this process holds a thread besides its own.
        """
        if not safe():
            return []
        return [k for k in range(self._count) if k not in self._used]

    def send(self, worker: int, job: Callable[[], Any]) -> None:
        """Fork child ``worker`` to run ``job`` (its answer is :meth:`receive`'s).

        Nothing is forked where :func:`safe` says no; :meth:`receive` then fails.
        """
        self._used.add(worker)
        if not safe():
            return
        read_end, write_end = os.pipe()
        # The parent's objects out of the child's collections: no page of theirs copied for
        # the collector's marks.
        gc.freeze()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return
        finally:
            gc.unfreeze()
        if pid == 0:  # the child: its job, its answer, its end
            try:
                os.close(read_end)
                _answer(job, write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        self._kids[worker] = (pid, read_end)

    def receive(self, worker: int, timeout_s: float) -> Any:
        """Child ``worker``'s answer.

        :class:`WorkerFailed` when there is none, or none begins within ``timeout_s`` (the
        child is stopped then).
        """
        kid = self._kids.get(worker)
        if kid is None:
            raise WorkerFailed(f"worker {worker} was not started")
        try:
            if not select.select([kid[1]], [], [], timeout_s)[0]:
                raise WorkerFailed(f"worker {worker} gave no answer in {timeout_s:.0f} s")
            with os.fdopen(os.dup(kid[1]), "rb") as answers:
                answer = pickle.load(answers)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError) as error:
            self._stop(worker)
            raise WorkerFailed(f"worker {worker} gave no answer: {error!r}") from None
        except BaseException:
            self._stop(worker)
            raise
        self._stop(worker, answered=True)
        if isinstance(answer, BaseException):
            raise WorkerFailed(f"worker {worker} failed: {answer!r}")
        return answer

    def _stop(self, worker: int, answered: bool = False) -> None:
        """Close child ``worker``'s pipe; one that has not answered is killed and waited for.

        One that answered ends by itself (giving its memory back takes it a while): it is
        waited for in :meth:`close`, meanwhile this process goes on.
        """
        kid = self._kids.pop(worker, None)
        if kid is None:
            return
        pid, read_end = kid
        os.close(read_end)
        if answered:
            self._ending.append(pid)
            return
        with contextlib.suppress(OSError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)

    def close(self) -> None:
        """Stop every child still running, and wait for the end of those that answered."""
        for worker in list(self._kids):
            self._stop(worker)
        while self._ending:
            with contextlib.suppress(OSError):
                os.waitpid(self._ending.pop(), 0)

    def __enter__(self) -> Forks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _answer(job: Callable[[], Any], write_end: int) -> None:
    """In the child: run ``job``, write its pickled result (or its exception) to the pipe."""
    try:
        answer: object = job()
    except BaseException as error:  # the parent reads the lines itself
        answer = WorkerFailed(repr(error))
    with os.fdopen(write_end, "wb") as out:
        pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
