"""A line decoded into columns (:mod:`.wire`) as the :class:`~.line.Line` the pass reads.

Its stats are decoded for the events asked about only (:class:`~.wire.StatRegions`):
which of them have a stat of a name, by their metadata ids; a stat's value is parsed by the
protobuf runtime (:func:`.xspace.parse_stat`), with the semantics of the runtime path in
:mod:`.thread_lines` (the last stat of a name wins; a reference is the name it refers to).
"""

from __future__ import annotations

from collections.abc import Callable
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
from xprof_magic._analysis.timeline.wire import EventColumns, StatRegions, Stats, WireError

__all__ = ["line_of"]


def line_of(
    columns: EventColumns,
    names: dict[int, str],
    stat_ids: dict[str, set[int]],
    meta: MetaLookup,
    runtime: Callable[[], Line] | None = None,
) -> Line:
    """The :class:`~.line.Line` of decoded columns.

    ``names``, ``stat_ids``: the plane's event names and stat ids by name; ``meta``: its event
    metadata's stats. A stat is decoded (:class:`~.wire.StatRegions`), and its value parsed
    by the runtime, only when asked for. ``runtime``: the line read through the protobuf
    runtime, for a stat the decoder does not read (an id over 31 bits): the line's stats are
    then answered from it (its events are the same, in the same order).
    """
    unique, name_id = dense(columns.metadata_id)
    kept: list[StatRegions] = [columns.stats]  # what the closures below keep of the columns
    name = columns.name  # (not the columns: their other arrays go once the line is made)
    parsed: list[Line] = []  # the runtime's line, once a stat the decoder refuses is asked for

    def held() -> StatRegions:
        if not kept:
            raise RuntimeError(f"the stats of line {name!r} were let go")
        return kept[0]

    def release() -> None:
        kept.clear()
        parsed.clear()

    def decoded(index: Ints) -> Stats | None:
        """The stats of those events; None where the runtime's line answers instead."""
        if parsed:
            return None
        regions = held()
        try:
            return regions.decoded(index)
        except WireError:
            if runtime is None:
                raise
            parsed.append(runtime())
            return None

    def has(index: Ints, key: str) -> NDArray[np.bool_]:
        regions = held()
        wanted = stat_ids.get(key)
        if not parsed:
            try:
                return regions.named(index, list(wanted or ()))
            except WireError:
                if runtime is None:
                    raise
                parsed.append(runtime())
        return parsed[0].has(index, key)

    def last(index: int, key: str) -> Any:
        wanted = stat_ids.get(key)
        if not wanted:
            return None
        if not parsed:
            regions = held()
            try:
                stats = regions.of(index)
            except WireError:
                if runtime is None:
                    raise
                parsed.append(runtime())
            else:
                for stat_id, serialized in reversed(stats):
                    if stat_id in wanted:
                        return xspace.parse_stat(serialized)
                return None
        raise _Refused

    stat_of, text_of, as_text = stat_readers(last, stat_ids)

    def stat(index: int, key: str) -> str | None:
        if not parsed:
            try:
                return stat_of(index, key)
            except _Refused:
                pass
        return parsed[0].stat(index, key)

    def text(index: int, key: str) -> str | None:
        if not parsed:
            try:
                return text_of(index, key)
            except _Refused:
                pass
        return (parsed[0].text or parsed[0].stat)(index, key)

    def values(index: Ints, keys: tuple[str, ...]) -> dict[str, list[str | None]]:
        out: dict[str, list[str | None]] = {key: [None] * len(index) for key in keys}
        wanted = {i: key for key in keys for i in stat_ids.get(key, ())}
        if not wanted:
            return out
        stats = decoded(index)
        if stats is None:
            return parsed[0].values(index, keys)
        ids = stats.id
        for k in range(len(index)):
            for j in stats.of(k):
                key = wanted.get(int(ids[j]))
                if key is not None:
                    out[key][k] = as_text(xspace.parse_stat(stats.serialized(j)))
        return out

    def integers(index: Ints, key: str) -> list[int | None]:
        out: list[int | None] = [None] * len(index)
        wanted = stat_ids.get(key)
        if not wanted or not len(index):
            return out
        stats = decoded(index)
        if stats is None:
            return parsed[0].ints(index, key)
        ids = stats.id
        # Every stat of those events (theirs alone, in order), then the last of each
        # event's named so.
        counts = np.diff(stats.ptr)
        owner = np.repeat(np.arange(len(index)), counts)
        every = np.arange(int(stats.ptr[-1]))
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
        has=has,
        text=text,
        meta_stat=lambda key: [meta(u, key) for u in unique.tolist()],
        values=values,
        integers=integers,
        release=release,
    )


class _Refused(Exception):
    """A stat the decoder does not read: the runtime's line answers (see :func:`line_of`)."""
