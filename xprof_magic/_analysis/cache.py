"""A summary kept beside its capture, and the full one read in a process of its own.

"Quick now, full later": a front end shows a summary within a fraction of a second, built
from the metadata alone when the timeline is too large to read in that time, and gets the
full one from :func:`summarize_in_subprocess` (directly, or through
:func:`~xprof_magic._analysis.summaries.summary_of`, which decides when). That reads the whole
timeline in ``python -m xprof_magic._analysis RUN_DIR`` (so a huge capture neither holds
the kernel's GIL nor grows the kernel's memory) and leaves ``xprof_magic_summary.json``
beside the capture, where later sessions find it without reading the timeline again.

After each full summary, the next one's process is started ahead (:class:`Spare`): it imports
the reader (numpy, protobuf, this package: about 0.2 s of CPU) and waits on its standard input
for a run folder, so that the next capture's summary starts reading at once.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from xprof_magic._analysis.model.summary import SUMMARY_SCHEMA, Summary
from xprof_magic._runs import store as _store
from xprof_magic._runs.store import SUMMARY_FILE, write_json

__all__ = [
    "READ_BYTES_PER_S",
    "SPARE",
    "SUMMARY_FILE",
    "WARM_ENV",
    "Spare",
    "estimate_read_s",
    "load_summary",
    "save_summary",
    "summarize_in_subprocess",
]

# The protobuf + numpy reader on a 2-core VM: about 30 MB of xplane.pb per CPU-second,
# about 20 MB/s wall when shared (make bench); the reader's deadline catches an estimate
# that was too hopeful.
READ_BYTES_PER_S = 20e6


SUMMARY_PROCESS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""What the summary's own process is started with: one thread for numpy's linear algebra,
which the summary does not use, so that the process holds one thread and may fork the
workers that read a big capture's biggest lines (:mod:`.timeline.forks`)."""


def estimate_read_s(run_dir: str | os.PathLike[str]) -> float:
    """Seconds a full summary is expected to need, from the size of the timeline files."""
    return _store.xplane_bytes(run_dir) / READ_BYTES_PER_S


def save_summary(summary: Summary, run_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write ``xprof_magic_summary.json`` beside the capture (atomically); return its path."""
    target = Path(run_dir if run_dir is not None else summary.run_dir) / SUMMARY_FILE
    write_json(target, summary.to_json())
    return target


def load_summary(run_dir: str | os.PathLike[str]) -> Summary | None:
    """The saved summary of ``run_dir``, or None when absent, unreadable or out of date.

    Out of date: of an unknown schema, or of an earlier one where the timeline is there to read
    again (a summary of schema 2 alone still shows, in the words it was saved with).
    """
    try:
        data = json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
        summary = Summary.from_json(data)
    except (OSError, ValueError, TypeError):
        return None
    if summary.schema != SUMMARY_SCHEMA and _store.xplane_bytes(run_dir) > 0:
        return None
    return summary


WARM_ENV = "XPROF_MAGIC_WARM_SUMMARY"
"""``0`` keeps no summary process started ahead (:class:`Spare`): each summary starts its own."""


def _started(run_dir: str) -> subprocess.Popen[bytes]:
    """``python -m xprof_magic._analysis RUN_DIR`` (``-``: the folder read from its stdin)."""
    return subprocess.Popen(
        [sys.executable, "-m", "xprof_magic._analysis", run_dir],
        env={**os.environ, **SUMMARY_PROCESS_ENV},
        stdin=subprocess.PIPE if run_dir == "-" else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


class Spare:
    """One summary process started ahead, its imports done, waiting for a run folder.

    :meth:`take` gives it to the next summary, if it is alive and the environment is still the
    one it was started with (a variable the reader reads may have changed since); else it is
    ended and the summary starts its own. :meth:`prepare` starts the next one, unless
    :data:`WARM_ENV` is ``0``. It waits on its standard input, using no CPU; when the kernel
    ends, the pipe closes and so does it (:meth:`close` at exit, too).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}

    @property
    def waiting(self) -> subprocess.Popen[bytes] | None:
        """The process started ahead, if one is (alive or not)."""
        return self._process

    def take(self) -> subprocess.Popen[bytes] | None:
        """The process started ahead, now this caller's; None when there is none fit to use."""
        with self._lock:
            process, env, self._process = self._process, self._env, None
        if process is None:
            return None
        if process.poll() is None and env == dict(os.environ):
            return process
        _ended(process)
        return None

    def prepare(self) -> None:
        """Start the next summary's process now, unless one waits already or they are off."""
        if os.environ.get(WARM_ENV, "").strip() == "0":
            return
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            try:
                self._process, self._env = _started("-"), dict(os.environ)
            except OSError:
                self._process = None

    def close(self) -> None:
        """End the process waiting, if any."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            _ended(process)


def _ended(process: subprocess.Popen[bytes]) -> None:
    """Close a waiting process's input (it exits at once) and reap it."""
    try:
        process.communicate(timeout=5)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


SPARE = Spare()
atexit.register(SPARE.close)


def summarize_in_subprocess(run_dir: str | os.PathLike[str]) -> tuple[Summary | None, str]:
    """Read the whole timeline in a process of its own and return the summary it saved.

    Blocks until that process ends: the one :data:`SPARE` started ahead, given the folder,
    else a new one. Then the next one is started ahead. When it saved nothing, the summary is
    None and the second item says why (the last line the process wrote to stderr).
    """
    target = os.path.abspath(run_dir)
    process = SPARE.take()
    if process is not None:
        _, err = process.communicate((target + "\n").encode())
    else:
        process = _started(target)
        _, err = process.communicate()
    SPARE.prepare()
    summary = load_summary(run_dir)
    if summary is not None:
        return summary, ""
    last = err.decode(errors="replace").strip().splitlines()[-1:]
    return None, last[0] if last else f"the summary process exited with status {process.returncode}"
