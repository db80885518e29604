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

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["write_steps"]

_STEP = "step"
_ROOT, _NUMBER = "_r", "step_num"

_PACKAGE = "xprof_magic.step_events"
_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _STRING, _BYTES, _MESSAGE = (
    _F.TYPE_INT64,
    _F.TYPE_UINT64,
    _F.TYPE_STRING,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
)
# message: [(field, number, type, repeated, message type)], as in xplane.proto.
_MESSAGES: dict[str, list[tuple[str, int, int, bool, str | None]]] = {
    "Stat": [
        ("metadata_id", 1, _INT64, False, None),
        ("uint64_value", 3, _UINT64, False, None),
        ("int64_value", 4, _INT64, False, None),
        ("str_value", 5, _STRING, False, None),
    ],
    "Metadata": [("id", 1, _INT64, False, None), ("name", 2, _STRING, False, None)],
    "Event": [
        ("metadata_id", 1, _INT64, False, None),
        ("offset_ps", 2, _INT64, False, None),
        ("duration_ps", 3, _INT64, False, None),
        ("stats", 4, _MESSAGE, True, "Stat"),
    ],
    "Offsets": [("events", 4, _MESSAGE, True, "Offset")],
    "Offset": [("metadata_id", 1, _INT64, False, None), ("offset_ps", 2, _INT64, False, None)],
    "Line": [
        ("id", 1, _INT64, False, None),
        ("name", 2, _STRING, False, None),
        ("timestamp_ns", 3, _INT64, False, None),
        ("events", 4, _BYTES, True, None),
        ("duration_ps", 9, _INT64, False, None),
        ("display_id", 10, _INT64, False, None),
        ("display_name", 11, _STRING, False, None),
    ],
    "Plane": [
        ("name", 2, _STRING, False, None),
        ("lines", 3, _BYTES, True, None),
        ("event_metadata", 4, _MESSAGE, True, "Plane.EventMetadataEntry"),
        ("stat_metadata", 5, _MESSAGE, True, "Plane.StatMetadataEntry"),
        ("stats", 6, _MESSAGE, True, "Stat"),
    ],
    "Space": [("planes", 1, _MESSAGE, True, "Plane")],
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="xprof_magic/step_events.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind)
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"
        if name == "Stat":
            message.oneof_decl.add(name="value")
            for field in message.field[1:]:
                field.oneof_index = 0
        if name == "Plane":
            for entry in ("EventMetadataEntry", "StatMetadataEntry"):
                nested = message.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.add(name="key", number=1, type=_INT64, label=_F.LABEL_OPTIONAL)
                nested.field.add(
                    name="value",
                    number=2,
                    type=_MESSAGE,
                    label=_F.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.Metadata",
                )
    return file


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    found: dict[str, Any] = {}
    for name in _MESSAGES:
        descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")
        get_class = getattr(message_factory, "GetMessageClass", None)
        if get_class is not None:
            found[name] = get_class(descriptor)
        else:  # protobuf 4.21, before GetMessageClass
            found[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return found


_CLASSES = _classes()


def write_steps(folder: Path, steps: Sequence[tuple[int, int, int]]) -> int:
    """Add ``steps`` (number, start and end in wall-clock ns) to the host timeline under
    ``folder``, on the line of the cell's thread: the one holding the most ``step`` markers
    already (a loop's first steps are marked while they run, before their length is known);
    return how many were written (0 where no line holds a marker)."""
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
