"""A capture's timeline as arrays: one :class:`Line` per thread, read one at a time.

The timeline pass (:mod:`.trace`) works on arrays of start, duration
and name per line. This module makes them from an ``xplane.pb``'s planes
(:mod:`.space`): each line decoded into columns by numpy (:mod:`.wire`, :mod:`.columns`),
or, where its bytes are laid out otherwise, parsed with our schema (:mod:`.xspace`) and
copied out event by event; or from planes shaped like XProf's ``ProfileData`` (tests build
those by hand). Stats are read later, for the events whose kind depends on one.

A stat of an event's *metadata* (``hlo_category``, ``shape_with_layout`` of a TPU's XLA op:
XProf writes them once per op, not per event) is read per distinct name
(:attr:`Line.meta_stat`): the device planes' reader classifies ops by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import columns, wire, xspace
from xprof_magic._analysis.timeline.line_arrays import (
    Floats,
    Ints,
    Line,
    MetaLookup,
    as_number,
    dense,
    stat_readers,
)

__all__ = [
    "Floats",
    "Ints",
    "Line",
    "Plane",
    "SerializedLines",
    "as_number",
    "object_planes",
    "xspace_planes",
]

_EVENT_FIELDS = attrgetter("offset_ps", "duration_ps", "metadata_id")
_STATS = attrgetter("stats")
_FIRST = itemgetter(0)


def _no_meta(metadata_id: int, key: str) -> str | None:
    return None


@dataclass
class SerializedLines:
    """A plane's lines still serialized, with what reading one of them needs.

    Plain data, which a worker process rebuilds from the bytes of its lines: the timeline pass
    hands the biggest lines of a big capture to worker processes this way.
    """

    data: Sequence[wire.Buffer]
    names: dict[int, str]
    stat_ids: dict[str, set[int]]
    _stat_id: _StatIds = field(default_factory=lambda: _StatIds(), repr=False)
    meta: MetaLookup = field(default=_no_meta, repr=False)
    """``meta(metadata_id, key)``: a stat of one event metadata (the plane's; a worker, which
    reads host lines only, has none)."""
    release: Callable[[int, int, int], None] | None = field(default=None, repr=False)
    """``release(index, lo, hi)``: bytes ``lo:hi`` of line ``index`` are read (or the line
    is sent away): the mapped file gives back their pages (:meth:`.space.Mapped.release`)."""

    def name(self, index: int) -> str:
        """Line ``index``'s name, from the fields before its events (none decoded).

        "" where they cannot be read.
        """
        data = self.data[index]
        try:
            first = wire.first_event(data, none=len(data))
            head = xspace.RawXLine()
            head.ParseFromString(bytes(data[:first]))
        except (wire.WireError, DecodeError):
            return ""
        return str(head.name)

    def done(self, index: int) -> None:
        """Line ``index`` is read: its bytes are not needed any more."""
        if self.release is not None:
            self.release(index, 0, len(self.data[index]))

    def line(self, index: int) -> Line:
        """Line ``index`` as arrays.

        Decoded from its bytes (:mod:`.wire`, which gives back each part of a big line once
        it is decoded), or through the protobuf runtime where their layout is not the one
        the decoder knows.
        """
        data = self.data[index]
        release = self.release
        try:
            decoded = wire.decode_line(
                data, None if release is None else lambda lo, hi: release(index, lo, hi)
            )
        except wire.WireError:
            return self._parsed(index)
        self.done(index)  # its pages given back before its arrays are made
        return columns.line_of(
            decoded, self.names, self.stat_ids, self.meta, lambda: self._parsed(index)
        )

    def _parsed(self, index: int) -> Line:
        """Line ``index`` parsed by the protobuf runtime and copied out event by event."""
        line = xspace.parse_line(self.data[index])
        return _proto_line(line, self.names, self.stat_ids, self._stat_id, self.meta)


@dataclass
class Plane:
    """One plane: its name, its stats as text, and its lines, read one at a time."""

    name: str
    stats: list[tuple[str, str]]
    lines: Callable[[], Iterator[Line]]
    serialized: SerializedLines | None = None
    """The lines before reading, when the plane comes from a file (not from objects)."""


def xspace_planes(
    planes: Sequence[tuple[Any, Sequence[wire.Buffer], Sequence[tuple[int, int]]]],
    release: Callable[[tuple[int, int]], None] | None = None,
) -> list[Plane]:
    """Planes as :func:`.space.split_space` gives them, each line read when reached.

    Each is a :data:`xspace.LazyXPlane` without its lines, its lines' bytes and where they
    are in the file; ``release`` is told where a line was once it is read.
    """
    return [_proto_plane(plane, lines, spans, release) for plane, lines, spans in planes]


def object_planes(planes: Sequence[Any]) -> list[Plane]:
    """Planes shaped like ``ProfileData``'s (``name``, ``stats``, ``lines`` of ``events``)."""
    return [_object_plane(plane) for plane in planes]


