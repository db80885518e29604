"""The compiled programs a timeline holds: their HLO, read through a schema of our own.

XLA's profiler puts every program it knows of (``/host:metadata``: one event metadata per
program, named ``<module>(<program id>)``, with the serialized ``xla.HloProto`` as its stat
``Hlo Proto``) into the capture, those compiled before the trace started too. That is how a
compile cause is found when the loop's items say nothing: tensors made inside the step, or a
Python number baked into the graph, change the programs that compile again.

The reader keeps each program serialized (:class:`Program`) and decodes nothing; the
diagnosis decodes the few it compares, only when it needs a cause (:func:`signature`,
:func:`constants`). The schema is the public one (``xla/service/hlo.proto`` and
``xla/xla_data.proto`` in openxla/xla), declared in part, with the same field numbers, as
:mod:`.xspace` declares XSpace's; undeclared fields are skipped by the protobuf runtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from xprof_magic._analysis.timeline.line_arrays import Floats, Index, Ints, first_of_each

__all__ = [
    "METADATA_PLANE",
    "Program",
    "constants",
    "module_of",
    "name_programs",
    "program_time",
    "read_programs",
    "signature",
]

METADATA_PLANE = "/host:metadata"
_HLO_STAT = "Hlo Proto"
_ID = re.compile(r"\((\d+)\)$")


@dataclass(frozen=True)
class Program:
    """One compiled program.

    XLA's id for it (in compile order), its module name, its serialized ``HloProto``, and
    whether it was compiled ``earlier`` than the capture.
    """

    id: int
    name: str
    hlo: bytes
    earlier: bool = False


def read_programs(plane: Any, compiles: int) -> list[Program]:
    """The programs that can tell why the capture compiled, by id.

    From the ``/host:metadata`` plane (an XSpace plane message): the ``compiles`` newest
    (those its compile events made) and, for each of their module names, the newest one
    compiled before them.
    """
    if compiles <= 0:
        return []
    hlo_stats = {key for key, meta in plane.stat_metadata.items() if meta.name == _HLO_STAT}
    named = []
    for key, meta in plane.event_metadata.items():
        match = _ID.search(meta.name)
        if match is not None:
            named.append((int(match.group(1)), meta.name[: match.start()], key))
        else:
            named.append((key, meta.name, key))
    named.sort()
    new = named[-compiles:]
    names = {name for _, name, _ in new}
    before = {entry[1]: entry for entry in named[: len(named) - len(new)] if entry[1] in names}
    earlier = set(before.values())
    found = []
    for entry in sorted([*earlier, *new]):
        number, name, key = entry
        for stat in plane.event_metadata[key].stats:
            if stat.metadata_id in hlo_stats and stat.bytes_value:
                found.append(Program(number, name, bytes(stat.bytes_value), entry in earlier))
                break
    return found


def name_programs(
    stat: Callable[[int, str], str | None],
    order: Index,
    name_id: Ints,
    names: Sequence[str] | None = None,
    firsts: tuple[Ints, Ints] | None = None,
) -> list[str]:
    """The program of each event name of a line (by name id), as XProf names it.

    XProf's name is ``<module>(<program id>)``; "" for a name that is no XLA op. A name's
    first event with the ``hlo_module`` stat says it (see :func:`program_time`).
    ``firsts``: ``first_of_each(name_id)`` where the caller has it.
    """
    if not len(order):
        return []
    unique, first = first_of_each(name_id) if firsts is None else firsts
    program = [""] * (int(unique[-1]) + 1)
    for u, at in zip(unique.tolist(), first.tolist(), strict=True):
        name = names[u] if names is not None else stat(int(order[at]), "hlo_module")
        if name and not _ID.search(name):  # A chip's module is named with its id already.
            number = stat(int(order[at]), "program_id")
            name = f"{name}({number})" if number else ""
        program[u] = name or ""
    return program


def module_of(program: str) -> str:
    """A program's module, without its id: ``jit_train_step(28)`` → ``jit_train_step``."""
    return _ID.sub("", program)


def program_time(
    stat: Callable[[int, str], str | None],
    order: Index,
    name_id: Ints,
    dur: Floats,
    parent: Index | None = None,
    names: Sequence[str] | None = None,
    program: list[str] | None = None,
) -> dict[str, float]:
    """Time (ns) of each program that ran on one line, named as XProf names it.

    XProf's name is ``<module>(<program id>)``. The line's events are given in ``order``
    (their stored indices), with their ``name_id``, ``dur`` and ``parent`` (their enclosing
    event's position, -1 for none); ``stat`` is the line's :attr:`~.lines.Line.text`.

    An event is an XLA op of a program when its name's first event has the ``hlo_module``
    stat (an op's name is its program's), so a line costs a stat read per distinct name, not
    per event; only ops outside another op count. With ``names`` (the line's: a chip's
    modules line) every event is a module, named as its program already; ``program``, the
    line's :func:`name_programs` where the caller has them.
    """
    found: dict[str, float] = {}
    if not len(order):
        return found
    if program is None:
        program = name_programs(stat, order, name_id, names)
    is_op = np.array([bool(p) for p in program])
    op = is_op[name_id]
    if parent is not None:
        op &= ~((parent >= 0) & op[parent])  # op[-1] where none: masked out
    if not op.any():
        return found
    totals = np.bincount(name_id[op], weights=dur[op], minlength=len(program))
    for u in np.flatnonzero(np.bincount(name_id[op], minlength=len(program))).tolist():
        found[program[u]] = found.get(program[u], 0.0) + float(totals[u])
    return found


