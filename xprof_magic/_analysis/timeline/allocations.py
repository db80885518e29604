"""The allocators' events on a host line: how much memory was in use, event by event.

XLA's allocators record each allocation and deallocation on the host plane as
``MemoryAllocation``/``MemoryDeallocation`` events, on whichever thread made it (verified on
JAX 0.11 captures of an H200; a TPU host records deallocations the same way). Their stats
name the allocator (``allocator_name``: ``GPU_0_bfc`` for a GPU's memory, ``xla_gpu_host_bfc``
for pinned host memory), the bytes in use after the event (``bytes_allocated``), the bytes it
could still give (``bytes_available``) and the process's peak so far (``peak_bytes_in_use``,
carried over from earlier cells). Each such event's stats are read once, for all three.
"""

from __future__ import annotations

import numpy as np

from xprof_magic._analysis.timeline.line_arrays import Floats, Index, Ints, Line, as_number

__all__ = ["ALLOCATOR_EVENTS", "Allocations", "allocations"]

ALLOCATOR_EVENTS = frozenset({"MemoryAllocation", "MemoryDeallocation"})

Allocations = dict[str, tuple[list[float], list[float], list[float]]]
"""By allocator: its events' times (ns), the bytes in use after each, and the bytes it could
hold then (in use + available; 0 where unknown)."""


def allocations(line: Line, order: Index, start: Floats, name_id: Ints) -> Allocations:
    """The line's allocator events, by allocator.

    ``order``, ``start`` and ``name_id`` are the line's events in time order.
    """
    wanted = [i for i, name in enumerate(line.names) if name in ALLOCATOR_EVENTS]
    if not wanted:
        return {}
    at = np.flatnonzero(np.isin(name_id, wanted))
    events = order[at]
    stats = line.values(events, ("bytes_allocated", "bytes_available", "allocator_name"))
    in_use = [as_number(v) for v in stats["bytes_allocated"]]
    available = [as_number(v) for v in stats["bytes_available"]]
    found: Allocations = {}
    for k, name in enumerate(stats["allocator_name"]):
        if np.isnan(in_use[k]):
            continue
        times, used, limit = found.setdefault(name or "", ([], [], []))
        times.append(float(start[at[k]]))
        used.append(in_use[k])
        limit.append(0.0 if np.isnan(available[k]) else in_use[k] + available[k])
    return found
