"""Why the steps compiled again, beyond the growing graph: what changed between compilations.

Two sources, in this order:

- the loop's items (:func:`xprof_magic._cell.labels.inputs` marks each change of their shapes,
  a dict batch's by key, a tuple's by position): each input that changed, once, with its
  shapes in order (``input_ids (8, 20) → (8, 36) → …``);
- the compiled programs (:mod:`~xprof_magic._analysis.timeline.programs`), when the items
  say nothing (the tensors are made inside the step, or the loop has no items): programs of
  one module name that the capture compiled again (compared among themselves, or with the
  one compiled before the capture when it compiled that module once). Their input shapes
  changed (a tensor made in the step and fed to the graph), else their outputs' (a tensor
  the graph itself makes, ``jnp.ones((L, 32))``), else the constants that not all of them
  hold: a Python number baked into the graph that changes each step (torch_xla bakes an
  exponent, ``x.pow(p)``; JAX a static argument). With the same shapes and constants, a
  baked Python number that is not a constant (an index, a slice bound) is the cause left.

The cause is data (:class:`Changes`); the render stage words it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xprof_magic._analysis.timeline.programs import Program, constants, signature

__all__ = ["Changes", "changed_inputs", "compile_changes"]

_PART = re.compile(r"(?:([^\s(),]+) )?(\((?:\d+(?:, \d+)*,?)?\))")


@dataclass(frozen=True)
class Changes:
    """A compile cause found here, what changed, where it was seen, and the loop items' shapes.

    The cause is ``""`` when none was found; what changed lists each input once: its name and its
    shapes or values in order. The shapes are as the loop's items gave them (for
    :attr:`Diagnosis.shapes`).
    """

    cause: str = ""
    changed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    found_in: str = ""
    shapes: tuple[str, ...] = ()


def compile_changes(
    cause: str, shapes: Sequence[str], programs: Sequence[Program], compiles: int
) -> Changes:
    """What changed for a compile verdict whose cause so far is ``cause``.

    The items' ``shapes`` for ``changing shapes``; for a cause not found yet (``""``), the
    ``programs`` (``compiles``: how many the cell compiled).
    """
    if cause == "changing shapes":
        return Changes("", changed_inputs(shapes), "items", tuple(shapes))
    if cause or compiles < 2:
        return Changes()
    return _from_programs(programs)


def changed_inputs(shapes: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each input of the loop's items whose shape changed, once: ``(name, its shapes in order)``.

    Inputs whose shapes changed alike share one entry (``input_ids, attention_mask``). ``shapes``
    are the items' shapes at each change, as :func:`xprof_magic._cell.labels.inputs` records them
    (``input_ids (8, 20), labels (8,)``).
    """
    seen: dict[str, list[str]] = {}
    for text in shapes:
        parts = _PART.findall(text)
        for at, (name, shape) in enumerate(parts):
            key = name or ("" if len(parts) == 1 else f"[{at}]")
            order = seen.setdefault(key, [])
            if not order or order[-1] != shape:
                order.append(shape)
    return _grouped({name: tuple(order) for name, order in seen.items() if len(order) > 1})


def _grouped(
    changing: dict[str, tuple[str, ...]],
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Inputs with the same shapes in the same order, named together."""
    names: dict[tuple[str, ...], list[str]] = {}
    for name, order in changing.items():
        names.setdefault(order, []).append(name)
    return tuple((", ".join(n for n in group if n), order) for order, group in names.items())


def _from_programs(programs: Sequence[Program]) -> Changes:
    """The cause the programs compiled again for.

    Of the module name the capture compiled most often, what differs between its programs (input
    shapes, output shapes, constants).
    """
    by_name: dict[str, list[Program]] = {}
    for program in programs:
        by_name.setdefault(program.name, []).append(program)
    found: list[tuple[int, int, Changes]] = []
    for group in by_name.values():
        new = [p for p in group if not p.earlier]
        # What changed between this capture's compilations; the one before them only when
        # the capture compiled the module once (an earlier cell's may differ in anything).
        compared = new if len(new) >= 2 else group
        if len(compared) < 2:
            continue
        rank, changes = _group_change(compared)
        found.append((-len(new), rank, changes))
    if not found:
        return Changes()
    return min(found, key=lambda f: (f[0], f[1]))[2]


def _group_change(group: list[Program]) -> tuple[int, Changes]:
    """What differs between the programs of one module name, ranked.

    Input shapes (0), output shapes (1), constants (2), nothing the programs show (3).
    """
    signatures = [signature(p) for p in group]
    for rank, found_in in enumerate(("program inputs", "program outputs")):
        changing = _changing([s[rank] for s in signatures])
        if changing:
            return rank, Changes("changing shapes", changing, found_in, changing[0][1])
    values = _own_values([constants(p) for p in group])
    if len(values) > 1:
        return 2, Changes("changing values", (("", values),), "program constants")
    return 3, Changes("changing values", (), "programs")


def _changing(rows: list[tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The columns of ``rows`` whose value changed, each as ``("", its values in order)``.

    ``rows`` has one row per program, in compile order; alike columns come once; none when the rows
    differ in length (the programs are not one step's).
    """
    if not rows or len({len(row) for row in rows}) != 1:
        return ()
    changing = {
        str(at): _in_order(column)
        for at, column in enumerate(zip(*rows, strict=True))
        if len(set(column)) > 1
    }
    return tuple(("", order) for _, order in _grouped(changing))


def _own_values(values: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The constants each program has that not every one of them has, in compile order.

    These are the baked numbers that changed (a constant the compiler folded away, a factor of 1,
    leaves its program out).
    """
    common = set.intersection(*(set(v) for v in values)) if values else set()
    own = [", ".join(dict.fromkeys(x for x in v if x not in common)) for v in values]
    return _in_order([o for o in own if o])


def _in_order(values: Sequence[str]) -> tuple[str, ...]:
    """``values`` with each run of one value kept once."""
    out: list[str] = []
    for value in values:
        if not out or out[-1] != value:
            out.append(value)
    return tuple(out)
