"""A GPU's plane in the timeline pass: its streams' kernels, copies and memsets.

Each ``/device:GPU:N`` plane has one line per CUDA stream, named ``Stream #N(…)`` after what
ran on it (``Stream #14(Compute,Memset)``, ``Stream #15(MemcpyH2D)``), and no ``XLA Modules``
line (verified on JAX 0.11 captures of an H200). Its events are:

* kernels, named as CUDA names them (``nvjet_sm90_…``, ``gemm_fusion_dot_general_9``,
  ``loop_add_fusion``); their stats name the XLA op (``hlo_op``) and program
  (``hlo_module``, ``program_id``) that launched them. NCCL's kernels (``ncclDevKernel_…``)
  are the devices' collectives;
* copies: ``MemcpyH2D`` and ``MemcpyD2H`` between host and device memory (the transfers),
  ``MemcpyD2D``/``MemcpyP2P`` within or between devices' memories (the device's own work);
* memsets (``Memset N``).

Every event carries the ``correlation_id`` of the host call that launched it (a
``cuGraphLaunch`` when XLA runs a step as a CUDA graph, a kernel launch, a ``MemcpyH2D``):
with the host's (:attr:`~.facts.TraceFacts.launch_ids`) it says which step each piece of
device work was launched by. Busy time is the union over the streams; a copy counts as a
transfer only while no kernel runs (a copy that overlaps compute costs the step nothing).
"""

from __future__ import annotations

import numpy as np

from xprof_magic._analysis.timeline import nesting
from xprof_magic._analysis.timeline.intervals import merge, subtract
from xprof_magic._analysis.timeline.line_arrays import Floats, Line, first_of_each
from xprof_magic._analysis.timeline.programs import program_time
from xprof_magic._analysis.timeline.reader import Reader

__all__ = ["COPIES", "STREAM", "is_gpu", "read_gpu_plane"]

STREAM = "Stream #"
COPIES = frozenset({"MemcpyH2D", "MemcpyD2H"})
"""The copies between host and device memory: the transfers."""
COLLECTIVE_KERNELS = ("nccl",)
"""Kernel name prefixes of the collectives between devices (NCCL's)."""

_Pieces = list[tuple[Floats, Floats]]


def is_gpu(line_names: list[str]) -> bool:
    """A GPU's plane shape: lines named after CUDA streams."""
    return any(name.startswith(STREAM) for name in line_names)


def read_gpu_plane(reader: Reader, plane: str, lines: dict[str, Line], first: bool) -> float:
    """The GPU's busy time (ns) and copy time (:attr:`~.facts.TraceFacts.device_copy_ns`).

    On the ``first`` device plane also the breakdown's spans (``device``, ``collective``,
    ``device:transfer``), the kernels' table, the programs that ran and the correlation of
    each event with its launch.
    """
    facts = reader.facts
    every: _Pieces = []
    compute: _Pieces = []
    collective: _Pieces = []
    copies: _Pieces = []
    for name, line in lines.items():
        if not name.startswith(STREAM) or not len(line.start):
            continue
        start, end = line.start, line.start + line.dur
        every.append((start, end))
        copy = np.array([n in COPIES for n in line.names], bool)[line.name_id]
        nccl = np.array([n.startswith(COLLECTIVE_KERNELS) for n in line.names])[line.name_id]
        copies.append((start[copy], end[copy]))
        collective.append((start[nccl], end[nccl]))
        compute.append((start[~copy & ~nccl], end[~copy & ~nccl]))
        if first:
            _kernels(reader, line)
    if not every:
        return 0.0
    window = facts.window
    busy_lo, busy_hi = merge(every)
    copy_lo, copy_hi = merge(copies)
    facts.device_copy_ns[plane] = nesting.union_ns(copy_lo, copy_hi, window)
    if first:
        working = merge(compute)
        waiting = subtract(merge(collective), working)
        for key, (lo, hi) in (
            ("device", working),
            ("collective", waiting),
            ("device:transfer", subtract((copy_lo, copy_hi), merge([working, waiting]))),
        ):
            if len(lo):
                reader.add_spans(key, lo, hi)
    return nesting.union_ns(busy_lo, busy_hi, window)


def _op_name(line: Line, name_id: int, at: int) -> str:
    """A kernel's row in the device-op table.

    The XLA op that launched it, then the kernel's own name, where the two differ
    (``custom-call.1 · sm90_xmma_gemm_…``); the kernel's alone where the op is a CUDA graph's
    (``command_buffer_1``) or the kernel is named after its op.
    """
    kernel = line.names[name_id]
    op = (line.text or line.stat)(at, "hlo_op")
    if not op or op.startswith("command_buffer") or op.replace(".", "_") == kernel:
        return kernel
    return f"{op} · {kernel}"


def _kernels(reader: Reader, line: Line) -> None:
    """One stream's events into the device-op table, the programs and the launches.

    The table holds count and time per name (kernels do not nest); each event's launch is
    its ``correlation_id``.
    """
    facts = reader.facts
    n = len(line.start)
    counts = np.bincount(line.name_id, minlength=len(line.names))
    totals = np.bincount(line.name_id, weights=line.dur, minlength=len(line.names))
    _, first = first_of_each(line.name_id)
    for u, at in zip(np.flatnonzero(counts).tolist(), first.tolist(), strict=True):
        row = facts.device_ops.setdefault(_op_name(line, u, at), [0, 0.0])
        row[0] += int(counts[u])
        row[1] += float(totals[u])
    every = np.arange(n)
    reader.add_programs(program_time(line.text or line.stat, every, line.name_id, line.dur))
    ids = line.numbers(every, "correlation_id")
    known = ~np.isnan(ids)
    if known.any():
        facts.device_ids.append(
            (ids[known].tolist(), (line.start[known] + line.dur[known]).tolist())
        )
