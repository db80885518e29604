"""Read one capture's timeline into plain facts: protobuf for the file, numpy for the sums.

Why the timeline and not XProf's tool converters: on a CPU capture ``hlo_stats`` and
``op_profile`` are empty and ``framework_op_stats`` lists only the outermost label; the
``overview_page`` finds the same step times (a test checks it) but drops the first and last
step; and every converter call is a full pass of its own that writes cache files into the
run. Labels, steps, compile events, XLA ops and thread activity are all timeline events.

Why not XProf's ``ProfileData`` API, which the first reader used: it costs about 10 µs an
event (43 s and 3 GB for a 100 MB capture). Here the file is parsed by the protobuf runtime
with a schema of our own (:mod:`xprof_magic._analysis.xspace`), one line (thread) at a
time; each line becomes arrays of start, duration and name, and nesting, self time and
per-name totals are array operations. Python touches single events only where a stat
decides: whether an event is a step (``step_num``) or an XLA op (``hlo_op``), and each
compilation. The numbers are those of the former event-by-event pass, which the tests
keep as an oracle.

What the pass relies on (verified on torch_xla 2.9.0 captures):

* Event times are nanoseconds from the ``Task Environment`` plane's ``profile_start_time``.
* Labels, ``xp.Trace`` and ``xp.StepTrace`` events sit on ``/host:CPU`` lines of Python
  threads (not named ``tf_*``); a step carries a ``step_num`` stat.
* torch_xla's own host events (sync, compile, transfer, execute) nest inside those; their
  names are C++-qualified (``::``) or in :data:`RUNTIME_NAMES`.
* A compilation is one ``XLAGraphExecutor::Compile`` event (one per ``CompileTime`` sample).
* On the CPU, XLA ops run on ``tf_XLAPjRtCpuClient/*`` and ``tf_XLAEigen/*`` threads as
  events with an ``hlo_op`` stat; compilation passes run on ``tf_xla-cpu-codegen/*``.
* On a TPU, each ``/device:TPU:N`` plane has ``XLA Modules`` and ``XLA Ops`` lines.
* Events on a line nest: a child ends inside its parent. A line where one does not is
  walked with an explicit stack instead, with the same result.

The file becomes arrays in :mod:`~xprof_magic._analysis.lines`, and nesting by time is
:mod:`~xprof_magic._analysis.nesting`. Long because the pass itself is one piece: each
line's categories, blocks, compile charges and per-name tables are steps over the same
arrays, in an order the former reader's results depend on, and the facts type they fill
is what the rest of the analysis imports from here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from xprof_magic._analysis import nesting, pool, xspace
from xprof_magic._analysis.lines import (
    Floats,
    Ints,
    Line,
    Plane,
    SerializedLines,
    object_planes,
    xspace_planes,
)
from xprof_magic._backends import TimelineNames
from xprof_magic._backends.torch_xla_vocabulary import (
    COMPILE_EVENTS,
    CPU_CLIENT_GROUPS,
    RUNTIME_NAMES,
    RUNTIME_PREFIXES,
)

__all__ = [
    "COMPILE_EVENTS",
    "RUNTIME_NAMES",
    "Block",
    "ReadAborted",
    "TraceFacts",
    "read_parts",
    "read_planes",
    "read_trace",
]


LABEL, TRACE, STEP = "label", "trace", "step"
RUNTIME, COMPILE, XLA_OP = "runtime", "compile", "XLA op"


class ReadAborted(Exception):
    """Reading the timeline would run past its deadline."""


@dataclass
class Block:
    """One run of an annotation (label, user trace or step) on a Python thread."""

    name: str
    kind: str
    start: float
    end: float
    parent: int
    line: str
    step_num: int | None = None
    compiles: int = 0
    compile_ns: float = 0.0
    holds_compile: bool = False
    continued: bool = False
    """A label block reopened after a step boundary cut it (``continued=1``): the same entry."""


@dataclass
class GroupFacts:
    threads: int = 0
    busy_ns: float = 0.0


@dataclass
class TraceFacts:
    """Everything the summary takes from one host's timeline."""

    host: str
    profile_start_ns: int | None = None
    window: tuple[float, float] | None = None
    blocks: list[Block] = field(default_factory=list)
    compile_count: int = 0
    compile_ns: float = 0.0
    compiles_outside: int = 0
    host_ops: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    device_ops: dict[str, list[float]] = field(default_factory=dict)
    compile_ops: dict[str, list[float]] = field(default_factory=dict)
    groups: dict[str, GroupFacts] = field(default_factory=dict)
    devices: list[tuple[str, float]] = field(default_factory=list)
    cpu_xla_busy_ns: float = 0.0
    has_cpu_client: bool = False
    events: int = 0
    planes: list[str] = field(default_factory=list)


