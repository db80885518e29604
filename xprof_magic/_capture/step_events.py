"""Steps recorded in Python, written into the saved timeline as the profiler's own markers.

A loop of tiny steps counts its steps, or records each one's start, in Python, not as a
profiler event (:meth:`~xprof_magic._cell.step_tracker.StepTracker.go_fast`): a marker costs
more than such a step. A counted loop's step times are estimates, spread between the line
sampler's looks: each end is moved out of the line's events it would cut, since events on a
line nest. Once the trace has stopped, this module adds one ``step`` event per recorded step to the
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

from xprof_magic._cell.fast_steps import interpolate
from xprof_magic._protoschema import BYTES, INT64, MESSAGE, STRING, UINT64, Field, message_classes

__all__ = ["write_steps"]

_STEP = "step"
_ROOT, _NUMBER = "_r", "step_num"

# message: [(field, number, type, repeated, message type)], as in xplane.proto.
_MESSAGES: dict[str, list[Field]] = {
    "Stat": [
        ("metadata_id", 1, INT64, False, None),
        ("uint64_value", 3, UINT64, False, None),
        ("int64_value", 4, INT64, False, None),
        ("str_value", 5, STRING, False, None),
    ],
    "Metadata": [("id", 1, INT64, False, None), ("name", 2, STRING, False, None)],
    "Event": [
        ("metadata_id", 1, INT64, False, None),
        ("offset_ps", 2, INT64, False, None),
        ("duration_ps", 3, INT64, False, None),
        ("stats", 4, MESSAGE, True, "Stat"),
    ],
    "Offsets": [("events", 4, MESSAGE, True, "Offset")],
    "Offset": [
        ("metadata_id", 1, INT64, False, None),
        ("offset_ps", 2, INT64, False, None),
        ("duration_ps", 3, INT64, False, None),
    ],
    "Line": [
        ("id", 1, INT64, False, None),
        ("name", 2, STRING, False, None),
        ("timestamp_ns", 3, INT64, False, None),
        ("events", 4, BYTES, True, None),
        ("duration_ps", 9, INT64, False, None),
        ("display_id", 10, INT64, False, None),
        ("display_name", 11, STRING, False, None),
    ],
    "Plane": [
        ("name", 2, STRING, False, None),
        ("lines", 3, BYTES, True, None),
        ("event_metadata", 4, MESSAGE, True, "Plane.EventMetadataEntry"),
        ("stat_metadata", 5, MESSAGE, True, "Plane.StatMetadataEntry"),
        ("stats", 6, MESSAGE, True, "Stat"),
    ],
    "Space": [("planes", 1, MESSAGE, True, "Plane")],
}
_ENTRIES = {"EventMetadataEntry": "Metadata", "StatMetadataEntry": "Metadata"}

_CLASSES = message_classes(
    "xprof_magic.step_events",
    "xprof_magic/step_events.proto",
    _MESSAGES,
    oneof="Stat",
    maps={"Plane": _ENTRIES},
)


Spread = tuple[int, int, Sequence[tuple[float, int]]]
"""Steps whose times are estimates: the first's number, the end's, and where they are known to
have been (:meth:`~xprof_magic._cell.step_tracker.StepTracker.spread`)."""


def write_steps(
    folder: Path,
    steps: Sequence[tuple[int, int, int]],
    spread: Sequence[Spread] = (),
) -> int:
    """Add ``steps`` to the host timeline under ``folder``; return how many were written.

    Each step is (number, start, end) in wall-clock ns. They go on the line of the cell's thread:
    the one holding the most ``step`` markers already (a loop's first steps are marked while they
    run, before their length is known). 0 are written where no line holds a marker.

    ``spread``: ranges of step numbers (first, end exclusive) whose times are estimates, spread
    between the points where they are known to have been (the sampler's looks): each of their
    ends is moved out of the line's events that it cuts (:func:`_between_events`), for events
    on a line must nest, so that a step holds its body's events whole.
    """
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
            serialized = plane.lines[best]
            if spread:
                held = _CLASSES["Offsets"]()
                held.ParseFromString(serialized)
                base_ns = start_ns + int(line.timestamp_ns)
                events = [
                    (base_ns + e.offset_ps // 1000, base_ns + (e.offset_ps + e.duration_ps) // 1000)
                    for e in held.events
                ]
                steps = _between_events(steps, spread, events)
            plane.lines[best] = _with_steps(plane, line, serialized, start_ns, steps)
            path.write_bytes(space.SerializeToString())
            return len(steps)
    return 0


def _between_events(
    steps: Sequence[tuple[int, int, int]],
    spread: Sequence[Spread],
    events: list[tuple[int, int]],
) -> list[tuple[int, int, int]]:
    """``steps`` with each end inside a spread range moved between the line's events.

    ``events``: the line's (start, end), wall-clock ns. Within a range's span, the events it
    does not lie wholly inside are its steps' bodies; the gaps between them (merged where they
    overlap) are where a step can end. So that each step holds whole events, each end goes into
    a gap (:func:`_gaps_for`), in order.
    """
    out = list(steps)
    index = {number: k for k, (number, _, _) in enumerate(out)}
    for first, end, known in spread:
        ks = [index[n] for n in range(first, end) if n in index]
        if len(ks) < 2:
            continue
        lo, hi = out[ks[0]][1], out[ks[-1]][2]
        body = sorted(
            (a, b) for a, b in events if a < hi and b > lo and b > a and not (a <= lo and b >= hi)
        )
        edges = [lo]  # gap k: edges[2k] to edges[2k + 1]
        for a, b in body:
            if a < edges[-1]:
                edges[-1] = max(edges[-1], b)
            else:
                edges += [a, b]
        edges.append(max(hi, edges[-1]))
        gaps = [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
        ends = [out[k][2] for k in ks[:-1]]
        previous = lo
        for k, at in zip(ks[:-1], _gaps_for(gaps, ends, known), strict=True):
            at = min(max(at, previous), hi)
            previous = at
            number, start, _ = out[k]
            out[k] = (number, start, at)
            following = out[k + 1]
            out[k + 1] = (following[0], at, max(following[2], at))
    return out


def _gaps_for(
    gaps: list[tuple[int, int]], ends: list[int], known: Sequence[tuple[float, int]]
) -> list[int]:
    """Where each step's estimated end goes: into a gap between the events, in order.

    ``known``: where the steps are known to have been (steps started, wall-clock ns: the loop's
    start and end, the sampler's looks). With more gaps than steps (an event or more in every
    step: a jitted call), the steps are spread evenly over the gaps between those points, not
    over the time, each end in a gap of its own: the events, which a long call holds as one,
    place the steps where the time cannot (a look inside a long call would spread the steps
    before it over that call's time as well). With fewer (steps that leave no event), each end
    stays where it was, in the gap nearest to it, after the end before it.
    """
    starts = [a for a, _ in gaps]
    count = len(ends) + 1
    if len(gaps) >= count + 1:
        places = [(0.0, 0.0)]
        for place, t in known:
            if 0 < place < count:
                j = max(bisect.bisect_right(starts, t) - 1, 0)
                places.append((place, j if t <= gaps[j][1] else j + 0.5))
        places.append((float(count), float(len(gaps) - 1)))
        out: list[int] = []
        last = 0
        for i, (at, where) in enumerate(zip(ends, interpolate(places, count)[1:], strict=True)):
            j = min(max(round(where), last + 1), len(gaps) - 1 - (count - 1 - i))
            out.append(min(max(at, gaps[j][0]), gaps[j][1]))
            last = j
        return out
    out, last, previous = [], 0, gaps[0][0]
    for at in ends:
        j = max(bisect.bisect_right(starts, at) - 1, 0)
        if at > gaps[j][1] and j + 1 < len(gaps) and at - gaps[j][1] > starts[j + 1] - at:
            j += 1
        j = max(j, last)
        at = min(max(at, gaps[j][0]), gaps[j][1])
        while at <= previous and j + 1 < len(gaps):
            j += 1
            at = gaps[j][0]
        out.append(at)
        last, previous = j, at
    return out


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
