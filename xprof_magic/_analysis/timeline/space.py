"""A capture's planes without copying their lines: the file's top level walked in Python.

Parsing the whole file with the runtime copies every line into protobuf's memory, and each
line is copied again when read from the message. The top level is a few hundred fields
(the planes; each plane's lines, event and stat metadata, stats), so Python walks it: each
plane's other fields are parsed by the runtime (:data:`~.xspace.LazyXPlane`), and its
lines stay slices of the file's bytes until each is read (:mod:`.wire`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from xprof_magic._analysis.timeline import xspace
from xprof_magic._analysis.timeline.wire import Buffer

__all__ = ["Mapped", "SplitPlane", "split_space"]

_PLANE = 0x0A  # XSpace.planes: field 1, length-delimited
_LINE = 0x1A  # XPlane.lines: field 3, length-delimited


class SplitPlane(NamedTuple):
    """A plane as :func:`split_space` finds it."""

    plane: Any
    """Its fields but its lines, parsed (:data:`~.xspace.LazyXPlane`)."""
    lines: list[memoryview]
    """Its lines' bytes, slices of the file's."""
    spans: list[tuple[int, int]]
    """Where each line's bytes are in the file."""


def split_space(data: Buffer | mmap.mmap) -> list[SplitPlane]:
    """The planes of a serialized ``XSpace``: their fields parsed, their lines' bytes not.

    Each plane's fields but its lines are parsed by the runtime; its lines' bytes are not
    copied. A plane has some hundreds of fields besides its lines, so the walk over them is
    Python's. ``DecodeError`` where the bytes are not an ``XSpace``.
    """
    view = memoryview(data)
    planes = []
    for tag, _, start, end in _fields(view, 0, len(view)):
        if tag != _PLANE:
            continue
        lines, spans, rest = [], [], []
        for field, field_head, field_start, field_end in _fields(view, start, end):
            if field == _LINE:
                lines.append(view[field_start:field_end])
                spans.append((field_start, field_end))
            else:
                rest.append(view[field_head:field_end])
        plane = xspace.LazyXPlane()
        plane.ParseFromString(b"".join(rest))
        planes.append(SplitPlane(plane, lines, spans))
    return planes


class Mapped:
    """A file mapped into memory (read only), its pages given back once read.

    Pages go back to the system once the bytes on them are read (:meth:`release`): the file's
    part of the process's memory is then the line being read, not the whole file.
    """

    def __init__(self, path: Path):
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            self.data: mmap.mmap | bytes = (
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            )

    def release(self, span: tuple[int, int]) -> None:
        """The pages that ``span`` (a byte range) lies on, unless it shares them."""
        if not isinstance(self.data, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-span[0] // page) * page
        stop = span[1] // page * page
        if stop > start:
            with contextlib.suppress(OSError, ValueError):
                self.data.madvise(mmap.MADV_DONTNEED, start, stop - start)


def _fields(view: memoryview, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """The fields of the message in ``view[pos:end]``.

    Each field's tag, where its header starts, where its value starts and ends.
    """
    found = []
    while pos < end:
        head = pos
        tag, pos = _varint(view, pos, end)
        kind = tag & 7
        if kind == 0:
            _, stop = _varint(view, pos, end)
        elif kind == 2:
            length, pos = _varint(view, pos, end)
            stop = pos + length
        elif kind == 1:
            stop = pos + 8
        elif kind == 5:
            stop = pos + 4
        else:
            raise DecodeError(f"wire type {kind} at byte {head}")
        if stop > end:
            raise DecodeError(f"a field runs past the end of its message at byte {head}")
        found.append((tag, head, pos, stop))
        pos = stop
    return found


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and where it ends."""
    value = shift = 0
    while pos < end and shift < 64:
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise DecodeError(f"a truncated or overlong varint at byte {pos}")