_CATEGORIES = (LABEL, TRACE, STEP, RUNTIME, COMPILE, XLA_OP)
_LABEL, _TRACE, _STEP, _RUNTIME, _COMPILE, _XLA_OP = range(len(_CATEGORIES))


def read_trace(
    path: Path,
    *,
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
    runtime: TimelineNames | None = None,
) -> TraceFacts:
    """Read ``<host>.xplane.pb``; raise ``ValueError`` if it is not one, ReadAborted late.

    ``label_names`` are the magic's marker names (from the metadata): such events are labels
    even where their text looks like a runtime name. ``cell_ns`` (wall-clock ns) narrows
    the window that busy time is measured against to the cell. ``runtime``: the backend's
    own host events (its vocabulary's ``runtime_names`` and ``runtime_prefixes``), runtime
    rather than the user's traces, and its ``compile_events``, besides torch_xla's below.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error}") from error
    # Workers only where nothing waits on a deadline: the kernel's own quick pass has one.
    with pool.Pool(pool.worker_count(size) if deadline is None else 0) as workers:
        return _read(
            xspace_planes(_parse(path)),
            host=path.name[: -len(".xplane.pb")],
            label_names=label_names,
            cell_ns=cell_ns,
            deadline=deadline,
            runtime=runtime,
            workers=workers,
        )


def _parse(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error}") from error
    space = xspace.LazyXSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as error:
        raise ValueError(
            f"{path.name} is not a profiler timeline (an XSpace protobuf): {error}; "
            "capture again, or check that the file was copied whole"
        ) from None
    return space


def read_planes(
    planes: Sequence[Any],
    *,
    host: str = "",
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
) -> TraceFacts:
    """The same pass over ``ProfileData``-shaped planes (``name``, ``stats``, ``lines``).

    Each line has ``name`` and ``events``; each event ``name``, ``start_ns``,
    ``duration_ns`` and ``stats`` as ``(key, value)`` text pairs. For tests that build a
    timeline by hand, and for XProf's own ``ProfileData``.
    """
    return _read(
        object_planes(planes),
        host=host,
        label_names=label_names,
        cell_ns=cell_ns,
        deadline=deadline,
    )


def _read(
    planes: list[Plane],
    *,
    host: str,
    label_names: frozenset[str],
    cell_ns: tuple[int, int] | None,
    deadline: float | None,
    runtime: TimelineNames | None = None,
    workers: pool.Pool | None = None,
) -> TraceFacts:
    facts = TraceFacts(host=host)
    reader = _Reader(facts, label_names, deadline)
    if runtime is not None:
        reader.runtime = (runtime.runtime_names, tuple(runtime.runtime_prefixes))
        reader.compile_events = frozenset(runtime.compile_events)
    facts.planes = [plane.name for plane in planes]
    for plane in planes:
        if plane.name == "Task Environment":
            stats = dict(plane.stats)
            start, stop = stats.get("profile_start_time"), stats.get("profile_stop_time")
            if start and stop and start.isdigit() and stop.isdigit():
                facts.profile_start_ns = int(start)
                facts.window = (0.0, float(int(stop) - int(start)))
    if facts.window is not None and cell_ns is not None and facts.profile_start_ns:
        lo = max(facts.window[0], cell_ns[0] - facts.profile_start_ns)
        hi = min(facts.window[1], cell_ns[1] - facts.profile_start_ns)
        if hi > lo:
            facts.window = (float(lo), float(hi))
    for plane in planes:
        if plane.name.startswith("/host:") and plane.name != "/host:metadata":
            if workers is not None and workers.workers and plane.serialized is not None:
                _host_lines_in_parallel(reader, plane.serialized, workers)
                continue
            for line in plane.lines():
                reader.host_line(line)
                del line  # before the next line is parsed: one line in memory at a time
        elif plane.name.startswith("/device:"):
            reader.device_plane(plane)
        reader.check()
    reader.finish()
    return facts


def _group(line_name: str) -> str:
    if not line_name.startswith("tf_"):
        return "python"
    return line_name.split("/", 1)[0]


def _runtime_name(name: str) -> bool:
    return "::" in name or name in RUNTIME_NAMES or name.startswith(RUNTIME_PREFIXES)


@dataclass(frozen=True)
class _Settings:
    """What reading one line takes besides the line: plain data, for a worker process."""

    host: str
    label_names: frozenset[str]
    runtime: tuple[frozenset[str], tuple[str, ...]]
    compile_events: frozenset[str]
    window: tuple[float, float] | None

    def reader(self) -> _Reader:
        reader = _Reader(TraceFacts(self.host, window=self.window), self.label_names, None)
        reader.runtime, reader.compile_events = self.runtime, self.compile_events
        return reader


@dataclass
class _Part:
    """One line's share of the facts, added to the whole in line order (:meth:`_Reader.absorb`)."""

    facts: TraceFacts
    compile_durations: list[float]
    cpu_op_spans: list[tuple[Floats, Floats]]
    orphan_compiles: list[tuple[float, float]]


