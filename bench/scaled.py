"""A capture larger than this machine can record: a real one's threads, several times over.

torch_xla's profiler holds about 1.1 MB of memory per step of the bench's MLP until the trace
stops (``bench.captures``), so a real 300 MB capture (25,000 steps) would need some 27 GB and
a 1 GB one about 90 GB; these machines have 24 GB, shared. :func:`repeat_capture` writes a
capture whose host plane holds every thread of a real capture ``times`` times, each copy
after the one before (its lines' timestamps moved on by the capture's length, the profile's
stop time with them): the same events, stats and metadata per megabyte as the training
capture it comes from, read by the same code paths.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["repeat_capture"]

_STOP = "profile_stop_time"
_START = "profile_start_time"


def repeat_capture(source: Path, target: Path, times: int) -> Path:
    """``source``'s run folder, its timeline's host threads ``times`` times, into ``target``."""
    from xprof_magic._analysis.timeline import xspace

    (xplane,) = source.glob("*.xplane.pb")
    space = xspace.LazyXSpace.FromString(xplane.read_bytes())
    length = _profile_length(space)
    for plane in space.planes:
        if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
            continue
        copies = []
        for k in range(times):
            for serialized in plane.lines:
                line = xspace.RawXLine.FromString(serialized)
                line.timestamp_ns += k * length
                copies.append(line.SerializeToString())
        del plane.lines[:]
        plane.lines.extend(copies)
    _move_stop(space, (times - 1) * length)
    target.mkdir(parents=True, exist_ok=True)
    (target / xplane.name).write_bytes(space.SerializeToString())
    meta = json.loads((source / "xprof_magic.json").read_text(encoding="utf-8"))
    meta["end_ns"] = int(meta["end_ns"]) + (times - 1) * length
    (target / "xprof_magic.json").write_text(json.dumps(meta), encoding="utf-8")
    for extra in source.glob("*.trace.json.gz"):
        shutil.copy(extra, target / extra.name)
    return target


def _environment(space: object) -> tuple[object, dict[int, str]]:
    for plane in space.planes:  # type: ignore[attr-defined]
        if plane.name == "Task Environment":
            return plane, {key: meta.name for key, meta in plane.stat_metadata.items()}
    raise ValueError("the capture has no Task Environment plane")


def _profile_length(space: object) -> int:
    plane, names = _environment(space)
    found = {names.get(s.metadata_id): s for s in plane.stats}  # type: ignore[attr-defined]
    start, stop = found[_START], found[_STOP]
    return int(getattr(stop, stop.WhichOneof("value"))) - int(
        getattr(start, start.WhichOneof("value"))
    )


def _move_stop(space: object, by: int) -> None:
    plane, names = _environment(space)
    for stat in plane.stats:  # type: ignore[attr-defined]
        if names.get(stat.metadata_id) == _STOP:
            kind = stat.WhichOneof("value")
            setattr(stat, kind, int(getattr(stat, kind)) + by)
