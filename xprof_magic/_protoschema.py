"""Protobuf message classes built at import time from a table of fields, with no generated code.

XSpace's schema is public (``xla/tsl/profiler/protobuf/xplane.proto`` in openxla/xla) but no
wheel we depend on ships its ``xplane_pb2``. The modules that read or write a capture declare
the part of it they use as a table with the same field numbers, and get their classes here from
a ``FileDescriptorProto``: no tie to the ``protoc`` version of generated code, and the same
source on every protobuf runtime from 4.21 to 7.x (upb, C++ or pure Python).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["BYTES", "DOUBLE", "INT64", "MESSAGE", "STRING", "UINT64", "Field", "message_classes"]

_F = descriptor_pb2.FieldDescriptorProto
INT64, UINT64, DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
STRING, BYTES, MESSAGE = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE

Field = tuple[str, int, int, bool, "str | None"]
"""A field: its name, number, type, whether it repeats, and its message type (None: a scalar)."""


def message_classes(
    package: str,
    file_name: str,
    messages: Mapping[str, Sequence[Field]],
    *,
    oneof: str = "",
    maps: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The message classes of ``messages``, by name.

    Args:
        package: the proto package the message types are named in.
        file_name: the descriptor file's name (unique in the process's pools).
        messages: each message's fields, in the order of their numbers.
        oneof: the message whose fields after the first are one ``value`` (XStat's).
        maps: for a message, its map entries (``EventMetadataEntry``) and their value types;
            a field whose type names an entry is that map.
    """
    file = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    for name, fields in messages.items():
        message = file.message_type.add(name=name)
        _add_fields(message, package, fields)
        if name == oneof:
            message.oneof_decl.add(name="value")
            for field in message.field[1:]:
                field.oneof_index = 0
        entries = (maps or {}).get(name, {})
        for entry, value in entries.items():
            nested = message.nested_type.add(name=entry)
            nested.options.map_entry = True
            _add_fields(
                nested,
                package,
                [("key", 1, INT64, False, None), ("value", 2, MESSAGE, False, value)],
            )
        for field in message.field:
            if field.type_name.rsplit(".", 1)[-1] in entries:
                field.type_name = f".{package}.{name}.{field.type_name.rsplit('.', 1)[1]}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    found: dict[str, Any] = {}
    get_class = getattr(message_factory, "GetMessageClass", None)
    for name in messages:
        descriptor = pool.FindMessageTypeByName(f"{package}.{name}")
        if get_class is not None:
            found[name] = get_class(descriptor)
        else:  # protobuf 4.21, before GetMessageClass
            found[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return found


def _add_fields(
    message: descriptor_pb2.DescriptorProto, package: str, fields: Sequence[Field]
) -> None:
    for name, number, kind, repeated, type_name in fields:
        field = message.field.add(name=name, number=number, type=kind)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name is not None:
            field.type_name = f".{package}.{type_name}"
