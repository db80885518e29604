"""A device's plane in the timeline pass, read by the module that knows its shape.

Every accelerator XLA runs on writes one ``/device:<kind>:N`` plane per device, but each
kind lays it out its own way: a TPU has ``XLA Modules`` and ``XLA Ops`` lines
(:mod:`.device_tpu`), a GPU one line per CUDA stream of kernels, copies and memsets
(:mod:`.device_gpu`). Each module turns its shape into the same facts: the device's busy
time (the union over its lines, never a sum), and on the first device the breakdown's
spans (``device``: computing; :data:`~.facts.DEVICE_SIDE`: waiting on input, copies or
collectives), the device-op table and the programs that ran. A plane of a shape no module
knows is read as busy wherever any of its lines has an event. A new accelerator is one
module here and one line in :func:`read_device_plane`.
"""

from __future__ import annotations

from xprof_magic._analysis.timeline import nesting
from xprof_magic._analysis.timeline.device_gpu import is_gpu, read_gpu_plane
from xprof_magic._analysis.timeline.device_tpu import is_tpu, read_tpu_plane
from xprof_magic._analysis.timeline.intervals import merge
from xprof_magic._analysis.timeline.reader import Reader
from xprof_magic._analysis.timeline.thread_lines import Line, Plane

__all__ = ["DEVICE_NAME_STATS", "read_device_plane"]

DEVICE_NAME_STATS = ("gpu_device_name", "device_type_string")
"""The plane stats that name its device: a GPU's (``NVIDIA H200``), a TPU's
(``TPU v6 Lite``)."""


def read_device_plane(reader: Reader, plane: Plane) -> None:
    """One device plane into the reader's facts.

    Its busy time and name, and on the first device plane what the breakdown measures.
    """
    facts = reader.facts
    first = not facts.devices
    lines: dict[str, Line] = {}
    for line in plane.lines():
        facts.events += len(line.start)
        reader.check()
        lines.setdefault(line.name, line)
    names = list(lines)
    if is_tpu(names):
        busy = read_tpu_plane(reader, lines, first)
    elif is_gpu(names):
        busy = read_gpu_plane(reader, plane.name, lines, first)
    else:
        busy = _any_event(reader, list(lines.values()), first)
    facts.devices.append((plane.name, busy))
    stats = dict(plane.stats)
    named = next((stats[key] for key in DEVICE_NAME_STATS if stats.get(key)), "")
    if named:
        facts.device_names[plane.name] = named


def _any_event(reader: Reader, lines: list[Line], first: bool) -> float:
    """A plane of unknown shape: busy wherever one of its lines has an event."""
    spans = [(line.start, line.start + line.dur) for line in lines if len(line.start)]
    if not spans:
        return 0.0
    lo, hi = merge(spans)
    if first:
        reader.add_spans("device", lo, hi)
    return nesting.union_ns(lo, hi, reader.facts.window)
