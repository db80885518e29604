"""Steps recorded in Python, written into the saved timeline as the profiler's own markers.

A loop of tiny steps records each step's start in Python, not as a profiler event
(:meth:`~xprof_magic._cell.step_tracker.StepTracker.go_fast`): a marker costs more than such a
step. Once the trace has stopped, this module adds one ``step`` event per recorded step to the
cell's thread in ``<host>.xplane.pb``, with the stats a marker of the profiler's carries
(``_r=1``, ``step_num``), in start order among the line's events, so that XProf's own tools and
the summary find every step as if it had been marked while it ran.

The file is parsed through the protobuf runtime with a schema subset of XSpace's public
``xplane.proto`` (openxla/xla ``xla/tsl/profiler/protobuf/xplane.proto``), declared here with
the same field numbers: each plane's lines stay serialized, and only the cell thread's line
is parsed and written again, with every field of ``XLine`` declared so that its layout stays
the profiler's (field number order). Fields left undeclared are kept by the runtime. The
summary's reader has its own schema (``_analysis/timeline/xspace.py``), above this package.
Imported lazily, only when a capture recorded such steps.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xprof_magic._protoschema import BYTES, INT64, MESSAGE, STRING, UINT64, Field, message_classes

__all__ = ["write_steps"]

_STEP = "step"
_ROOT, _NUMBER = "_r", "step_num"

# message: [(field, number, type, repeated, message type)], as in xplane.proto.
_MESSAGES: dict[str, list[Field]] = {
    "Stat": [
        ("metadata_id", 1, INT64, False, None),
        ("uint64_value", 3, UINT64, False, None),
        ("int64_value", 4, INT64, False, None),
        ("str_value", 5, STRING, False, None),
    ],
    "Metadata": [("id", 1, INT64, False, None), ("name", 2, STRING, False, None)],
    "Event": [
        ("metadata_id", 1, INT64, False, None),
        ("offset_ps", 2, INT64, False, None),
        ("duration_ps", 3, INT64, False, None),
        ("stats", 4, MESSAGE, True, "Stat"),
    ],
    "Offsets": [("events", 4, MESSAGE, True, "Offset")],
    "Offset": [("metadata_id", 1, INT64, False, None), ("offset_ps", 2, INT64, False, None)],
    "Line": [
        ("id", 1, INT64, False, None),
        ("name", 2, STRING, False, None),
        ("timestamp_ns", 3, INT64, False, None),
        ("events", 4, BYTES, True, None),
        ("duration_ps", 9, INT64, False, None),
        ("display_id", 10, INT64, False, None),
        ("display_name", 11, STRING, False, None),
    ],
    "Plane": [
        ("name", 2, STRING, False, None),
        ("lines", 3, BYTES, True, None),
        ("event_metadata", 4, MESSAGE, True, "Plane.EventMetadataEntry"),
        ("stat_metadata", 5, MESSAGE, True, "Plane.StatMetadataEntry"),
        ("stats", 6, MESSAGE, True, "Stat"),
    ],
    "Space": [("planes", 1, MESSAGE, True, "Plane")],
}
_ENTRIES = {"EventMetadataEntry": "Metadata", "StatMetadataEntry": "Metadata"}

_CLASSES = message_classes(
    "xprof_magic.step_events",
    "xprof_magic/step_events.proto",
    _MESSAGES,
    oneof="Stat",
    maps={"Plane": _ENTRIES},
)


def write_steps(folder: Path, steps: Sequence[tuple[int, int, int]]) -> int:
    """Add ``steps`` to the host timeline under ``folder``; return how many were written.

    Each step is (number, start, end) in wall-clock ns. They go on the line of the cell's thread:
    the one holding the most ``step`` markers already (a loop's first steps are marked while they
    run, before their length is known). 0 are written where no line holds a marker.
    """
    if not steps:
        return 0
    for path in sorted(folder.rglob("*.xplane.pb")):
        space = _CLASSES["Space"]()
        space.ParseFromString(path.read_bytes())
        start_ns = _profile_start(space)
        if start_ns is None:
            continue
        for plane in space.planes:
            if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
                continue
            marked = [k for k, meta in plane.event_metadata.items() if meta.name == _STEP]
            if not marked:
                continue
            best, most = -1, 0
            for index, serialized in enumerate(plane.lines):
                held = _CLASSES["Offsets"]()
                held.ParseFromString(serialized)
                count = sum(1 for event in held.events if event.metadata_id in marked)
                if count > most:
                    best, most = index, count
            if best < 0:
                continue
            line = _CLASSES["Line"]()
            line.ParseFromString(plane.lines[best])
            plane.lines[best] = _with_steps(plane, line, plane.lines[best], start_ns, steps)
            path.write_bytes(space.SerializeToString())
            return len(steps)
    return 0


def _profile_start(space: Any) -> int | None:
    """The profile's start (wall-clock ns), which the host lines' times count from."""
    for plane in space.planes:
        if plane.name != "Task Environment":
            continue
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == "profile_start_time":
                kind = stat.WhichOneof("value")
                value = getattr(stat, kind) if kind else None
                text = str(value) if value is not None else ""
                return int(text) if text.isdigit() else None
    return None


def _with_steps(
    plane: Any,
    line: Any,
    serialized: bytes,
    start_ns: int,
    steps: Sequence[tuple[int, int, int]],
) -> bytes:
    """The line, serialized again, with a ``step`` event for each step, in start order."""
    step_id = _metadata_id(plane.event_metadata, _STEP)
    root_id = _metadata_id(plane.stat_metadata, _ROOT)
    number_id = _metadata_id(plane.stat_metadata, _NUMBER)
    base_ns = start_ns + int(line.timestamp_ns)
    made: list[tuple[int, bytes]] = []
    for number, start, end in steps:
        event = _CLASSES["Event"](
            metadata_id=step_id,
            offset_ps=(start - base_ns) * 1000,
            duration_ps=max(end - start, 0) * 1000,
        )
        event.stats.add(metadata_id=root_id, int64_value=1)
        event.stats.add(metadata_id=number_id, int64_value=number)
        made.append((event.offset_ps, event.SerializeToString()))
    made.sort(key=lambda pair: pair[0])
    old = list(line.events)
    offsets_message = _CLASSES["Offsets"]()
    offsets_message.ParseFromString(serialized)
    held = [event.offset_ps for event in offsets_message.events]
    merged: list[bytes] = []
    if any(b < a for a, b in itertools.pairwise(held)):
        merged = old + [data for _, data in made]  # not in start order already: readers sort
    else:
        last = 0
        for offset, data in made:
            position = bisect.bisect_left(held, offset, lo=last)
            merged.extend(old[last:position])
            merged.append(data)
            last = position
        merged.extend(old[last:])
    del line.events[:]
    line.events.extend(merged)
    return bytes(line.SerializeToString())


def _metadata_id(table: Any, name: str) -> int:
    """The id of ``name`` in a plane's event or stat metadata, added when it has none."""
    for key, meta in table.items():
        if meta.name == name:
            return int(key)
    key = max((int(k) for k in table), default=0) + 1
    table[key].id = key
    table[key].name = name
    return key
