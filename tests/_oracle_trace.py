"""The oracle: the former timeline reader, event by event through XProf's ``ProfileData``.

Kept verbatim (apart from this paragraph) from ``xprof_magic/_analysis/trace.py`` before the
protobuf + numpy reader replaced it, so tests can check that the fast reader gives the same
:class:`TraceFacts`, field by field. It returns the package's own ``TraceFacts`` and ``Block``.

The original docstring follows.


Why ``ProfileData`` and not XProf's tool converters: on a CPU capture ``hlo_stats`` and
``op_profile`` are empty and ``framework_op_stats`` lists only the outermost label; the
``overview_page`` finds the same step times (a test checks it) but drops the first and last
step; and every converter call is a full pass of its own that writes cache files into the
run. Labels, steps, compile events, XLA ops and thread activity are all timeline events:
one pass, one line (thread) at a time, gives every number the summary needs at about 10 µs
an event, and each line's memory is released as soon as it is read.

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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xprof_magic._analysis.timeline.facts import Block, GroupFacts, ReadAborted, TraceFacts

__all__ = [
    "COMPILE_EVENTS",
    "RUNTIME_NAMES",
    "Block",
    "ReadAborted",
    "TraceFacts",
    "read_planes",
    "read_trace",
]

COMPILE_EVENTS = ("XLAGraphExecutor::Compile", "PjRtComputationClient::Compile")
RUNTIME_NAMES = frozenset(
    {
        "StepMarker",
        "SyncLiveTensorsGraph",
        "SyncTensorsGraph",
        "SyncTensorsGraphInternal",
        "ScheduleSyncTensorsGraph",
        "CollectSyncTensors",
        "ExtractIRAndPrepareXlaData_",
        "RunPostOrder",
        "SetTensorData",
        "TensorCollectionBarrier",
        "D2H Dispatch",
        "H2D Dispatch",
    }
)
RUNTIME_PREFIXES = ("Wait for ", "ThreadpoolListener", "end: ")

LABEL, TRACE, STEP = "label", "trace", "step"
RUNTIME, COMPILE, XLA_OP = "runtime", "compile", "XLA op"

GROUP_ROLES = {
    "python": "Python threads: your code, lazy tracing, compile calls",
    "tf_XLAPjRtCpuClient": "XLA CPU client: runs the compiled XLA ops",
    "tf_XLAEigen": "Eigen pool: parallel parts of XLA ops",
    "tf_xla-cpu-codegen": "XLA CPU codegen: compilation",
    "tf_pytorchxla": "torch_xla runtime: launches executions",
}
CPU_CLIENT_GROUPS = ("tf_XLAPjRtCpuClient", "tf_XLAEigen")
_CHECK_EVERY = 1 << 15


def read_trace(
    path: Path,
    *,
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
    runtime: object = None,
) -> TraceFacts:
    """Read ``<host>.xplane.pb``; raise ``ValueError`` if it is not one, ReadAborted late.

    ``runtime`` (a backend's own runtime events) is accepted and ignored: the oracle reads
    torch_xla captures, whose runtime names it holds itself.

    ``label_names`` are the magic's marker names (from the metadata): such events are labels
    even where their text looks like a runtime name. ``cell_ns`` (wall-clock ns) narrows
    the window that busy time is measured against to the cell.
    """
    from xprof.profile_data import ProfileData

    with ProfileData.from_file(path) as data:
        return read_planes(
            data.planes,
            host=path.name[: -len(".xplane.pb")],
            label_names=label_names,
            cell_ns=cell_ns,
            deadline=deadline,
        )


def read_planes(
    planes: Sequence[Any],
    *,
    host: str = "",
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
) -> TraceFacts:
    """The pass itself, over ``ProfileData`` planes (or objects shaped like them)."""
    facts = TraceFacts(host=host)
    reader = _Reader(facts, label_names, deadline)
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
            for line in plane.lines:
                reader.host_line(line)
                line.close()
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


def _union_ns(spans: list[tuple[float, float]], window: tuple[float, float] | None) -> float:
    """Total length covered by ``spans`` (clipped to ``window``), overlaps counted once."""
    total, cur_lo, cur_hi = 0.0, 0.0, -1.0
    for lo, hi in sorted(spans):
        if window is not None:
            lo, hi = max(lo, window[0]), min(hi, window[1])
        if hi <= lo:
            continue
        if lo > cur_hi:
            total += max(0.0, cur_hi - cur_lo)
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + max(0.0, cur_hi - cur_lo)


class _Open:
    """An event whose end is still ahead while its line is walked in time order."""

    __slots__ = ("block", "category", "child_ns", "dur", "end", "name")

    def __init__(self, end: float, category: str, name: str, dur: float, block: int) -> None:
        self.end = end
        self.category = category
        self.name = name
        self.dur = dur
        self.block = block
        self.child_ns = 0.0

    def adopt(self, start: float, dur: float) -> None:
        """Take a child's time out of this event's self time (clipped to this event)."""
        self.child_ns += min(start + dur, self.end) - start


class _Reader:
    """The single pass: per line, nesting by time gives parents, self time and blocks."""

    def __init__(self, facts: TraceFacts, label_names: frozenset[str], deadline: float | None):
        self.facts = facts
        self.label_names = label_names
        self.deadline = deadline
        self.cpu_op_spans: list[tuple[float, float]] = []
        self.orphan_compiles: list[tuple[float, float]] = []

    def check(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise ReadAborted

    def host_line(self, line: Any) -> None:
        group = _group(line.name)
        events: Sequence[Any] = line.events
        self.check()
        self.facts.events += len(events)
        if not events:
            return
        if group in CPU_CLIENT_GROUPS:
            self.facts.has_cpu_client = True
        items = sorted(
            ((e.start_ns, e.duration_ns, i) for i, e in enumerate(events)),
            key=lambda item: (item[0], -item[1]),
        )
        python = group == "python"
        stack: list[_Open] = []
        busy: list[tuple[float, float]] = []
        for count, (start, dur, index) in enumerate(items):
            if count % _CHECK_EVERY == _CHECK_EVERY - 1:
                self.check()
            while stack and start >= stack[-1].end:
                self._close(stack.pop())
            if dur <= 0:
                continue
            event = events[index]
            name: str = event.name
            if name.startswith("end: "):
                continue
            parent = stack[-1] if stack else None
            block = -1
            if parent is not None and parent.category == COMPILE:
                category = COMPILE
            elif name in COMPILE_EVENTS:
                category = COMPILE
                self._compile(start, dur, stack, python)
            elif python:
                category, block = self._python_category(event, name, parent, start, dur, line)
            elif group.startswith("tf_xla-cpu-codegen"):
                category = COMPILE
            elif group in CPU_CLIENT_GROUPS:
                category = self._client_category(event, name, parent)
            else:
                category = RUNTIME
            if parent is None and "wait" not in name.lower():
                busy.append((start, start + dur))
            if category == XLA_OP and (parent is None or parent.category != XLA_OP):
                self.cpu_op_spans.append((start, start + dur))
            if parent is not None:
                parent.adopt(start, dur)
            stack.append(_Open(start + dur, category, name, dur, block))
        while stack:
            self._close(stack.pop())
        facts = self.facts
        g = facts.groups.setdefault(group, GroupFacts())
        g.threads += 1
        g.busy_ns += _union_ns(busy, facts.window)

    def _python_category(
        self,
        event: Any,
        name: str,
        parent: _Open | None,
        start: float,
        dur: float,
        line: Any,
    ) -> tuple[str, int]:
        """Runtime event, or a block (label, user trace, step) and its index."""
        if parent is not None and parent.category in (RUNTIME, XLA_OP):
            return RUNTIME, -1
        if name not in self.label_names and _runtime_name(name):
            return RUNTIME, -1
        step_num: int | None = None
        for key, value in event.stats:
            if key == "step_num":
                try:
                    step_num = int(value)
                except ValueError:
                    step_num = None
        kind = STEP if step_num is not None else LABEL if name in self.label_names else TRACE
        blocks = self.facts.blocks
        parent_block = parent.block if parent is not None else -1
        blocks.append(Block(name, kind, start, start + dur, parent_block, line.name, step_num))
        return kind, len(blocks) - 1

    def _compile(self, start: float, dur: float, stack: list[_Open], python: bool) -> None:
        """Count one compilation and charge it to the blocks whose span holds it."""
        facts = self.facts
        facts.compile_count += 1
        facts.compile_ns += dur
        if not python:
            self.orphan_compiles.append((start, dur))
            return
        innermost = True
        for entry in reversed(stack):
            if entry.block < 0:
                continue
            self._charge(entry.block, dur, innermost)
            innermost = False
        if innermost:
            facts.compiles_outside += 1

    def _charge(self, index: int, dur: float, innermost: bool) -> None:
        block = self.facts.blocks[index]
        block.holds_compile = True
        if innermost:
            block.compiles += 1
            block.compile_ns += dur

    def _client_category(self, event: Any, name: str, parent: _Open | None) -> str:
        if parent is not None and parent.category == XLA_OP:
            return XLA_OP
        if _runtime_name(name):
            return RUNTIME
        for key, _ in event.stats:
            if key == "hlo_op":
                return XLA_OP
        return RUNTIME

    def _close(self, entry: _Open) -> None:
        """Add the finished event's self time to the table of its category."""
        facts = self.facts
        if entry.category == XLA_OP:
            table = facts.device_ops.setdefault(entry.name, [0, 0.0])
        elif entry.category == COMPILE:
            table = facts.compile_ops.setdefault(entry.name, [0, 0.0])
        else:
            table = facts.host_ops.setdefault((entry.name, entry.category), [0, 0.0])
        table[0] += 1
        table[1] += max(0.0, entry.dur - entry.child_ns)

    def device_plane(self, plane: Any) -> None:
        lines = {line.name: line for line in plane.lines}
        busy_line = lines.get("XLA Modules") or lines.get("XLA Ops")
        spans: list[tuple[float, float]] = []
        for name, line in lines.items():
            events = line.events
            self.facts.events += len(events)
            self.check()
            if line is busy_line:
                spans = [(e.start_ns, e.start_ns + e.duration_ns) for e in events]
            if name == "XLA Ops":
                self._device_ops(events)
            line.close()
        self.facts.devices.append((plane.name, _union_ns(spans, self.facts.window)))

    def _device_ops(self, events: Sequence[Any]) -> None:
        """Self time of a device's XLA ops (an op's nested ops are not its own time)."""
        items = sorted(
            ((e.start_ns, e.duration_ns, e.name) for e in events),
            key=lambda item: (item[0], -item[1]),
        )
        stack: list[_Open] = []
        for start, dur, name in items:
            while stack and start >= stack[-1].end:
                self._close(stack.pop())
            if dur <= 0:
                continue
            if stack:
                stack[-1].adopt(start, dur)
            stack.append(_Open(start + dur, XLA_OP, name, dur, -1))
        while stack:
            self._close(stack.pop())

    def finish(self) -> None:
        """Union the CPU op spans; charge compilations seen off the Python threads by time."""
        facts = self.facts
        facts.cpu_xla_busy_ns = _union_ns(self.cpu_op_spans, facts.window)
        for start, dur in self.orphan_compiles:
            holders = [i for i, b in enumerate(facts.blocks) if b.start <= start < b.end]
            if not holders:
                facts.compiles_outside += 1
            for i in holders:
                self._charge(
                    i, dur, innermost=not any(facts.blocks[j].parent == i for j in holders)
                )
