"""A run folder -> a :class:`~xprof_magic._analysis.model.summary.Summary`.

Two sources, read by their own modules: the run's metadata (:class:`RunMetadata`: wall
time, status, device, the magic's label and step timers, and the backend's counters for
this cell alone) and the timeline (:func:`~xprof_magic._analysis.timeline.trace.read_trace`). The
backend's metric names and advice come from its :class:`~xprof_magic._backends.Vocabulary`,
picked by the metadata's ``backend``; this module names no profiler.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from xprof_magic import _metadata
from xprof_magic._analysis.cache import estimate_read_s
from xprof_magic._analysis.diagnosis import verdict
from xprof_magic._analysis.model.summary import (
    Compiles,
    CompileSite,
    Fallback,
    HostRow,
    LabelRow,
    Note,
    StepStats,
    Summary,
    Timed,
)
from xprof_magic._analysis.render.notes import notes_for
from xprof_magic._analysis.summary import blocks, hosts
from xprof_magic._analysis.summary.device import device_info, top_host_ops, top_ops
from xprof_magic._analysis.timeline.facts import ReadAborted, TraceFacts
from xprof_magic._analysis.timeline.trace import read_trace
from xprof_magic._backends import VOCABULARIES, TimelineNames, Vocabulary, get_vocabulary
from xprof_magic._metadata import MetricTotal, RunMetadata
from xprof_magic._steps import STEP_EVENT
from xprof_magic._store import METADATA_FILE

__all__ = ["DEFAULT_BUDGET_S", "summarize"]

DEFAULT_BUDGET_S = 2.0
MANY_COMPILES_IN_A_LOOP = 3
MANY_COMPILES_IN_A_CALL = 6
"""Compilations in one run of a block that mean the same code built new graphs: a loop's
iterations, or one call (``model.generate``, whose every new length is a new graph). A call
is allowed more, since one training step may compile forward, backward and optimizer."""


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
        summary = _summarize(path, budget_s, started)
    except Exception as error:  # the summary must never take the cell down with it
        summary = Summary(
            run=path.name,
            run_dir=str(path),
            missing=(f"the analysis failed ({type(error).__name__}: {error}); please report it",),
            notes=(Note("error", f"No summary: the analysis failed with {type(error).__name__}."),),
        )
    return replace(summary, read_s=round(time.perf_counter() - started, 4))


def _summarize(path: Path, budget_s: float | None, started: float) -> Summary:
    if not path.is_dir():
        return Summary(
            run=path.name,
            run_dir=str(path),
            missing=(f"the run folder {path} does not exist or is not a folder",),
            notes=(Note("error", f"No capture at {path}: check the run name or --logdir."),),
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
        missing.append(
            f"no <host>.xplane.pb in {path}: the profiler wrote no timeline, so labels from "
            "the trace, compile sites, ops and busy time are absent"
        )
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
            others = ", ".join(p.name for p in xplanes if p != host_file)
            missing.append(f"only host {host_file.name} is summarized; also captured: {others}")
    summary = _build(path, meta, words, facts, host_file, tuple(missing), pending)
    summary = replace(summary, hosts=host_table, slowest_host=hosts.slowest(host_table))
    if facts is not None:
        summary = replace(summary, diagnosis=verdict.from_trace(summary, meta, words, facts))
    elif meta.wall_s:
        summary = replace(summary, diagnosis=verdict.from_metadata(summary, meta, words))
    return replace(summary, notes=(*notes_for(summary, words), *warnings))


def _reader_names(backend: str) -> TimelineNames:
    """The event names the timeline reader is given for a run of ``backend``.

    The backend's own (its vocabulary's timeline names). A run that does not say which
    backend made it (no or unreadable metadata) gets every known backend's: any of them may
    have, and none's events occur in another's timeline.
    """
    if backend in VOCABULARIES:
        return get_vocabulary(backend).timeline
    every = [get_vocabulary(name).timeline for name in VOCABULARIES]
    return TimelineNames(
        compile_events=tuple(e for t in every for e in t.compile_events),
        runtime_names=frozenset(n for t in every for n in t.runtime_names),
        runtime_prefixes=tuple(p for t in every for p in t.runtime_prefixes),
    )


def _read_host(
    host_file: Path,
    xplanes: list[Path],
    meta: RunMetadata,
    runtime: TimelineNames,
    budget_s: float | None,
    deadline: float | None,
    missing: list[str],
) -> tuple[TraceFacts | None, bool]:
    """The facts of the host the summary reads in depth, unless the budget says not now
    (then ``pending``); what is missing for want of them goes into ``missing``."""
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
            missing.append(f"the timeline {host_file.name} could not be read ({error})")
    if pending:
        size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
        why = (
            f"reading it takes longer than the {budget_s:g} s budget"
            if budget_s
            else "it was left for the full summary"
        )
        missing.append(
            f"the timeline ({size_mb:.1f} MB) was not read: {why}, so labels and steps "
            "come from the magic's timers and compile sites, ops and busy time are absent"
        )
    return facts, pending


def _read_metadata(path: Path) -> tuple[RunMetadata, list[str], list[Note]]:
    """The metadata; what is missing for want of it; warnings on fields that were unusable.

    A file of which nothing could be used makes the summary incomplete; a file with a few
    bad fields only loses those values, which a warning names.
    """
    meta = _metadata.read(path)
    if meta is None:
        return (
            RunMetadata(),
            [
                f"no {METADATA_FILE}: wall time, status and the backend's metrics (compiles, "
                "transfers, CPU fallbacks) are unknown; was the run made by xprof_magic?"
            ],
            [],
        )
    if meta.problems and meta == RunMetadata():
        return meta, [f"{meta.problems[0]}; metrics and wall time are unknown"], []
    warnings = [Note("warning", f"{p}; those values are unknown.") for p in meta.problems]
    # What the capture itself said, e.g. which address of an on-demand capture gave nothing.
    warnings += [Note("warning", message) for message in meta.messages]
    return meta, [], warnings


def _pick_host(xplanes: list[Path], host: str) -> Path | None:
    for p in xplanes:
        if p.name == f"{host}.xplane.pb":
            return p
    return xplanes[0] if xplanes else None


def _build(
    path: Path,
    meta: RunMetadata,
    words: Vocabulary,
    facts: TraceFacts | None,
    host_file: Path | None,
    missing: tuple[str, ...],
    pending: bool,
) -> Summary:
    names = words.metrics
    counters, timers = meta.metrics.counters, meta.metrics.metrics
    labels, label_source, steps, compiled, in_steps = _blocks(meta, words, facts)
    missing_all = list(missing)
    if facts is not None:
        missing_all.extend(blocks.labels_not_in_trace(meta, facts))
    return Summary(
        run=meta.run or path.name,
        run_dir=str(path),
        host=host_file.name[: -len(".xplane.pb")] if host_file else "",
        status=meta.status,
        error=_error_text(meta.error),
        cell=meta.cell or "",
        start=meta.start,
        wall_s=meta.wall_s,
        backend=meta.backend,
        versions=tuple(sorted(meta.versions.items())),
        complete=facts is not None and not missing_all,
        pending=pending,
        missing=tuple(missing_all),
        device=device_info(meta.device, facts, words),
        labels=labels,
        label_source=label_source,
        steps=steps,
        compiles=_compiles(
            timers, counters, words, facts, labels, compiled, in_steps, meta.metrics.notes
        ),
        executions=_timed(timers, names.execute_time),
        to_device=_timed(timers, names.to_device_time, names.to_device_bytes),
        from_device=_timed(timers, names.from_device_time, names.from_device_bytes),
        fallbacks=_fallbacks(counters, words),
        host_ops=top_host_ops(facts),
        device_ops=top_ops(facts.device_ops if facts else {}, "XLA op"),
        compile_ops=top_ops(facts.compile_ops if facts else {}, "compile"),
        events=facts.events if facts else 0,
    )


def _blocks(
    meta: RunMetadata, words: Vocabulary, facts: TraceFacts | None
) -> tuple[tuple[LabelRow, ...], str, StepStats | None, blocks.RunsByRow, blocks.RunsByRow]:
    """Labels, where they came from, and steps: from the timeline when it was read, else
    from the magic's timers; with the runs of each label that compiled, and their steps."""
    compiled: blocks.RunsByRow = {}
    in_steps: blocks.RunsByRow = {}
    if facts is not None:
        own_steps = (
            frozenset({STEP_EVENT}) if meta.step_rule in ("sync", "iteration") else frozenset()
        )
        labels, compiled, in_steps = blocks.labels_from_trace(
            facts, meta.wall_s, own_steps, words.timeline.input_pipeline
        )
        label_source = "trace"
        steps = blocks.steps_from_trace(facts) or blocks.steps_from_metadata(meta)
    else:
        labels, label_source = blocks.labels_from_metadata(meta, meta.wall_s), "metadata"
        steps = blocks.steps_from_metadata(meta)
    if not labels:
        label_source = "none"
    return labels, label_source, steps, compiled, in_steps


