"""Every host of a multi-host run, side by side: step time, busy time, the slowest one.

The rest of the summary reads one host in depth; here each host's timeline is read with the
same reader (:func:`~xprof_magic._analysis.timeline.read.read_trace`) for two figures that
tell hosts apart: how long a step takes, and how busy the device was. In a synchronous
multi-host job the slowest host sets everyone's pace, so it is named.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from xprof_magic._analysis.model.summary import HostRow
from xprof_magic._analysis.summary import blocks
from xprof_magic._analysis.summary.device import device_info
from xprof_magic._analysis.timeline.facts import LABEL, TRACE, TraceFacts
from xprof_magic._analysis.timeline.read import read_trace
from xprof_magic._backends import TimelineNames, Vocabulary
from xprof_magic._runs.metadata import RunMetadata

__all__ = ["host_rows", "slowest"]

_SUFFIX = ".xplane.pb"


def host_rows(
    xplanes: list[Path],
    read: dict[Path, TraceFacts],
    meta: RunMetadata,
    words: Vocabulary,
    runtime: TimelineNames,
    deadline: float | None,
) -> tuple[HostRow, ...]:
    """One row per timeline.

    ``read`` holds those already read, the others are read with ``runtime``
    (:func:`~xprof_magic._analysis.timeline.read.read_trace`'s). Raises ``ReadAborted`` when
    ``deadline`` (``time.perf_counter``) passes.
    """
    rows = []
    for path in xplanes:
        host = path.name[: -len(_SUFFIX)]
        facts = read.get(path)
        if facts is None:
            try:
                facts = read_trace(
                    path,
                    label_names=blocks.label_names(meta),
                    deadline=deadline,
                    runtime=runtime,
                )
            except (ValueError, OSError) as error:
                rows.append(HostRow(host, problem=f"could not be read ({error})"))
                continue
        rows.append(row(host, facts, meta, words))
    return tuple(rows)


def row(host: str, facts: TraceFacts, meta: RunMetadata, words: Vocabulary) -> HostRow:
    """One host's step time and busy time from its timeline."""
    device = device_info(meta.device, facts, words, meta.device_name)
    step_name, durations = _steps(facts)
    rest = durations[1:] or durations
    return HostRow(
        host=host,
        step_name=step_name,
        steps=len(durations),
        step_s=statistics.median(rest) if rest else None,
        busy_s=device.busy_s,
        busy_share=device.busy_share,
        window_s=device.window_s,
    )


def _steps(facts: TraceFacts) -> tuple[str, list[float]]:
    """Step durations in time order: step markers, else the most repeated top-level block."""
    stats = blocks.steps_from_trace(facts)
    if stats is not None and stats.count == len(stats.durations_s):
        return stats.name, list(stats.durations_s)
    by_name: dict[str, list[tuple[float, float]]] = {}
    for b in facts.blocks:
        if b.parent < 0 and b.kind in (LABEL, TRACE):
            by_name.setdefault(b.name, []).append((b.start, b.end - b.start))
    if not by_name:
        return "", []
    name, spans = max(by_name.items(), key=lambda kv: (len(kv[1]), sum(d for _, d in kv[1])))
    return name, [d / 1e9 for _, d in sorted(spans)]


def slowest(rows: tuple[HostRow, ...]) -> str:
    """The host with the longest step, or the longest busy time when no steps are known.

    "" with fewer than two hosts to compare.
    """
    timed = [r for r in rows if r.step_s is not None]
    if len(timed) >= 2:
        return max(timed, key=lambda r: r.step_s or 0.0).host
    busy = [r for r in rows if r.busy_s is not None]
    if len(busy) >= 2:
        return max(busy, key=lambda r: r.busy_s or 0.0).host
    return ""
