"""An out-of-memory error read from XLA's own message: what was asked against what was there.

XLA says it in a few forms, which :func:`out_of_memory` reads:

* at compile time, on a TPU: ``Ran out of memory in memory space hbm. Used 63.80G of 30.75G
  hbm. Exceeded hbm capacity by 33.05G.``, then ``Largest program allocations in hbm:``, each
  ``N. Size: 2.00G`` with its ``Operator: op_name="…" source_file="…" source_line=N`` and
  ``Shape: f32[32,4096,4096]{…}``;
* at run time: ``Out of memory while trying to allocate 4770354232 bytes.`` (a GPU's
  allocator, often with ``BufferAssignment stats`` and a ``total allocation``), ``Could not
  allocate N bytes``, ``Failed to allocate request for 16.00GiB (17179869184B)``, or a TPU's
  ``Attempting to reserve 3.95G at the bottom of memory. That was not possible. There are
  1.92G free`` / ``Attempting to allocate 8.00G. That was not possible. There are 3.94G free``.

XLA's sizes are binary (``G`` is 2³⁰ bytes, as ``GiB``). A source line is the cell's when its
file is the one the cell was compiled under (the run's ``cell_file``): its line is the
editor's, since the compiled source's first line is the ``%%xprof`` line, as in the cell.
"""

from __future__ import annotations

import re

from xprof_magic._analysis.model.device_memory import Allocation, OutOfMemory

__all__ = ["out_of_memory", "size_bytes"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_SIZE = r"(-?[\d.,]+)\s*([KMGTP]?)(?:i?B)?"
_COMPILED = re.compile(
    rf"Ran out of memory in memory space (\w+)\. Used {_SIZE} of {_SIZE} \w+", re.IGNORECASE
)
_ASKED = (
    re.compile(r"Out of memory while trying to allocate ([\d,]+) bytes", re.IGNORECASE),
    re.compile(r"Could not allocate ([\d,]+) bytes", re.IGNORECASE),
    re.compile(rf"Failed to allocate request for {_SIZE}\s*\(([\d,]+)B\)", re.IGNORECASE),
    re.compile(rf"Attempting to (?:reserve|allocate) {_SIZE}\b", re.IGNORECASE),
    re.compile(rf"ran out of memory trying to allocate {_SIZE}", re.IGNORECASE),
)
_FREE = re.compile(rf"There (?:are|is) {_SIZE} free", re.IGNORECASE)
_TOTAL = re.compile(rf"total allocation:\s*{_SIZE}", re.IGNORECASE)
_CAPACITY = re.compile(rf"(\w+) capacity {_SIZE}", re.IGNORECASE)
_ITEM = re.compile(rf"^\s*\d+\.\s+Size:\s*{_SIZE}\s*$", re.MULTILINE)
_OPERATOR = re.compile(r'op_name="([^"]*)"')
_FILE = re.compile(r'source_file="([^"]*)"\s+source_line=(\d+)')
_SHAPE = re.compile(r"^\s*Shape:\s*(\S+)", re.MULTILINE)
_MEMORY_WORDS = re.compile(r"RESOURCE[_ ]EXHAUSTED|out of memory|\bOOM\b", re.IGNORECASE)


def size_bytes(number: str, unit: str = "") -> float:
    """``2.00`` ``G`` → 2³¹ bytes; a plain number is bytes."""
    return float(number.replace(",", "")) * _UNITS.get(unit.upper(), 1)


def out_of_memory(message: str, cell_file: str = "", most: int = 5) -> OutOfMemory | None:
    """What XLA's ``message`` says ran out (None: it is no out-of-memory error).

    With the ``most`` largest allocations it lists; a line of ``cell_file`` is the cell's.
    """
    if not message or not _MEMORY_WORDS.search(message):
        return None
    compiled = _COMPILED.search(message)
    if compiled is not None:
        space = compiled.group(1).lower()
        used, capacity = size_bytes(*compiled.group(2, 3)), size_bytes(*compiled.group(4, 5))
        return OutOfMemory(used, capacity, space, "compile", _allocations(message, cell_file, most))
    asked = _asked(message)
    if asked is None:
        return None
    free = _FREE.search(message)
    available: float | None = size_bytes(*free.group(1, 2)) if free else None
    limit = _CAPACITY.search(message)
    space = limit.group(1).lower() if limit else "device"
    if available is None and limit is not None:
        available = size_bytes(*limit.group(2, 3))
    return OutOfMemory(asked, available, space, "run", _allocations(message, cell_file, most))


def _asked(message: str) -> float | None:
    for pattern in _ASKED:
        found = pattern.search(message)
        if found is None:
            continue
        groups = [g for g in found.groups() if g is not None]
        if len(groups) == 3:  # "16.00GiB (17179869184B)": the exact bytes
            return size_bytes(groups[2])
        return size_bytes(*groups[:2]) if len(groups) >= 2 else size_bytes(groups[0])
    total = _TOTAL.search(message)
    return size_bytes(*total.group(1, 2)) if total else None


def _allocations(message: str, cell_file: str, most: int) -> tuple[Allocation, ...]:
    """The largest allocations XLA lists (``N. Size: …`` items), largest first."""
    items = list(_ITEM.finditer(message))
    found = []
    for k, item in enumerate(items):
        body = message[item.end() : items[k + 1].start() if k + 1 < len(items) else None]
        op = _OPERATOR.search(body)
        where = _FILE.search(body)
        shape = _SHAPE.search(body)
        source, line = (where.group(1), int(where.group(2))) if where else ("", 0)
        found.append(
            Allocation(
                size_bytes=size_bytes(*item.group(1, 2)),
                shape=shape.group(1).split("{")[0] if shape else "",
                operator=op.group(1) if op else "",
                source_file=source,
                source_line=line,
                cell_line=line if cell_file and source == cell_file else 0,
            )
        )
    found.sort(key=lambda a: -a.size_bytes)
    return tuple(found[:most])