def read_parts(
    data: list[bytes], names: dict[int, str], stat_ids: dict[str, set[int]], settings: _Settings
) -> list[_Part]:
    """A worker's task: serialized host lines of one plane (``names``, ``stat_ids``: the
    plane's), each read on its own."""
    lines = SerializedLines(data, names, stat_ids)
    return [_read_part(lines, i, settings) for i in range(len(data))]


def _read_part(lines: SerializedLines, index: int, settings: _Settings) -> _Part:
    reader = settings.reader()
    reader.host_line(lines.line(index))
    return _Part(
        reader.facts, reader.compile_durations, reader.cpu_op_spans, reader.orphan_compiles
    )


def _host_lines_in_parallel(reader: _Reader, lines: SerializedLines, workers: pool.Pool) -> None:
    """The plane's biggest lines in the workers, the rest here; added up in line order.

    The sums are the serial pass's to the last bit: each line's part starts from zero, and
    :meth:`_Reader.absorb` adds each part's numbers in the order the serial pass would.
    A worker that fails costs time only: its lines are read here.
    """
    settings = reader.settings()
    sizes = [len(line) for line in lines.data]
    live = workers.live()
    owner = pool.assign(sizes, len(live))
    shares = [[i for i, o in enumerate(owner) if o == k] for k in range(len(live))]
    for worker, share in zip(live, shares, strict=True):
        if share:
            data = [lines.data[i] for i in share]
            workers.send(worker, (data, lines.names, lines.stat_ids, settings))
            del data
    parts = {i: _read_part(lines, i, settings) for i, o in enumerate(owner) if o < 0}
    for worker, share in zip(live, shares, strict=True):
        if not share:
            continue
        timeout_s = pool.ANSWER_S + sum(sizes[i] for i in share) / 1e6
        try:
            parts.update(zip(share, workers.receive(worker, timeout_s), strict=True))
        except (pool.WorkerFailed, TypeError, ValueError):
            parts.update((i, _read_part(lines, i, settings)) for i in share)
    for i in range(len(sizes)):
        reader.absorb(parts[i])