def _error_text(error: _metadata.RunError | None) -> str | None:
    if error is None:
        return None
    return f"{error.type}: {error.message}" if error.message else error.type


def _timed(timers: Mapping[str, MetricTotal], name: str, bytes_name: str = "") -> Timed | None:
    entry = timers.get(name) if name else None
    if entry is None:
        return None
    # The capture stores every metric's accumulator under "total_s"; for data it is bytes.
    size = timers[bytes_name].total_s if bytes_name and bytes_name in timers else None
    return Timed(count=entry.count, total_s=entry.total_s, bytes=size)


def _compiles(
    timers: Mapping[str, MetricTotal],
    counters: Mapping[str, int],
    words: Vocabulary,
    facts: TraceFacts | None,
    labels: tuple[LabelRow, ...],
    compiled: blocks.RunsByRow,
    in_steps: blocks.RunsByRow,
    meta_notes: tuple[str, ...] = (),
) -> Compiles:
    names = words.metrics
    compile_time = _timed(timers, names.compile_time)
    hits = counters.get(names.compile_cache_hits) if names.compile_cache_hits else None
    sites = [_site(row, compiled, in_steps) for row in labels if row.compiles]
    # A metrics delta leaves out what did not change: no compile metric means none compiled.
    none_compiled = bool(timers) and bool(names.compile_time) and compile_time is None
    known_hits = bool(counters) and bool(names.compile_cache_hits)
    return Compiles(
        count=compile_time.count if compile_time else (0 if none_compiled else None),
        total_s=compile_time.total_s if compile_time else (0.0 if none_compiled else None),
        cache_hits=hits if hits is not None else (0 if known_hits else None),
        trace_count=facts.compile_count if facts else None,
        trace_s=facts.compile_ns / 1e9 if facts else None,
        outside_labels=facts.compiles_outside if facts else 0,
        sites=tuple(sites),
        functions=_functions(timers, names.function_compile_prefix),
        reasons=tuple(
            (name, why.strip())
            for name, _, why in (note.partition(": ") for note in meta_notes)
            if why
        ),
    )