_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "xprof_magic.hlo"
_Field = tuple[str, int, int, bool, "str | None"]
_MESSAGES: dict[str, list[_Field]] = {
    "ShapeProto": [
        ("element_type", 2, _F.TYPE_INT32, False, None),
        ("dimensions", 3, _F.TYPE_INT64, True, None),
        ("tuple_shapes", 4, _F.TYPE_MESSAGE, True, "ShapeProto"),
    ],
    "ProgramShapeProto": [
        ("parameters", 1, _F.TYPE_MESSAGE, True, "ShapeProto"),
        ("result", 2, _F.TYPE_MESSAGE, False, "ShapeProto"),
    ],
    "LiteralProto": [
        ("preds", 2, _F.TYPE_BOOL, True, None),
        ("s32s", 4, _F.TYPE_INT32, True, None),
        ("s64s", 5, _F.TYPE_INT64, True, None),
        ("u32s", 6, _F.TYPE_UINT32, True, None),
        ("u64s", 7, _F.TYPE_UINT64, True, None),
        ("f32s", 8, _F.TYPE_FLOAT, True, None),
        ("f64s", 9, _F.TYPE_DOUBLE, True, None),
    ],
    "HloInstructionProto": [
        ("opcode", 2, _F.TYPE_STRING, False, None),
        ("shape", 3, _F.TYPE_MESSAGE, False, "ShapeProto"),
        ("literal", 8, _F.TYPE_MESSAGE, False, "LiteralProto"),
    ],
    "HloComputationProto": [
        ("instructions", 2, _F.TYPE_MESSAGE, True, "HloInstructionProto"),
    ],
    "HloModuleProto": [
        ("name", 1, _F.TYPE_STRING, False, None),
        ("computations", 3, _F.TYPE_MESSAGE, True, "HloComputationProto"),
        ("host_program_shape", 4, _F.TYPE_MESSAGE, False, "ProgramShapeProto"),
    ],
    "HloProto": [("hlo_module", 1, _F.TYPE_MESSAGE, False, "HloModuleProto")],
    # The same module without its computations: the signature alone skips their bytes.
    "HloModuleSignature": [
        ("host_program_shape", 4, _F.TYPE_MESSAGE, False, "ProgramShapeProto"),
    ],
    "HloSignature": [("hlo_module", 1, _F.TYPE_MESSAGE, False, "HloModuleSignature")],
}


def _classes() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="xprof_magic/hlo_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=kind)
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    get_class = getattr(message_factory, "GetMessageClass", None)
    found: dict[str, Any] = {}
    for name in ("HloProto", "HloSignature"):
        descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")
        if get_class is not None:
            found[name] = get_class(descriptor)
        else:  # protobuf 4.21, before GetMessageClass
            found[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return found


_CLASSES = _classes()


def _shape(shape: Any) -> str:
    """A shape as torch and NumPy print it: ``(16, 20)``, or ``((16, 20), ())`` for a tuple.

    XLA's element type is left out.
    """
    if shape.tuple_shapes:
        return "(" + ", ".join(_shape(s) for s in shape.tuple_shapes) + ")"
    return str(tuple(int(n) for n in shape.dimensions))


def signature(program: Program) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A program's input shapes and its outputs'; ``((), ())`` if it does not decode.

    The outputs are a tuple result's elements, else the result.
    """
    message = _CLASSES["HloSignature"]()
    try:
        message.ParseFromString(program.hlo)
    except DecodeError:
        return (), ()
    shape = message.hlo_module.host_program_shape
    result = shape.result
    outputs = result.tuple_shapes if result.tuple_shapes else [result]
    return tuple(_shape(p) for p in shape.parameters), tuple(_shape(o) for o in outputs)


_VALUES = ("f32s", "f64s", "s32s", "s64s", "u32s", "u64s", "preds")


def constants(program: Program) -> tuple[str, ...]:
    """The program's scalar constants (``0.31``, ``2``); () if it does not decode.

    In the order of its computations and instructions: where a Python number baked into the
    graph shows.
    """
    message = _CLASSES["HloProto"]()
    try:
        message.ParseFromString(program.hlo)
    except DecodeError:
        return ()
    found = []
    for computation in message.hlo_module.computations:
        for instruction in computation.instructions:
            if instruction.opcode != "constant" or instruction.shape.dimensions:
                continue
            literal = instruction.literal
            for kind in _VALUES:
                values = getattr(literal, kind)
                if len(values) == 1:
                    value = values[0]
                    found.append(f"{value:.6g}" if isinstance(value, float) else str(value))
                    break
    return tuple(found)