class _Reader:
    """The pass: per line, nesting by time gives parents, self time and blocks."""

    def __init__(self, facts: TraceFacts, label_names: frozenset[str], deadline: float | None):
        self.facts = facts
        self.label_names = label_names
        self.runtime: tuple[frozenset[str], tuple[str, ...]] = (frozenset(), ())
        self.compile_events: frozenset[str] = frozenset()
        self.deadline = deadline
        self.cpu_op_spans: list[tuple[Floats, Floats]] = []
        self.orphan_compiles: list[tuple[float, float]] = []
        self.compile_durations: list[float] = []

    def settings(self) -> _Settings:
        return _Settings(
            self.facts.host,
            self.label_names,
            self.runtime,
            self.compile_events,
            self.facts.window,
        )

    def absorb(self, part: _Part) -> None:
        """Add one line's part, read by a reader of its own, as if this reader had read it."""
        facts, theirs = self.facts, part.facts
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
        self.cpu_op_spans.extend(part.cpu_op_spans)
        self.orphan_compiles.extend(part.orphan_compiles)

    def check(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise ReadAborted

    def host_line(self, line: Line) -> None:
        group = _group(line.name)
        n = len(line.start)
        self.check()
        self.facts.events += n
        if not n:
            return
        if group in CPU_CLIENT_GROUPS:
            self.facts.has_cpu_client = True
        order, start, dur, name_id = nesting.time_order(line)
        end = start + dur
        names = line.names
        flag = _name_flags(names, self.label_names, self.runtime, self.compile_events)
        pushed = (dur > 0) & ~flag["end"][name_id]
        nest = nesting.nest(start, end, pushed)
        steps: dict[int, int | None] = {}
        cat = self._categories(line, group, order, name_id, nest, pushed, flag, steps)
        blocks = self._blocks(line, order, start, end, nest, cat, steps)
        is_compile = pushed & (cat == _COMPILE) & flag["compile"][name_id]
        has_parent = nest.parent >= 0
        parent_cat = np.where(has_parent, cat[nest.parent], -1)
        is_compile &= parent_cat != _COMPILE
        for i in np.flatnonzero(is_compile).tolist():
            self._compile(float(start[i]), float(dur[i]), i, nest.parent, blocks, group)
        top = pushed & ~has_parent
        busy = top & ~flag["wait"][name_id]
        facts = self.facts
        group_facts = facts.groups.setdefault(group, GroupFacts())
        group_facts.threads += 1
        group_facts.busy_ns += nesting.union_ns(start[busy], end[busy], facts.window)
        ops = pushed & (cat == _XLA_OP) & (parent_cat != _XLA_OP)
        if ops.any():
            self.cpu_op_spans.append((start[ops], end[ops]))
        self._tables(start, end, dur, name_id, names, nest, cat)

    def _categories(
        self,
        line: Line,
        group: str,
        order: Ints,
        name_id: Ints,
        nest: nesting.Nesting,
        pushed: NDArray[np.bool_],
        flag: dict[str, NDArray[np.bool_]],
        steps: dict[int, int | None],
    ) -> NDArray[np.int8]:
        """Each pushed event's category, level by level (a child's depends on its parent's).

        Fills ``steps`` with the ``step_num`` of each block, by position in the line.
        """
        cat = np.full(len(name_id), -1, np.int8)
        python = group == "python"
        for level in range(int(nest.depth.max(initial=0)) + 1):
            here = np.flatnonzero(pushed & (nest.depth == level))
            if not len(here):
                continue
            parent = nest.parent[here]
            parent_cat = np.where(parent >= 0, cat[parent], -1)
            ids = name_id[here]
            compile_ = (parent_cat == _COMPILE) | flag["compile"][ids]
            runtime = flag["runtime"][ids]
            mine = np.full(len(here), _RUNTIME, np.int8)
            if python:
                open_ = ~np.isin(parent_cat, (_RUNTIME, _XLA_OP))
                maybe_block = open_ & ~(runtime & ~flag["label"][ids]) & ~compile_
                for j in np.flatnonzero(maybe_block).tolist():
                    at = int(here[j])
                    steps[at] = step_num = _step_num(line, int(order[at]))
                    if step_num is not None:
                        mine[j] = _STEP
                    else:
                        mine[j] = _LABEL if flag["label"][ids[j]] else _TRACE
            elif group.startswith("tf_xla-cpu-codegen"):
                mine[:] = _COMPILE
            elif group in CPU_CLIENT_GROUPS:
                inside = parent_cat == _XLA_OP
                mine[inside] = _XLA_OP
                maybe_op = np.flatnonzero(~inside & ~runtime & ~compile_)
                mine[maybe_op[line.has(order[here[maybe_op]], "hlo_op")]] = _XLA_OP
            mine[compile_] = _COMPILE
            cat[here] = mine
        return cat

    def _blocks(
        self,
        line: Line,
        order: Ints,
        start: Floats,
        end: Floats,
        nest: nesting.Nesting,
        cat: NDArray[np.int8],
        steps: dict[int, int | None],
    ) -> dict[int, int]:
        """Append the line's blocks in time order; their index by position in the line."""
        blocks = self.facts.blocks
        found: dict[int, int] = {}
        at = np.flatnonzero((cat >= 0) & (cat <= _STEP))
        rows = zip(
            at.tolist(),
            line.name_id[order[at]].tolist(),
            cat[at].tolist(),
            start[at].tolist(),
            end[at].tolist(),
            nest.parent[at].tolist(),
            strict=True,
        )
        for i, name, kind, begin, finish, parent in rows:
            blocks.append(
                Block(
                    line.names[name],
                    _CATEGORIES[kind],
                    begin,
                    finish,
                    found.get(parent, -1),
                    line.name,
                    steps[i],
                    continued=kind == _LABEL and line.stat(int(order[i]), "continued") == "1",
                )
            )
            found[i] = len(blocks) - 1
        return found

    def _compile(
        self,
        start: float,
        dur: float,
        at: int,
        parent: Ints,
        blocks: dict[int, int],
        group: str,
    ) -> None:
        """Count one compilation and charge it to the blocks whose span holds it."""
        facts = self.facts
        facts.compile_count += 1
        facts.compile_ns += dur
        self.compile_durations.append(dur)
        if group != "python":
            self.orphan_compiles.append((start, dur))
            return
        innermost = True
        up = int(parent[at])
        while up >= 0:
            if up in blocks:
                self._charge(blocks[up], dur, innermost)
                innermost = False
            up = int(parent[up])
        if innermost:
            facts.compiles_outside += 1

    def _charge(self, index: int, dur: float, innermost: bool) -> None:
        block = self.facts.blocks[index]
        block.holds_compile = True
        if innermost:
            block.compiles += 1
            block.compile_ns += dur

    def _tables(
        self,
        start: Floats,
        end: Floats,
        dur: Floats,
        name_id: Ints,
        names: list[str],
        nest: nesting.Nesting,
        cat: NDArray[np.int8],
    ) -> None:
        """Self time (a child's time is not its parent's) summed per name and category.

        Names enter the tables in the order their first event closes, as they did when
        each event was added on closing.
        """
        n = len(start)
        kids = np.flatnonzero(nest.parent >= 0)
        kids = kids[cat[kids] >= 0]
        parent = nest.parent[kids]
        child_ns = np.bincount(
            parent, weights=np.minimum(end[kids], end[parent]) - start[kids], minlength=n
        )
        self_ns = np.maximum(0.0, dur - child_ns)
        closed = nest.closed
        key = cat[closed].astype(np.int64) * len(names) + name_id[closed]
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse, minlength=len(unique))
        sums = np.bincount(inverse, weights=self_ns[closed], minlength=len(unique))
        facts = self.facts
        for u in np.argsort(first, kind="stable").tolist():
            category, name = (
                _CATEGORIES[int(unique[u]) // len(names)],
                names[int(unique[u]) % len(names)],
            )
            if category == XLA_OP:
                table = facts.device_ops.setdefault(name, [0, 0.0])
            elif category == COMPILE:
                table = facts.compile_ops.setdefault(name, [0, 0.0])
            else:
                table = facts.host_ops.setdefault((name, category), [0, 0.0])
            table[0] += int(counts[u])
            table[1] += float(sums[u])

    def device_plane(self, plane: Plane) -> None:
        lines = {line.name: line for line in plane.lines()}
        busy_line = lines.get("XLA Modules") or lines.get("XLA Ops")
        busy = 0.0
        for name, line in lines.items():
            self.facts.events += len(line.start)
            self.check()
            if line is busy_line:
                busy = nesting.union_ns(line.start, line.start + line.dur, self.facts.window)
            if name == "XLA Ops":
                self._device_ops(line)
        self.facts.devices.append((plane.name, busy))

    def _device_ops(self, line: Line) -> None:
        """Self time of a device's XLA ops (an op's nested ops are not its own time)."""
        _, start, dur, name_id = nesting.time_order(line)
        end = start + dur
        pushed = dur > 0
        nest = nesting.nest(start, end, pushed)
        cat = np.where(pushed, _XLA_OP, -1).astype(np.int8)
        self._tables(start, end, dur, name_id, line.names, nest, cat)

    def finish(self) -> None:
        """Union the CPU op spans; charge compilations seen off the Python threads by time."""
        facts = self.facts
        if self.cpu_op_spans:
            lo = np.concatenate([lo for lo, _ in self.cpu_op_spans])
            hi = np.concatenate([hi for _, hi in self.cpu_op_spans])
            facts.cpu_xla_busy_ns = nesting.union_ns(lo, hi, facts.window)
        for start, dur in self.orphan_compiles:
            holders = [i for i, b in enumerate(facts.blocks) if b.start <= start < b.end]
            if not holders:
                facts.compiles_outside += 1
            for i in holders:
                self._charge(
                    i, dur, innermost=not any(facts.blocks[j].parent == i for j in holders)
                )


def _name_flags(
    names: list[str],
    label_names: frozenset[str],
    runtime: tuple[frozenset[str], tuple[str, ...]] = (frozenset(), ()),
    compile_events: frozenset[str] = frozenset(),
) -> dict[str, NDArray[np.bool_]]:
    """Per distinct name: what the pass asks of it, computed once per line."""
    more, prefixes = runtime
    return {
        "end": np.array([n.startswith("end: ") for n in names], bool),
        "compile": np.array([n in COMPILE_EVENTS or n in compile_events for n in names], bool),
        "runtime": np.array(
            [_runtime_name(n) or n in more or n.startswith(prefixes) for n in names], bool
        ),
        "label": np.array([n in label_names for n in names], bool),
        "wait": np.array(["wait" in n.lower() for n in names], bool),
    }


def _step_num(line: Line, event: int) -> int | None:
    value = line.stat(event, "step_num")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