def _site(row: LabelRow, compiled: blocks.RunsByRow, in_steps: blocks.RunsByRow) -> CompileSite:
    """A label that compiled: recompiled when two of its runs did, or one run many times."""
    runs = compiled.get((row.thread, row.path), ())
    compiles, compiled_runs = row.compiles or 0, row.compiled_runs or 0
    loop = row.path[-1].lstrip().startswith(("for ", "while ", "async for "))
    many = MANY_COMPILES_IN_A_LOOP if loop else MANY_COMPILES_IN_A_CALL
    recompiled = compiled_runs >= 2 or (row.count == 1 and compiles >= many)
    return CompileSite(
        path=row.path,
        runs=row.count,
        compiled_runs=compiled_runs,
        compiles=compiles,
        total_s=row.compile_s or 0.0,
        first_runs=runs[:8],
        first_steps=in_steps.get((row.thread, row.path), ())[:8],
        recompiled=recompiled,
        warm_up=recompiled and compiled_runs >= 2 and all(i < 2 for i in runs),
    )


def _functions(
    timers: Mapping[str, MetricTotal], prefix: str
) -> tuple[tuple[str, int, float], ...]:
    if not prefix:
        return ()
    found = [
        (name[len(prefix) :], entry.count, entry.total_s)
        for name, entry in timers.items()
        if name.startswith(prefix)
    ]
    return tuple(sorted(found, key=lambda f: (-f[1], -f[2], f[0])))


def _fallbacks(counters: Mapping[str, int], words: Vocabulary) -> tuple[Fallback, ...]:
    prefix, advice = words.metrics.fallback_prefix, words.advice
    if not prefix:
        return ()
    found = [
        Fallback(name, value, advice.fallback_hints.get(name, advice.fallback_hint))
        for name, value in counters.items()
        if name.startswith(prefix) and value > 0
    ]
    return tuple(sorted(found, key=lambda f: (-f.count, f.op)))
