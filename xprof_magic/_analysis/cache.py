"""A summary kept beside its capture, and the full one read in a process of its own.

"Quick now, full later": a front end shows a summary within a fraction of a second, built
from the metadata alone when the timeline is too large to read in that time, and gets the
full one from :func:`summarize_in_subprocess` (directly, or through
:func:`~xprof_magic._analysis.summaries.summary_of`, which decides when). That reads the whole
timeline in ``python -m xprof_magic._analysis RUN_DIR`` (so a huge capture neither holds
the kernel's GIL nor grows the kernel's memory) and leaves ``xprof_magic_summary.json``
beside the capture, where later sessions find it without reading the timeline again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from xprof_magic._analysis.model.summary import SUMMARY_SCHEMA, Summary
from xprof_magic._runs import store as _store
from xprof_magic._runs.store import SUMMARY_FILE, write_json

__all__ = [
    "READ_BYTES_PER_S",
    "SUMMARY_FILE",
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


def summarize_in_subprocess(run_dir: str | os.PathLike[str]) -> tuple[Summary | None, str]:
    """Read the whole timeline in a process of its own and return the summary it saved.

    Blocks until that process ends. When it saved nothing, the summary is None and the
    second item says why (the last line the process wrote to stderr).
    """
    done = subprocess.run(
        [sys.executable, "-m", "xprof_magic._analysis", str(run_dir)],
        env={**os.environ, **SUMMARY_PROCESS_ENV},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    summary = load_summary(run_dir)
    if summary is not None:
        return summary, ""
    last = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
    return None, last[0] if last else f"the summary process exited with status {done.returncode}"
