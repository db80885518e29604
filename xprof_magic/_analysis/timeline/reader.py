"""The timeline pass over one host line (thread) at a time: categories, blocks, compiles, tables.

Each line's events become arrays (:mod:`.lines`), nesting by time gives each event its
parent (:mod:`.nesting`), and the steps below run over those arrays in an order the former
event-by-event reader's results depend on: categories level by level, then blocks, compile
charges and the per-name self-time tables. Python touches single events only where a stat
decides: whether an event is a step (``step_num``) or an XLA op (``hlo_op``), and each
compilation. What an event is by its name is :mod:`.events`'s; a device's plane is read by
:mod:`.device_planes` into the same facts.

What the pass relies on (verified on torch_xla 2.9.0 and jax 0.10 captures): labels, user
traces and steps sit on ``/host:CPU`` lines of Python threads (not ``tf_*``), a step with a
``step_num`` stat;
* The backend's own host events (sync, compile, transfer, execute) nest inside those; they
  are C++-qualified (``::``), start with one of XLA's
  :data:`~.events.XLA_RUNTIME_PREFIXES`, or are named in the backend's vocabulary
  (``runtime_names``, ``runtime_prefixes``), which the caller passes. A compilation is one
  of the vocabulary's ``compile_events``.
* On the CPU, XLA ops run on :data:`~.events.XLA_CPU_CLIENT_GROUPS` threads as events with
  an ``hlo_op`` stat; compilation passes run on ``tf_xla-cpu-codegen/*``. JAX's CPU client
  runs small programs on the calling thread: their ops nest in its runtime events there.
* Events on a line nest: a child ends inside its parent. A line where one does not is
  walked with an explicit stack instead, with the same result.
"""

from __future__ import annotations

import time

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import nesting
from xprof_magic._analysis.timeline.allocations import allocations
from xprof_magic._analysis.timeline.events import (
    NO_RUNTIME,
    XLA_CODEGEN,
    XLA_CPU_CLIENT_GROUPS,
    Runtime,
    name_flags,
    step_nums,
    thread_group,
)
from xprof_magic._analysis.timeline.facts import (
    CATEGORIES,
    COMPILE,
    FRAMEWORK,
    INLINE,
    READ,
    STAGING,
    STEP_END,
    XLA_OP,
    Block,
    GroupFacts,
    ReadAborted,
    TraceFacts,
)
from xprof_magic._analysis.timeline.host_launches import correlated, executions, launch_spans
from xprof_magic._analysis.timeline.line_arrays import (
    Ends,
    EndTimes,
    Floats,
    Index,
    Ints,
    Line,
    first_of_each,
    packed,
)
from xprof_magic._analysis.timeline.programs import name_programs, program_time

__all__ = ["Reader"]

_LABEL, _TRACE, _STEP, _RUNTIME, _COMPILE, _XLA_OP = range(len(CATEGORIES))


