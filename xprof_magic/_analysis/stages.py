"""A run folder through the analysis's stages, in order: :func:`summarize`.

1. read: the run's metadata (:mod:`xprof_magic._runs.metadata`) and, within the time budget, the
   timeline of the host it ran on (:mod:`.timeline`: ``<host>.xplane.pb`` -> plain facts),
   with the other hosts' for a multi-host run (:mod:`.summary.hosts`);
2. build: metadata and facts -> the :class:`~.model.summary.Summary` (:mod:`.summary`);
3. diagnose: its step-time breakdown and the verdict, as data (:mod:`.diagnosis`).

The summary holds figures; its words (the verdict's headline, fix and evidence, the notes)
are :mod:`.render`'s, made when it is shown, and nothing here imports it. This module names
no profiler: the backend's vocabulary, picked by the metadata's ``backend``, says what the
timeline's events mean.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from xprof_magic._analysis.cache import estimate_read_s
from xprof_magic._analysis.diagnosis import attribution, batches, breakdown, own
from xprof_magic._analysis.diagnosis.oom import out_of_memory
from xprof_magic._analysis.diagnosis.verdict import diagnose
from xprof_magic._analysis.model.diagnosis import Diagnosis
from xprof_magic._analysis.model.summary import Flaw, Gap, HostRow, Summary
from xprof_magic._analysis.summary import blocks, hosts
from xprof_magic._analysis.summary.blocks import input_shapes
from xprof_magic._analysis.summary.build import build
from xprof_magic._analysis.timeline.facts import ReadAborted, TraceFacts
from xprof_magic._analysis.timeline.read import read_trace
from xprof_magic._backends import TimelineNames, Vocabulary
from xprof_magic._backends.registry import BACKENDS, get_vocabulary
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs.metadata import RunMetadata
from xprof_magic._runs.store import METADATA_FILE

__all__ = ["DEFAULT_BUDGET_S", "summarize"]

DEFAULT_BUDGET_S = 2.0


def summarize(
    run_dir: str | os.PathLike[str], *, budget_s: float | None = DEFAULT_BUDGET_S
) -> Summary:
    """Summarize the run in ``run_dir``; never raises.

    ``budget_s`` bounds the time spent reading the timeline: when the capture is estimated
    (:func:`~xprof_magic._analysis.cache.estimate_read_s`) or found to need longer, the
    result is built from the metadata alone and has ``pending=True``; call again with
    ``budget_s=None`` (in a process of its own, see
    :func:`~xprof_magic._analysis.cache.summarize_in_subprocess`) for the full one.
    """
    started = time.perf_counter()
    path = Path(run_dir)
    try:
        with _collector_paused():
            summary = _summarize(path, budget_s, started)
    except Exception as error:  # the summary must never take the cell down with it
        summary = Summary(
            run=path.name,
            run_dir=str(path),
            missing=(Gap("analysis failed", error=str(error), names=(type(error).__name__,)),),
        )
    return replace(summary, read_s=round(time.perf_counter() - started, 4))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a summary is made, as it was after.

    The summary makes tens of thousands of objects (blocks, steps, the line sampler's looks)
    and keeps them: the collections their count set off walked every object for nothing
    (about 0.04 s of the 100 MB capture's summary). Whatever cycle it leaves is collected
    later."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _summarize(path: Path, budget_s: float | None, started: float) -> Summary:
    if not path.is_dir():
        return Summary(
            run=path.name,
            run_dir=str(path),
            missing=(Gap("no run folder", path=str(path)),),
        )
    meta, missing, warnings = _read_metadata(path)
    words = get_vocabulary(meta.backend)
    runtime = _reader_names(meta.backend)
    deadline = None if budget_s is None else started + budget_s
    xplanes = sorted(path.glob("*.xplane.pb"))
    host_file = _pick_host(xplanes, meta.host)
    facts: TraceFacts | None = None
    pending = False
    host_table: tuple[HostRow, ...] = ()
    if host_file is None:
        missing.append(Gap("no timeline", path=str(path)))
    else:
        facts, pending = _read_host(host_file, xplanes, meta, runtime, budget_s, deadline, missing)
    if host_file is not None and len(xplanes) > 1:
        if facts is not None:
            try:
                host_table = hosts.host_rows(
                    xplanes, {host_file: facts}, meta, words, runtime, deadline
                )
            except ReadAborted:
                pending = True
        if not host_table:
            others = tuple(p.name for p in xplanes if p != host_file)
            missing.append(Gap("other hosts", path=host_file.name, names=others))
    summary = build(path, meta, words, facts, host_file, tuple(missing), pending)
    if meta.status == "error" and meta.error is not None:
        oom = out_of_memory(meta.error.message, meta.cell_file)
        if oom is not None:
            summary = replace(summary, memory=replace(summary.memory, oom=oom))
    summary = replace(summary, hosts=host_table, slowest_host=hosts.slowest(host_table))
    found = _diagnose(summary, meta, words, facts)
    if found is not None:
        summary = replace(summary, diagnosis=found)
    return replace(summary, warnings=tuple(warnings))


def _diagnose(
    summary: Summary, meta: RunMetadata, words: Vocabulary, facts: TraceFacts | None
) -> Diagnosis | None:
    """The diagnosis, from the timeline's breakdown, else from the metadata's.

    None: no timeline and no wall time to measure against.
    """
    if facts is not None:
        looks = own.sampled(facts, meta, words)
        parts = batches.as_input(breakdown.of_trace(facts, meta, words), looks)
        return diagnose(
            summary,
            words,
            parts,
            step_rule=meta.step_rule or "",
            shapes=input_shapes(facts),
            launched=attribution.of_trace(facts, meta, words),
            programs=facts.programs,
            activity=attribution.activity(facts, meta, words, summary.steps),
            looks=looks,
            device_loader=any(b.name in words.timeline.input_pipeline for b in facts.blocks),
        )
    if meta.wall_s:
        parts = breakdown.of_metadata(meta, words)
        return diagnose(summary, words, parts, step_rule=meta.step_rule or "", source="metadata")
    return None


def _reader_names(backend: str) -> TimelineNames:
    """The event names the timeline reader is given for a run of ``backend``.

    The backend's own (its vocabulary's timeline names). A run that does not say which
    backend made it (no or unreadable metadata) gets every known backend's: any of them may
    have, and none's events occur in another's timeline.
    """
    if backend in BACKENDS:
        return get_vocabulary(backend).timeline
    every = [get_vocabulary(name).timeline for name in BACKENDS]
    return TimelineNames(
        compile_events=tuple(e for t in every for e in t.compile_events),
        compile_phases=frozenset(n for t in every for n in t.compile_phases),
        runtime_names=frozenset(n for t in every for n in t.runtime_names),
        runtime_prefixes=tuple(p for t in every for p in t.runtime_prefixes),
        waits=frozenset(n for t in every for n in t.waits),
        step_ends=frozenset(n for t in every for n in t.step_ends),
        launches=tuple(p for t in every for p in t.launches),
    )


def _read_host(
    host_file: Path,
    xplanes: list[Path],
    meta: RunMetadata,
    runtime: TimelineNames,
    budget_s: float | None,
    deadline: float | None,
    missing: list[Gap],
) -> tuple[TraceFacts | None, bool]:
    """The facts of the host the summary reads in depth, unless the budget says not now.

    Not now: ``pending``. What is missing for want of them goes into ``missing``.
    """
    facts: TraceFacts | None = None
    pending = budget_s is not None and estimate_read_s(host_file.parent) > budget_s
    if not pending:
        try:
            facts = read_trace(
                host_file,
                label_names=blocks.label_names(meta),
                cell_ns=meta.cell_ns,
                deadline=deadline,
                runtime=runtime,
            )
        except ReadAborted:
            pending = True
        except (ValueError, OSError) as error:
            missing.append(Gap("timeline unreadable", path=host_file.name, error=str(error)))
    if pending:
        size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
        missing.append(Gap("timeline not read", mb=size_mb, budget_s=budget_s or None))
    return facts, pending


def _read_metadata(path: Path) -> tuple[RunMetadata, list[Gap], list[Flaw]]:
    """The metadata; what is missing for want of it; warnings on fields that were unusable.

    A file of which nothing could be used makes the summary incomplete; a file with a few
    bad fields only loses those values, which a warning names.
    """
    meta = _metadata.read(path)
    if meta is None:
        return RunMetadata(), [Gap("no metadata", path=METADATA_FILE)], []
    if meta.problems and meta == RunMetadata():
        return meta, [Gap("metadata unusable", path=METADATA_FILE, error=meta.problems[0])], []
    warnings = [Flaw("metadata fields", problem) for problem in meta.problems]
    # What the capture itself said, e.g. which address of an on-demand capture gave nothing.
    warnings += [Flaw("capture message", message) for message in meta.messages]
    return meta, [], warnings


def _pick_host(xplanes: list[Path], host: str) -> Path | None:
    for p in xplanes:
        if p.name == f"{host}.xplane.pb":
            return p
    return xplanes[0] if xplanes else None
