"""XSpace, the profiler's ``<host>.xplane.pb``, read through the real protobuf runtime.

No wheel we depend on ships ``xplane_pb2`` (not xprof, torch_xla or tensorboard), and XProf's
own ``ProfileData`` API costs about 10 µs an event. The schema is public
(``xla/tsl/profiler/protobuf/xplane.proto`` in openxla/xla), so this module declares the part
of it the timeline reader uses, with the same field numbers, and builds the classes at import
time from a ``FileDescriptorProto``: no generated code, so no tie to the ``protoc`` version
that generated it, and the same source works on every protobuf runtime from 4.21 to 7.x
(upb, C++ or pure Python). Undeclared fields are skipped by the runtime.

Two shapes of the same bytes:

* :data:`XSpace` declares planes → lines → events → stats in full (as the ``.proto`` does).
* :data:`RawXLine` declares a line's ``events`` as ``bytes``: the viewer's preview
  (:mod:`xprof_magic._viewer.prepare.preview`) parses the few events its binary searches read
  (:data:`LazyXEvent`) and cuts the rest unread.
* :data:`LazyXSpace` declares a plane's ``lines`` as ``bytes`` (on the wire a sub-message
  and ``bytes`` are the same), so parsing the file keeps each line serialized;
  :func:`parse_line` then parses one line at a time, and keeps each event's stats
  serialized too: the reader needs the stats of few events, and building every stat as a
  message would double the parse. Only one line is ever held as messages, which keeps
  memory near the size of the file.

Both declare each event metadata's ``name`` and ``stats`` (field 5): a TPU's XLA op keeps
its ``hlo_category`` and ``shape_with_layout`` there, once per op. They are parsed with the
plane, as messages: a plane has one metadata per distinct event name (441 in all on a 100 MB
CPU capture, 3 stats among them), so the cost does not show in the parse.
"""

from __future__ import annotations

from typing import Any

from xprof_magic._protoschema import (
    BYTES,
    DOUBLE,
    INT64,
    MESSAGE,
    STRING,
    UINT64,
    Field,
    message_classes,
)

__all__ = [
    "LazyXEvent",
    "LazyXLine",
    "LazyXPlane",
    "LazyXSpace",
    "RawXLine",
    "XLine",
    "XPlane",
    "XSpace",
    "XStat",
    "parse_line",
    "parse_stat",
    "stat_value",
]

# (message, [(field, number, type, repeated, message type or None)]) as in xplane.proto.
_XSTAT: list[Field] = [
    ("metadata_id", 1, INT64, False, None),
    ("double_value", 2, DOUBLE, False, None),
    ("uint64_value", 3, UINT64, False, None),
    ("int64_value", 4, INT64, False, None),
    ("str_value", 5, STRING, False, None),
    ("bytes_value", 6, BYTES, False, None),
    ("ref_value", 7, UINT64, False, None),
]
_EVENT: list[Field] = [
    ("metadata_id", 1, INT64, False, None),
    ("offset_ps", 2, INT64, False, None),
    ("duration_ps", 3, INT64, False, None),
]
_LINE: list[Field] = [
    ("name", 2, STRING, False, None),
    ("timestamp_ns", 3, INT64, False, None),
]
_PLANE: list[Field] = [
    ("name", 2, STRING, False, None),
    ("event_metadata", 4, MESSAGE, True, "XPlane.EventMetadataEntry"),
    ("stat_metadata", 5, MESSAGE, True, "XPlane.StatMetadataEntry"),
    ("stats", 6, MESSAGE, True, "XStat"),
]
_MESSAGES: dict[str, list[Field]] = {
    "XStat": _XSTAT,
    "XStatMetadata": [("name", 2, STRING, False, None)],
    "XEventMetadata": [("name", 2, STRING, False, None), ("stats", 5, MESSAGE, True, "XStat")],
    "XEvent": [*_EVENT, ("stats", 4, MESSAGE, True, "XStat")],
    "LazyXEvent": [*_EVENT, ("stats", 4, BYTES, True, None)],
    "XLine": [*_LINE, ("events", 4, MESSAGE, True, "XEvent")],
    "LazyXLine": [*_LINE, ("events", 4, MESSAGE, True, "LazyXEvent")],
    "RawXLine": [*_LINE, ("events", 4, BYTES, True, None)],
    "XPlane": [*_PLANE, ("lines", 3, MESSAGE, True, "XLine")],
    "LazyXPlane": [*_PLANE, ("lines", 3, BYTES, True, None)],
    "XSpace": [("planes", 1, MESSAGE, True, "XPlane")],
    "LazyXSpace": [("planes", 1, MESSAGE, True, "LazyXPlane")],
}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


_CLASSES = message_classes(
    "xprof_magic.xplane",
    "xprof_magic/xplane_subset.proto",
    _MESSAGES,
    oneof="XStat",
    maps={"XPlane": _MAPS, "LazyXPlane": _MAPS},
)
XStat: Any = _CLASSES["XStat"]
XLine: Any = _CLASSES["XLine"]
LazyXLine: Any = _CLASSES["LazyXLine"]
LazyXEvent: Any = _CLASSES["LazyXEvent"]
RawXLine: Any = _CLASSES["RawXLine"]
XPlane: Any = _CLASSES["XPlane"]
XSpace: Any = _CLASSES["XSpace"]
LazyXSpace: Any = _CLASSES["LazyXSpace"]
LazyXPlane: Any = _CLASSES["LazyXPlane"]


def parse_line(data: bytes | memoryview) -> Any:
    """One serialized ``XLine``, its events' stats left serialized (see :func:`parse_stat`)."""
    line = LazyXLine()
    line.ParseFromString(data)
    return line


def parse_stat(data: bytes) -> Any:
    """One serialized ``XStat`` of a :data:`LazyXLine` event."""
    stat = XStat()
    stat.ParseFromString(data)
    return stat


def stat_value(stat: Any) -> str:
    """A stat's value as text, as XProf's ``ProfileData`` gives it (a ref stays a number)."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "bytes_value":
        return str(stat.bytes_value.decode("utf-8", "replace"))
    if kind == "double_value":
        return f"{stat.double_value:g}"
    return str(getattr(stat, kind))
