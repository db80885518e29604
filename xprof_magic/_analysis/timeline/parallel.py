"""A plane's biggest host lines read in worker processes, the rest here, added up in order.

Each line read on its own gives a :class:`_Part` (its share of the facts, from zero);
:func:`absorb` adds the parts to the whole in line order, as the serial pass would have
added the same numbers, so the facts equal the one-process pass's to the last bit. The
workers (:mod:`.pool`, :mod:`.worker`) run
:func:`read_parts`; what they need travels as plain data (:class:`_Settings`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from functools import partial
from typing import Any

from xprof_magic._analysis.timeline import forks, pool
from xprof_magic._analysis.timeline.events import Runtime, thread_group
from xprof_magic._analysis.timeline.facts import GroupFacts, TraceFacts
from xprof_magic._analysis.timeline.reader import Reader
from xprof_magic._analysis.timeline.thread_lines import Floats, SerializedLines

__all__ = ["absorb", "host_lines_in_parallel", "read_parts"]


@dataclass(frozen=True)
class _Settings:
    """What reading one line takes besides the line: plain data, for a worker process."""

    host: str
    label_names: frozenset[str]
    runtime: Runtime
    compile_events: frozenset[str]
    window: tuple[float, float] | None

    @classmethod
    def of(cls, reader: Reader) -> _Settings:
        return cls(
            reader.facts.host,
            reader.label_names,
            reader.runtime,
            reader.compile_events,
            reader.facts.window,
        )

    def reader(self) -> Reader:
        facts = TraceFacts(self.host, window=self.window)
        return Reader(facts, self.label_names, None, self.runtime, self.compile_events)


@dataclass
class _Part:
    """One line's share of the facts, added to the whole in line order (:func:`absorb`)."""

    facts: TraceFacts
    compile_durations: list[float]
    cpu_op_spans: list[tuple[Floats, Floats]]
    orphan_compiles: list[tuple[float, float]]


def read_parts(
    data: list[bytes], names: dict[int, str], stat_ids: dict[str, set[int]], settings: _Settings
) -> list[_Part]:
    """A worker's task: serialized host lines of one plane, each read on its own.

    ``names``, ``stat_ids``: the plane's.
    """
    lines = SerializedLines(data, names, stat_ids)
    return [_read_part(lines, i, settings) for i in range(len(data))]


def _read_share(lines: SerializedLines, share: list[int], settings: _Settings) -> list[_Part]:
    """A forked worker's task: lines ``share`` of the plane, each read on its own."""
    return [_read_part(lines, i, settings) for i in share]


def _read_part(lines: SerializedLines, index: int, settings: _Settings) -> _Part:
    reader = settings.reader()
    reader.host_line(lines.line(index))
    return _Part(
        reader.facts, reader.compile_durations, reader.cpu_op_spans, reader.orphan_compiles
    )


def host_lines_in_parallel(
    reader: Reader, lines: SerializedLines, workers: pool.Pool | forks.Forks
) -> None:
    """The plane's biggest lines in the workers, the rest here; added up in line order.

    The sums are the serial pass's to the last bit: each line's part starts from zero, and
    :func:`absorb` adds each part's numbers in the order the serial pass would.
    A worker that fails costs time only: its lines are read here. A forked worker
    (:mod:`.forks`) reads its lines where this process has them; a fresh interpreter
    (:mod:`.pool`) is sent them.
    """
    settings = _Settings.of(reader)
    sizes = [len(line) for line in lines.data]
    live = workers.live()
    if isinstance(workers, forks.Forks):
        here = [thread_group(lines.name(i)) == "python" for i in range(len(sizes))]
        owner = forks.assign(sizes, here, len(live))
    else:
        owner = pool.assign(sizes, len(live))
    shares = [[i for i, o in enumerate(owner) if o == k] for k in range(len(live))]
    for worker, share in zip(live, shares, strict=True):
        if not share:
            continue
        if isinstance(workers, forks.Forks):
            workers.send(worker, partial(_read_share, lines, share, settings))
            continue
        # Pickled from where they are (the mapped file): one copy, in the task's bytes.
        data = [pickle.PickleBuffer(lines.data[i]) for i in share]
        workers.send(worker, (data, lines.names, lines.stat_ids, settings))
        del data
    parts = {}
    for i in [i for i, o in enumerate(owner) if o < 0]:
        parts[i] = _read_part(lines, i, settings)
        lines.done(i)
    for worker, share in zip(live, shares, strict=True):
        if not share:
            continue
        timeout_s = pool.ANSWER_S + sum(sizes[i] for i in share) / 1e6
        try:
            parts.update(zip(share, workers.receive(worker, timeout_s), strict=True))
        except (pool.WorkerFailed, TypeError, ValueError):
            parts.update((i, _read_part(lines, i, settings)) for i in share)
        for i in share:  # sent (the writer is done once an answer came) or read here
            lines.done(i)
    for i in range(len(sizes)):
        absorb(reader, parts[i])


def absorb(reader: Reader, part: _Part) -> None:
    """Add one line's part, read by a reader of its own, as if ``reader`` had read it."""
    facts, theirs = reader.facts, part.facts
    facts.events += theirs.events
    facts.has_cpu_client |= theirs.has_cpu_client
    offset = len(facts.blocks)
    for block in theirs.blocks:
        if block.parent >= 0:
            block.parent += offset
        facts.blocks.append(block)
    facts.compile_count += theirs.compile_count
    for dur in part.compile_durations:
        facts.compile_ns += dur
    facts.compiles_outside += theirs.compiles_outside
    for name, group in theirs.groups.items():
        mine = facts.groups.setdefault(name, GroupFacts())
        mine.threads += group.threads
        mine.busy_ns += group.busy_ns
    tables: list[tuple[dict[Any, list[float]], dict[Any, list[float]]]] = [
        (facts.host_ops, theirs.host_ops),
        (facts.device_ops, theirs.device_ops),
        (facts.compile_ops, theirs.compile_ops),
    ]
    for table, rows in tables:
        for key, (count, total) in rows.items():
            row = table.setdefault(key, [0, 0.0])
            row[0] += count
            row[1] += total
    reader.add_programs(theirs.programs_ran)
    for key, spans in theirs.spans.items():
        facts.spans.setdefault(key, []).extend(spans)
    facts.launch_ids.extend(theirs.launch_ids)
    for allocator, chunks in theirs.memory.items():
        facts.memory.setdefault(allocator, []).extend(chunks)
    reader.cpu_op_spans.extend(part.cpu_op_spans)
    reader.orphan_compiles.extend(part.orphan_compiles)
