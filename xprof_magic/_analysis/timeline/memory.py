"""The allocators' events on a host line: how much memory was in use, event by event.

XLA's allocators record each allocation and deallocation on the host plane as
``MemoryAllocation``/``MemoryDeallocation`` events, on whichever thread made it (verified on
JAX 0.11 captures of an H200; a TPU host records deallocations the same way). Their stats
name the allocator (``allocator_name``: ``GPU_0_bfc`` for a GPU's memory, ``xla_gpu_host_bfc``
for pinned host memory), the bytes in use after the event (``bytes_allocated``), the bytes it
could still give (``bytes_available``) and the process's peak so far (``peak_bytes_in_use``,
carried over from earlier cells). A stat read per such event: they are few beside the rest.
"""

from __future__ import annotations

import numpy as np

from xprof_magic._analysis.timeline.lines import Floats, Ints, Line

__all__ = ["ALLOCATOR_EVENTS", "Allocations", "allocations"]

ALLOCATOR_EVENTS = frozenset({"MemoryAllocation", "MemoryDeallocation"})

Allocations = dict[str, tuple[list[float], list[float], list[float]]]
"""By allocator: its events' times (ns), the bytes in use after each, and the bytes it could
hold then (in use + available; 0 where unknown)."""


def allocations(line: Line, order: Ints, start: Floats, name_id: Ints) -> Allocations:
    """The line's allocator events by allocator (``order``, ``start``, ``name_id``: the line's
    events in time order)."""
    wanted = [i for i, name in enumerate(line.names) if name in ALLOCATOR_EVENTS]
    if not wanted:
        return {}
    at = np.flatnonzero(np.isin(name_id, wanted))
    events = order[at]
    in_use = line.numbers(events, "bytes_allocated")
    available = line.numbers(events, "bytes_available")
    text = line.text or line.stat
    found: Allocations = {}
    for k, event in enumerate(events.tolist()):
        if np.isnan(in_use[k]):
            continue
        name = text(int(event), "allocator_name") or ""
        times, used, limit = found.setdefault(name, ([], [], []))
        times.append(float(start[at[k]]))
        used.append(float(in_use[k]))
        limit.append(0.0 if np.isnan(available[k]) else float(in_use[k] + available[k]))
    return found
