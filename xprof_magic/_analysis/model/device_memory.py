"""The device's memory over one cell, as plain frozen dataclasses: part of the summary.

Built by :mod:`~xprof_magic._analysis.summary.memory_use` from the allocators' own events in the
timeline (a GPU's ``GPU_0_bfc``, its pinned host memory ``xla_gpu_host_bfc``), else from the
backend's live figures taken at the end of each labelled block, and, when the cell ran out
of memory, from XLA's error message (:mod:`~xprof_magic._analysis.diagnosis.oom`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Allocation", "Memory", "MemoryUse", "OutOfMemory"]


@dataclass(frozen=True)
class MemoryUse:
    """One memory's use over the cell: its start, end and peak bytes, and its curve.

    Bytes in use at the cell's start and end, the peak, when (seconds on the timeline) and in which
    labelled block and cell line it was reached; ``capacity_bytes``, what the allocator may hold
    (None: unknown); ``curve``, the bytes in use over the cell's time, thinned for a chart.
    """

    allocator: str
    start_bytes: float
    end_bytes: float
    peak_bytes: float
    peak_s: float | None = None
    peak_path: tuple[str, ...] = ()
    peak_line: int = 0
    capacity_bytes: float | None = None
    curve: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Allocation:
    """One of the largest allocations XLA lists when a program does not fit.

    Its size, the array's shape, the operator (XLA's ``op_name``), the source file and line it
    names, and that line in the cell (0: another file).
    """

    size_bytes: float
    shape: str = ""
    operator: str = ""
    source_file: str = ""
    source_line: int = 0
    cell_line: int = 0


@dataclass(frozen=True)
class OutOfMemory:
    """The cell failed because the device's memory ran out, as XLA's message says it.

    ``asked_bytes``: what the program or allocation needed (0: not said); ``available_bytes``: what
    the device had, its capacity at compile time or what was free (None: not said); the memory
    ``space`` (``hbm``, ``device``); when it happened (``at``: ``compile`` or ``run``); and the
    largest allocations XLA listed.
    """

    asked_bytes: float
    available_bytes: float | None = None
    space: str = "device"
    at: str = "run"
    allocations: tuple[Allocation, ...] = ()


@dataclass(frozen=True)
class Memory:
    """The device's memory over the cell, its pinned host memory apart, and the figures' source.

    ``device`` and ``host`` (pinned host memory); ``source``: ``timeline``, the allocators' events;
    ``runtime``, the backend's live figures; "" none (the CPU client keeps none).
    ``growth_per_step``: bytes added each step when the steps keep growing it (a leak; None: they
    don't), over ``growth_steps`` steps; ``oom``: the cell ran out of memory.
    """

    device: MemoryUse | None = None
    host: MemoryUse | None = None
    source: str = ""
    growth_per_step: float | None = None
    growth_steps: int = 0
    oom: OutOfMemory | None = None
