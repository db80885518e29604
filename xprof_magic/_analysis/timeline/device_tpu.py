"""A TPU's plane in the timeline pass: its busy time, its XLA ops, and a chip's waits.

Each ``/device:TPU:N`` plane has ``XLA Modules`` and ``XLA Ops`` lines; each op's
event metadata carries its ``hlo_category`` and ``shape_with_layout`` (verified on a JAX
capture of 4 TPU v6e chips from XProf's test data). The chip's waits are XLA ops of their
own: :func:`~xprof_magic._analysis.timeline.facts.device_side` names those the breakdown
counts apart from compute. What is found is added to the :class:`~.reader.Reader`'s facts.
"""

from __future__ import annotations

import numpy as np

from xprof_magic._analysis.timeline import nesting
from xprof_magic._analysis.timeline.facts import (
    CATEGORIES,
    DEVICE_SIDE,
    XLA_OP,
    device_side,
    execution_key,
)
from xprof_magic._analysis.timeline.programs import module_of, program_time
from xprof_magic._analysis.timeline.reader import Reader
from xprof_magic._analysis.timeline.thread_lines import Line

__all__ = ["is_tpu", "read_tpu_plane"]

LINES = ("XLA Modules", "XLA Ops")


def is_tpu(line_names: list[str]) -> bool:
    """A chip's plane shape: an ``XLA Modules`` or ``XLA Ops`` line."""
    return any(name in LINES for name in line_names)


def read_tpu_plane(reader: Reader, lines: dict[str, Line], first: bool) -> float:
    """A chip's busy time (ns: its modules', else its ops').

    On the ``first`` device plane also the breakdown's spans: its modules (``device``) and,
    within them, its waits (:data:`DEVICE_SIDE`).
    """
    busy_line = lines.get("XLA Modules") or lines.get("XLA Ops")
    busy = 0.0
    for name, line in lines.items():
        if line is busy_line:
            busy = nesting.union_ns(line.start, line.start + line.dur, reader.facts.window)
            if first:
                reader.add_spans("device", line.start, line.start + line.dur)
                if name == "XLA Modules":
                    keys = [execution_key(module_of(n)) for n in line.names]
                    distinct = sorted(set(keys))
                    code = np.array([distinct.index(k) for k in keys], np.int64)[line.name_id]
                    for at, key in enumerate(distinct):
                        mine = code == at
                        reader.add_spans(key, line.start[mine], (line.start + line.dur)[mine])
            if name == "XLA Modules":
                every = np.arange(len(line.start))
                reader.add_programs(
                    program_time(
                        line.text or line.stat, every, line.name_id, line.dur, names=line.names
                    )
                )
        if name == "XLA Ops":
            _device_ops(reader, line, first)
    return busy


def _device_ops(reader: Reader, line: Line, waits: bool) -> None:
    """Self time of a device's XLA ops, and with ``waits`` the spans of its waits.

    An op's nested ops are not its own time. The waits are the :func:`device_side` names, at
    any depth (a loop's body nests in its ``while``).
    """
    _, start, dur, name_id = nesting.time_order(line)
    end = start + dur
    pushed = dur > 0
    nest = nesting.nest(start, end, pushed)
    cat = np.where(pushed, CATEGORIES.index(XLA_OP), -1).astype(np.int8)
    reader.tables(start, end, dur, name_id, line.names, nest, cat)
    if not waits or not pushed.any():
        return
    categories = line.meta_stat("hlo_category") or [None] * len(line.names)
    shapes = line.meta_stat("shape_with_layout") or [None] * len(line.names)
    kinds = np.array(
        [
            device_side(c, f"{n} {s or ''}")
            for n, c, s in zip(line.names, categories, shapes, strict=True)
        ]
        + [""]
    )
    kind = kinds[name_id]
    for key in DEVICE_SIDE:
        mask = pushed & (kind == key)
        if mask.any():
            reader.add_spans(key, start[mask], end[mask])
