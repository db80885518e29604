"""A line decoded into columns (:mod:`.wire`) as the :class:`~.line.Line` the pass reads.

Its stats are answered from the columns: which events have a stat of a name, by their
metadata ids, for all events at once; a stat's value is parsed by the protobuf runtime
(:func:`.xspace.parse_stat`), only for the events asked about, with the semantics of the
runtime path in :mod:`.lines` (the last stat of a name wins; a reference is the name it
refers to).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import xspace
from xprof_magic._analysis.timeline.line_arrays import (
    Ints,
    Line,
    MetaLookup,
    as_int,
    dense,
    stat_readers,
)
from xprof_magic._analysis.timeline.wire import EventColumns, Stats

__all__ = ["line_of"]

_CHUNK = 1 << 18
"""Events whose stats are looked at together."""


def line_of(
    columns: EventColumns,
    names: dict[int, str],
    stat_ids: dict[str, set[int]],
    meta: MetaLookup,
) -> Line:
    """The :class:`~.line.Line` of decoded columns.

    ``names``, ``stat_ids``: the plane's event names and stat ids by name; ``meta``: its event
    metadata's stats. A stat's value is parsed by the runtime, only when asked for.
    """
    unique, name_id = dense(columns.metadata_id)
    kept: list[Stats] = [columns.stats]  # what the closures below keep of the columns
    name = columns.name  # (not the columns: their other arrays go once the line is made)
    marks: dict[str, NDArray[np.bool_]] = {}

    def held() -> Stats:
        if not kept:
            raise RuntimeError(f"the stats of line {name!r} were let go")
        return kept[0]

    def release() -> None:
        kept.clear()
        marks.clear()

    def marked(key: str) -> NDArray[np.bool_]:
        if key not in marks:
            stats = held()
            ids = stats.id
            found = np.zeros(len(name_id), bool)
            wanted = stat_ids.get(key)
            if wanted and len(ids):
                hit = np.isin(ids, list(wanted))
                if np.count_nonzero(hit) * 8 < len(found):  # few (step numbers): whose
                    found[np.searchsorted(stats.ptr, np.flatnonzero(hit), side="right") - 1] = True
                else:  # whether any of each event's stats is named so: one reduction each
                    # (a False after the last stat: an event without stats reads it, and is
                    # told apart by its count), a chunk of events at a time (the reduction's
                    # positions are made in int64: a big line's at once took 10 MB)
                    ptr = stats.ptr
                    for lo in range(0, len(found), _CHUNK):
                        hi = min(len(found), lo + _CHUNK)
                        first, stop = int(ptr[lo]), int(ptr[hi])
                        padded = np.concatenate((hit[first:stop], [False]))
                        found[lo:hi] = np.logical_or.reduceat(padded, ptr[lo:hi] - first)
                    found &= ptr[1:] > ptr[:-1]
            marks[key] = found
        return marks[key]

    def last(index: int, key: str) -> Any:
        wanted = stat_ids.get(key)
        if wanted:
            stats = held()
            ids = stats.id
            for j in reversed(stats.of(index)):
                if int(ids[j]) in wanted:
                    return xspace.parse_stat(stats.serialized(j))
        return None

    stat, text, as_text = stat_readers(last, stat_ids)

    def values(index: Ints, keys: tuple[str, ...]) -> dict[str, list[str | None]]:
        out: dict[str, list[str | None]] = {key: [None] * len(index) for key in keys}
        wanted = {i: key for key in keys for i in stat_ids.get(key, ())}
        if not wanted:
            return out
        stats = held()
        ids = stats.id
        for k, event in enumerate(index.tolist()):
            for j in stats.of(event):
                key = wanted.get(int(ids[j]))
                if key is not None:
                    out[key][k] = as_text(xspace.parse_stat(stats.serialized(j)))
        return out

    def integers(index: Ints, key: str) -> list[int | None]:
        out: list[int | None] = [None] * len(index)
        wanted = stat_ids.get(key)
        if not wanted or not len(index):
            return out
        stats = held()
        ids = stats.id
        # Every stat of those events, then the last of each event's named so.
        lo = stats.ptr[index]
        counts = stats.ptr[index + 1] - lo
        first = np.cumsum(counts) - counts
        owner = np.repeat(np.arange(len(index)), counts)
        every = np.arange(int(counts.sum())) - np.repeat(first - lo, counts)
        named = np.isin(ids[every], list(wanted))
        last = np.full(len(index), -1, np.int64)
        np.maximum.at(last, owner[named], every[named])
        found = np.flatnonzero(last >= 0)
        value, plain, tag = stats.integers(last[found])
        signed = value.view(np.int64)
        for k, j, number, sign, ok, kind in zip(
            found.tolist(),
            last[found].tolist(),
            value.tolist(),
            signed.tolist(),
            plain.tolist(),
            tag.tolist(),
            strict=True,
        ):
            if ok:
                out[k] = sign if kind == 0x20 else number
            else:
                out[k] = as_int(xspace.stat_value(xspace.parse_stat(stats.serialized(j))))
        return out

    return Line(
        name=columns.name,
        start=columns.timestamp_ns + columns.offset_ps / 1000.0,
        dur=columns.duration_ps / 1000.0,
        name_id=name_id,
        names=[names.get(u, "") for u in unique.tolist()],
        stat=stat,
        has=lambda index, key: marked(key)[index],
        text=text,
        meta_stat=lambda key: [meta(u, key) for u in unique.tolist()],
        values=values,
        integers=integers,
        release=release,
    )