def _proto_plane(
    plane: Any,
    data: Sequence[wire.Buffer],
    spans: Sequence[tuple[int, int]],
    release: Callable[[tuple[int, int]], None] | None,
) -> Plane:
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    stat_ids: dict[str, set[int]] = {}
    for key, meta in plane.stat_metadata.items():
        stat_ids.setdefault(meta.name, set()).add(key)
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    stats = [(stat_names.get(s.metadata_id, ""), xspace.stat_value(s)) for s in plane.stats]

    def meta_stat(metadata_id: int, key: str) -> str | None:
        wanted = stat_ids.get(key)
        if not wanted or metadata_id not in plane.event_metadata:
            return None
        found = None
        for s in plane.event_metadata[metadata_id].stats:
            if s.metadata_id in wanted:
                found = s
        if found is None:
            return None
        if found.WhichOneof("value") == "ref_value":
            return str(stat_names.get(int(found.ref_value), ""))
        return xspace.stat_value(found)

    serialized = SerializedLines(
        data,
        names,
        stat_ids,
        meta=meta_stat,
        release=None
        if release is None
        else lambda i, lo, hi: release((spans[i][0] + lo, spans[i][0] + hi)),
    )

    def lines() -> Iterator[Line]:
        for i in range(len(data)):
            line = serialized.line(i)
            # Its pages given back before the pass reads it: the few stats read later
            # fault their pages in again from the file.
            serialized.done(i)
            yield line
            del line

    return Plane(plane.name, stats, lines, serialized)


class _StatIds(dict[bytes, int]):
    """A serialized stat's metadata id, parsed once per distinct serialization.

    The stat sought for many events is the same few stats (a ``hlo_op`` refers to its op's
    name), so most lookups find bytes already seen.
    """

    def __missing__(self, data: bytes) -> int:
        found: int = xspace.parse_stat(data).metadata_id
        self[data] = found
        return found


def _proto_line(
    line: Any,
    names: dict[int, str],
    stat_ids: dict[str, set[int]],
    stat_id: _StatIds,
    meta: MetaLookup = _no_meta,
) -> Line:
    events = line.events
    n = len(events)
    fields = np.fromiter(chain.from_iterable(map(_EVENT_FIELDS, events)), np.int64, 3 * n)
    offset_ps, duration_ps, ids = fields.reshape(n, 3).T
    unique, name_id = dense(ids)

    def last(index: int, key: str) -> Any:
        wanted = stat_ids.get(key)
        found = None
        if wanted:
            for data in events[index].stats:
                s = xspace.parse_stat(data)
                if s.metadata_id in wanted:
                    found = s
        return found

    stat, text, as_text = stat_readers(last, stat_ids)

    def values(index: Ints, keys: tuple[str, ...]) -> dict[str, list[str | None]]:
        out: dict[str, list[str | None]] = {key: [None] * len(index) for key in keys}
        wanted = {i: key for key in keys for i in stat_ids.get(key, ())}
        if not wanted:
            return out
        for j, i in enumerate(index.tolist()):
            for data in events[i].stats:
                s = xspace.parse_stat(data)
                key = wanted.get(s.metadata_id)
                if key is not None:
                    out[key][j] = as_text(s)
        return out

    def has(index: Ints, key: str) -> NDArray[np.bool_]:
        wanted = stat_ids.get(key)
        found = np.zeros(len(index), bool)
        if not wanted or not len(index):
            return found
        lists = list(map(_STATS, map(events.__getitem__, index.tolist())))
        counts = np.fromiter(map(len, lists), np.int64, len(lists))
        # The stat sought usually comes first: look at first stats, then the others' rest.
        some = counts > 0
        firsts = map(_FIRST, compress(lists, some.tolist()))
        ids = np.fromiter(map(stat_id.__getitem__, firsts), np.int64, int(some.sum()))
        found[some] = np.isin(ids, list(wanted))
        for i in np.flatnonzero(~found & (counts > 1)).tolist():
            found[i] = any(stat_id[s] in wanted for s in lists[i])
        return found

    return Line(
        name=line.name,
        start=line.timestamp_ns + offset_ps / 1000.0,
        dur=duration_ps / 1000.0,
        name_id=name_id,
        names=[names.get(u, "") for u in unique.tolist()],
        stat=stat,
        has=has,
        text=text,
        meta_stat=lambda key: [meta(u, key) for u in unique.tolist()],
        values=values,
    )


def _object_plane(plane: Any) -> Plane:
    def lines() -> Iterator[Line]:
        for line in plane.lines:
            yield _object_line(line)
            close = getattr(line, "close", None)
            if close is not None:
                close()

    return Plane(plane.name, list(plane.stats), lines)


def _object_line(line: Any) -> Line:
    events: Sequence[Any] = line.events
    seen: dict[str, int] = {}
    name_id = np.fromiter((seen.setdefault(e.name, len(seen)) for e in events), np.int64)

    def stat(i: int, key: str) -> str | None:
        found = None
        for k, value in events[i].stats:
            if k == key:
                found = str(value)
        return found

    def has(index: Ints, key: str) -> NDArray[np.bool_]:
        found = [any(k == key for k, _ in events[i].stats) for i in index.tolist()]
        return np.array(found, bool)

    def meta_stat(key: str) -> list[str | None]:
        found: dict[str, str] = {}
        for e in events:
            if e.name not in found:
                for k, value in e.stats:
                    if k == key:
                        found[e.name] = str(value)
                        break
        return [found.get(name) for name in seen]

    def values(index: Ints, keys: tuple[str, ...]) -> dict[str, list[str | None]]:
        return {key: [stat(i, key) for i in index.tolist()] for key in keys}

    return Line(
        name=line.name,
        start=np.array([e.start_ns for e in events], np.float64),
        dur=np.array([e.duration_ns for e in events], np.float64),
        name_id=name_id,
        names=list(seen),
        stat=stat,
        has=has,
        meta_stat=meta_stat,
        values=values,
    )
