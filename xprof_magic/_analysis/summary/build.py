"""A run's metadata and its timeline's facts -> a :class:`~.model.summary.Summary`.

Two sources: the run's metadata (:class:`RunMetadata`: wall time, status, device, the
magic's label and step timers, and the backend's counters for this cell alone) and the
timeline's facts (:class:`~xprof_magic._analysis.timeline.facts.TraceFacts`, None when the
timeline was not read). The backend's metric names and advice come from its
:class:`~xprof_magic._backends.Vocabulary`, picked by the metadata's ``backend``; this module
names no profiler. The diagnosis and the words come later (:mod:`xprof_magic._analysis.stages`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from xprof_magic._analysis.model.summary import (
    Compiles,
    CompileSite,
    Fallback,
    Gap,
    LabelRow,
    StepStats,
    Summary,
    Timed,
)
from xprof_magic._analysis.summary import blocks
from xprof_magic._analysis.summary.device import device_info, top_host_ops, top_ops
from xprof_magic._analysis.summary.memory_use import memory_of, with_peaks
from xprof_magic._analysis.summary.step_spans import steps_from_trace
from xprof_magic._analysis.summary.where import own_steps
from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._backends import Vocabulary
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs.metadata import MetricTotal, RunMetadata

__all__ = ["build"]

MANY_COMPILES_IN_A_LOOP = 3
MANY_COMPILES_IN_A_CALL = 6
"""Compilations in one run of a block that mean the same code built new graphs: a loop's
iterations, or one call (``model.generate``, whose every new length is a new graph). A call
is allowed more, since one training step may compile forward, backward and optimizer."""


def build(
    path: Path,
    meta: RunMetadata,
    words: Vocabulary,
    facts: TraceFacts | None,
    host_file: Path | None,
    missing: tuple[Gap, ...],
    pending: bool,
) -> Summary:
    """The summary of the run in ``path``, before its diagnosis.

    Built from ``meta`` and ``facts`` (read from ``host_file``); ``missing`` says what could not
    be read, ``pending`` that the timeline waits for the full summary.
    """
    names = words.metrics
    counters, timers = meta.metrics.counters, meta.metrics.metrics
    labels, label_source, steps, compiled, in_steps = _blocks(meta, words, facts)
    missing_all = list(missing)
    if facts is not None:
        missing_all.extend(blocks.labels_not_in_trace(meta, facts))
    memory, peaks = memory_of(meta, facts, steps, words.timeline.input_pipeline)
    labels = with_peaks(labels, peaks)
    return Summary(
        run=meta.run or path.name,
        run_dir=str(path),
        host=host_file.name[: -len(".xplane.pb")] if host_file else "",
        status=meta.status,
        error=_error_text(meta.error),
        cell=meta.numbered_cell,
        start=meta.start,
        wall_s=meta.wall_s,
        backend=meta.backend,
        versions=tuple(sorted(meta.versions.items())),
        complete=facts is not None and not missing_all,
        pending=pending,
        missing=tuple(missing_all),
        device=device_info(meta.device, facts, words, meta.device_name),
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
        programs=_programs(facts),
        events=facts.events if facts else 0,
        memory=memory,
    )


def _programs(facts: TraceFacts | None) -> tuple[tuple[str, float], ...]:
    """The programs that ran, with their seconds, most first."""
    ran = facts.programs_ran if facts else {}
    return tuple((name, ns / 1e9) for name, ns in sorted(ran.items(), key=lambda kv: -kv[1]))


def _blocks(
    meta: RunMetadata, words: Vocabulary, facts: TraceFacts | None
) -> tuple[tuple[LabelRow, ...], str, StepStats | None, blocks.RunsByRow, blocks.RunsByRow]:
    """Labels, where they came from, and steps, with the runs of each label that compiled.

    From the timeline when it was read, else from the magic's timers; the compiling runs come with
    their steps.
    """
    compiled: blocks.RunsByRow = {}
    in_steps: blocks.RunsByRow = {}
    if facts is not None:
        labels, compiled, in_steps = blocks.labels_from_trace(
            facts, meta.wall_s, own_steps(meta.step_rule), words.timeline.input_pipeline
        )
        label_source = "trace"
        steps = steps_from_trace(facts, words.timeline.input_pipeline)
        steps = steps or blocks.steps_from_metadata(meta)
    else:
        labels, label_source = blocks.labels_from_metadata(meta, meta.wall_s), "metadata"
        steps = blocks.steps_from_metadata(meta)
    if not labels:
        label_source = "none"
    if steps is not None and meta.steps_spread:
        steps = blocks.with_spread(steps, meta.steps_spread, meta.steps_first or 0)
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
    loop = blocks.is_loop(row.path[-1])
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
    prefix = words.metrics.fallback_prefix
    if not prefix:
        return ()
    found = [
        Fallback(name, value)
        for name, value in counters.items()
        if name.startswith(prefix) and value > 0
    ]
    return tuple(sorted(found, key=lambda f: (-f.count, f.op)))