class Reader:
    """The pass: per line, nesting by time gives parents, self time and blocks.

    ``runtime`` and ``compile_events`` are the backend's (its vocabulary's timeline names);
    the defaults name none.
    """

    def __init__(
        self,
        facts: TraceFacts,
        label_names: frozenset[str],
        deadline: float | None,
        runtime: Runtime = NO_RUNTIME,
        compile_events: frozenset[str] = frozenset(),
    ):
        self.facts = facts
        self.label_names = label_names
        self.runtime = runtime
        self.compile_events = compile_events
        self.deadline = deadline
        self.cpu_op_spans: list[tuple[Floats, Floats]] = []
        self.orphan_compiles: list[tuple[float, float]] = []
        self.compile_durations: list[float] = []

    def check(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise ReadAborted

    def host_line(self, line: Line) -> None:
        group = thread_group(line.name)
        n = len(line.start)
        self.check()
        self.facts.events += n
        if not n:
            return
        if group in XLA_CPU_CLIENT_GROUPS:
            self.facts.has_cpu_client = True
        order, start, dur, name_id = nesting.time_order(line)
        end = Ends(start, dur)  # each end computed where read: no array as long as the line
        names = line.names
        flag = name_flags(names, self.label_names, self.runtime, self.compile_events)
        pushed = (dur > 0) & ~flag["end"][name_id]
        nest = nesting.nest(start, end, pushed)
        steps: dict[int, int | None] = {}
        cat = self._categories(line, group, order, name_id, nest, pushed, flag, steps)
        blocks = self._blocks(line, order, start, end, nest, cat, steps)
        if group != "python" or not self.runtime.launches:  # none reads the depths past here
            nest = nesting.Nesting(nest.parent, nest.depth[:0], nest.closed)
        # Each mask as long as the line is let go once read (a big line's peak memory).
        has_parent = nest.parent >= 0
        parent_cat = np.where(has_parent, cat[nest.parent], -1)
        outermost = pushed & (cat == _COMPILE) & (parent_cat != _COMPILE)
        counted = flag["compiles"][name_id]
        is_compile = outermost & counted
        for i in np.flatnonzero(is_compile).tolist():
            self._compile(float(start[i]), float(dur[i]), i, nest.parent, blocks, group)
        # The phases of a compilation that are not one (JAX's lowering): its time, no count.
        phases = outermost & ~counted
        del outermost, counted, is_compile
        if group == "python" and phases.any():
            self.facts.spans.setdefault("compile", []).append((start[phases], end[phases]))
        del phases
        top = pushed & ~has_parent
        del has_parent
        busy = top & ~flag["wait"][name_id]
        facts = self.facts
        group_facts = facts.groups.setdefault(group, GroupFacts())
        group_facts.threads += 1
        group_facts.busy_ns += nesting.union_ns(start[busy], end[busy], facts.window)
        del busy
        ops = pushed & (cat == _XLA_OP) & (parent_cat != _XLA_OP)
        del parent_cat
        if ops.any():
            self.cpu_op_spans.append((start[ops], end[ops]))
            if group == "python":
                self.add_spans("device", start[ops], end[ops])
                self.add_spans(INLINE, start[ops], end[ops])
        del ops
        self._spans(group, start, end, name_id, pushed, cat, top, flag)
        del top
        firsts = first_of_each(name_id)  # each name's first event: read twice below
        program = name_programs(line.text or line.stat, order, name_id, firsts=firsts)
        if group in XLA_CPU_CLIENT_GROUPS:
            for key, at in executions(program, start, name_id, flag["execution_end"][name_id]):
                self.add_spans(key, at, at)
        ran = program_time(line.stat, order, name_id, dur, nest.parent, program=program)
        self.add_programs(ran)
        if group == "python" and self.runtime.launches:
            launch = pushed & (cat == _RUNTIME) & flag["launch"][name_id]
            before = (cat == _COMPILE) | (pushed & flag["barrier"][name_id])
            for key, made, ends in launch_spans(
                start, end, name_id, names, launch, before, nest, self.runtime.launches
            ):
                self.add_spans(key, made, ends)
        found = correlated(line, order, start, name_id, firsts)
        del firsts
        if found is not None:
            self.facts.launch_ids.append(found)
        for allocator, events in allocations(line, order, start, name_id).items():
            self.facts.memory.setdefault(allocator, []).append(events)
        del order, flag, pushed  # a big line's: the tables make arrays as long as it
        line.release()  # its stats are read no more: their columns go before the tables'
        self.tables(start, end, dur, name_id, names, nest, cat)

    def _categories(
        self,
        line: Line,
        group: str,
        order: Index,
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
        # The pushed events level by level (in line order within each): one stable sort.
        positions = np.flatnonzero(pushed)
        depth = nest.depth[positions]
        levels = int(nest.depth.max(initial=0)) + 1
        small = np.int16 if levels < 1 << 15 else np.int64
        by_level = np.argsort(depth.astype(small), kind="stable")
        np.take(positions, by_level, out=by_level, mode="clip")  # unbuffered: in place
        del positions
        bounds = np.concatenate(([0], np.cumsum(np.bincount(depth, minlength=levels))))
        del depth
        for level in range(levels):
            here = by_level[bounds[level] : bounds[level + 1]]
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
                blocks = np.flatnonzero(maybe_block)
                numbers = step_nums(line, order[here[blocks]])
                for j, number in zip(blocks.tolist(), numbers, strict=True):
                    steps[int(here[j])] = number
                    if number is not None:
                        mine[j] = _STEP
                    else:
                        mine[j] = _LABEL if flag["label"][ids[j]] else _TRACE
                # A program the CPU client ran on the calling thread (JAX's small ones): its
                # XLA ops nest in the runtime's events there, and are the device's time.
                mine[parent_cat == _XLA_OP] = _XLA_OP
                maybe_op = np.flatnonzero((parent_cat == _RUNTIME) & ~runtime & ~compile_)
                if len(maybe_op):
                    mine[maybe_op[line.has(order[here[maybe_op]], "hlo_op")]] = _XLA_OP
            elif group.startswith(XLA_CODEGEN):
                mine[:] = _COMPILE
            elif group in XLA_CPU_CLIENT_GROUPS:
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
        order: Index,
        start: Floats,
        end: EndTimes,
        nest: nesting.Nesting,
        cat: NDArray[np.int8],
        steps: dict[int, int | None],
    ) -> dict[int, int]:
        """Append the line's blocks in time order; their index by position in the line."""
        blocks = self.facts.blocks
        found: dict[int, int] = {}
        at = np.flatnonzero((cat >= 0) & (cat <= _STEP))
        # A label's ``continued`` stat is read only where the label has one (few do).
        maybe = (cat[at] == _LABEL) & line.has(order[at], "continued")
        rows = zip(
            at.tolist(),
            line.name_id[order[at]].tolist(),
            cat[at].tolist(),
            start[at].tolist(),
            end[at].tolist(),
            nest.parent[at].tolist(),
            maybe.tolist(),
            strict=True,
        )
        for i, name, kind, begin, finish, parent, maybe_continued in rows:
            blocks.append(
                Block(
                    line.names[name],
                    CATEGORIES[kind],
                    begin,
                    finish,
                    found.get(parent, -1),
                    line.name,
                    steps[i],
                    continued=maybe_continued and line.stat(int(order[i]), "continued") == "1",
                )
            )
            found[i] = len(blocks) - 1
        return found

    def _compile(
        self,
        start: float,
        dur: float,
        at: int,
        parent: Index,
        blocks: dict[int, int],
        group: str,
    ) -> None:
        """Count one compilation and charge it to the blocks whose span holds it."""
        facts = self.facts
        facts.compile_count += 1
        facts.compile_ns += dur
        self.compile_durations.append(dur)
        if group == "python":
            facts.spans.setdefault("compile", []).append(([start], [start + dur]))
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

    def _spans(
        self,
        group: str,
        start: Floats,
        end: EndTimes,
        name_id: Ints,
        pushed: NDArray[np.bool_],
        cat: NDArray[np.int8],
        top: NDArray[np.bool_],
        flag: dict[str, NDArray[np.bool_]],
    ) -> None:
        """Keep the spans the step breakdown needs.

        On the XLA CPU client's threads each top-level event is an execution (device) or a
        host-device copy (transfer); on PjRt's workers (:data:`~.events.XLA_RUNTIME_POOLS`
        but TSL's ``tf_*``) each top-level copy (transfer: the host's staging); on the Python
        threads, the runtime's copies (transfer), its waits (sync), its step ends and its
        reads of a device value (the vocabulary's ``waits``: :data:`~.facts.READ`).
        """
        copy = flag["copy"][name_id]
        if group in XLA_CPU_CLIENT_GROUPS:
            found = {"device": top & ~copy, "transfer": top & copy, STAGING: top & copy}
        elif not group.startswith("tf_") and group != "python":
            # PjRt's own workers stage the host's side of a copy (``H2D Dispatch``: the
            # array laid out for the device, then its DMA), apart from the Python thread.
            found = {"transfer": top & copy, STAGING: top & copy}
        elif group == "python":
            runtime = pushed & (cat == _RUNTIME)
            found = {
                "transfer": runtime & copy,
                "sync": runtime & flag["blocks"][name_id] & ~copy,
                STEP_END: runtime & flag["step_end"][name_id],
                READ: runtime & flag["read"][name_id],
                FRAMEWORK: runtime,
            }
        else:
            return
        for key, mask in found.items():
            if mask.any():
                self.add_spans(key, start[mask], end[mask])

    def add_programs(self, time_ns: dict[str, float]) -> None:
        """Add the time of the programs that ran (:func:`.programs.program_time`)."""
        for name, ns in time_ns.items():
            self.facts.programs_ran[name] = self.facts.programs_ran.get(name, 0.0) + ns

    def add_spans(self, key: str, lo: Floats, hi: Floats) -> None:
        self.facts.spans.setdefault(key, []).append((packed(lo), packed(hi)))

    def _charge(self, index: int, dur: float, innermost: bool) -> None:
        block = self.facts.blocks[index]
        block.holds_compile = True
        if innermost:
            block.compiles += 1
            block.compile_ns += dur

    def tables(
        self,
        start: Floats,
        end: EndTimes,
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
        kids = np.flatnonzero((nest.parent >= 0) & (cat >= 0))  # one array as long as them
        parent = nest.parent[kids]
        inside = end[kids]  # each child's time inside its parent (arrays reused: a big line)
        np.minimum(inside, end[parent], out=inside)
        inside = np.subtract(
            inside, start[kids], out=inside if inside.dtype == start.dtype else None
        )
        del kids
        child_ns = np.bincount(parent, weights=inside, minlength=n)
        del parent, inside
        if child_ns.dtype == dur.dtype == np.float64:
            self_ns = np.subtract(dur, child_ns, out=child_ns)
            np.maximum(0.0, self_ns, out=self_ns)
        else:  # no children (numpy then counts in whole numbers), or times not floats
            self_ns = np.maximum(0.0, dur - child_ns)
        closed = nest.closed
        # Per (category, name): events and self time, summed in closing order as before.
        key = cat[closed].astype(np.int64)
        key += 1
        key *= len(names)
        key += name_id[closed]
        unique, first = first_of_each(key)
        counts = np.bincount(key, minlength=len(names) * (len(CATEGORIES) + 1))
        sums = np.bincount(key, weights=self_ns[closed], minlength=len(counts))
        facts = self.facts
        for u in np.argsort(first, kind="stable").tolist():
            k = int(unique[u])
            category, name = CATEGORIES[k // len(names) - 1], names[k % len(names)]
            if category == XLA_OP:
                table = facts.device_ops.setdefault(name, [0, 0.0])
            elif category == COMPILE:
                table = facts.compile_ops.setdefault(name, [0, 0.0])
            else:
                table = facts.host_ops.setdefault((name, category), [0, 0.0])
            table[0] += int(counts[k])
            table[1] += float(sums[k])

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
