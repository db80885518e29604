"""The one way a front end asks for a run's summary: :func:`summary_of`.

It decides, in one place, between the summary saved beside the capture, one from the
metadata alone (a timeline protobuf cannot parse), a quick one read within the caller's time
budget, and the whole timeline read in the caller's process or in a process of its own; and it
saves what it read when it is complete, so that the next caller finds it. The notebook, the
``%xprof`` commands and :func:`xprof_magic.summarize` all call it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path

from xprof_magic._analysis.cache import (
    estimate_read_s,
    load_summary,
    save_summary,
    summarize_in_subprocess,
)
from xprof_magic._analysis.model.summary import Gap, Summary
from xprof_magic._analysis.stages import summarize
from xprof_magic._capture.result import PROTOBUF_LIMIT_BYTES
from xprof_magic._runs import store as _store

__all__ = ["FULL_SUMMARY_MAX_BYTES", "summary_of"]

# Protobuf cannot parse a message over 2 GiB: such a timeline cannot be read at all.
FULL_SUMMARY_MAX_BYTES = PROTOBUF_LIMIT_BYTES - 1


def summary_of(
    run_dir: str | os.PathLike[str], *, budget_s: float | None, apart: bool = False
) -> Summary:
    """The summary of ``run_dir``; never raises for a damaged run.

    ``budget_s`` is how long this process may spend reading the timeline; None reads all of
    it here. With a budget, a timeline that needs longer gives a quick summary marked
    ``pending``, unless ``apart``: then it is read whole in a process of its own (which
    neither holds this process's GIL nor grows its memory), and here if that process fails.
    A summary that is final (no budget, or ``apart``) may be a saved one that is not
    pending; a quick one reuses only a complete saved one.
    """
    path = Path(run_dir)
    final = budget_s is None or apart
    saved = load_summary(path)
    if saved is not None and (saved.complete or (final and not saved.pending)):
        return saved
    size = _store.xplane_bytes(path)
    if size > FULL_SUMMARY_MAX_BYTES:
        return _metadata_only(path, size)
    if apart and budget_s is not None and estimate_read_s(path) > budget_s:
        whole, _ = summarize_in_subprocess(path)
        if whole is not None:
            return whole
    summary = summarize(path, budget_s=None if apart else budget_s)
    if summary.complete:
        with contextlib.suppress(OSError):
            save_summary(summary, path)
    return summary


def _metadata_only(run_dir: Path, size: int) -> Summary:
    """A summary from the metadata alone, saying why the timeline was not read."""
    quick = summarize(run_dir, budget_s=0.0)
    too_large = Gap("timeline too large", mb=size / 2**20)  # the reason it was not read
    kept = tuple(gap for gap in quick.missing if gap.what != "timeline not read")
    return replace(quick, pending=False, missing=(*kept, too_large))
