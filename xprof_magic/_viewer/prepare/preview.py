"""A first look at a large run while its whole timeline converts: the capture's first events.

XProf converts a whole capture before its trace viewer draws anything: about 20 s for a
100 MB capture on a 2-core machine, however little of it the first view shows. For a run
over :data:`FROM_MB_ENV` (default :data:`FROM_MB`), the conversion's child
(:mod:`xprof_magic._viewer.prepare.convert`) first cuts each host's XSpace at the time before which
:data:`EVENTS_ENV` of its events start (:func:`cut`), has XProf
convert that small XSpace in ``<scratch>/preview``, and writes the preview's
``cache_version.txt`` and :data:`SPAN_FILE` last; then it converts the whole capture, as
before. The viewer's :class:`~xprof_magic._viewer.prepare.queue.Preparer` moves the finished
preview out of the scratch folder (:meth:`Previews.take`) and the page said while the run is
prepared shows it, with "the first 2.1 s of 14.0 s" above it, until the whole timeline is
ready (:mod:`xprof_magic._viewer.prepare.waiting_page`).

The cut keeps every event that starts before the cut time and everything else the file
holds (planes, lines, metadata, stats): the preview is the capture's real events, read and
written through the protobuf runtime with XSpace's public schema
(:mod:`xprof_magic._analysis.timeline.xspace`, imported in the child only), whose
undeclared fields the runtime keeps as they were.

Standard library only at import: the viewer's process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "EVENTS",
    "EVENTS_ENV",
    "FOLDER",
    "FROM_MB",
    "FROM_MB_ENV",
    "KEEP_ENV",
    "KEPT",
    "SPAN_FILE",
    "Previews",
    "cut",
    "wanted",
]

FOLDER = "preview"
"""In a conversion's scratch folder: the preview, once its :data:`SPAN_FILE` is there."""
SPAN_FILE = "preview.json"
"""What the preview shows: ``shown_s`` of ``total_s`` seconds, ``events`` of ``of``."""
FROM_MB_ENV = "XPROF_MAGIC_PREPARE_PREVIEW_FROM_MB"
FROM_MB = 40.0
"""A run's captures over this many MB get a preview first: a 30 MB capture converts whole in
about 5 s, about the time a user reads its summary."""
EVENTS_ENV = "XPROF_MAGIC_PREPARE_PREVIEW_EVENTS"
EVENTS = 50_000
"""The events a preview keeps. XProf's trace viewer sends every event of a capture under
500,000 whatever the resolution asked, so the preview's first reply grows with them: 194,000
events made a 34 MB reply (2.7 s to serve, longer to draw) where the whole 100 MB capture's,
thinned, is 9 MB; 50,000 make about as much as the whole's, and convert in under a second."""
KEEP_ENV = "XPROF_MAGIC_PREPARE_PREVIEW_KEEP"
"""In the child's environment: the events its preview keeps (:func:`wanted`; 0: none)."""
KEPT = 3
"""A viewer keeps the previews of this many runs, the newest: each is a few MB on disk."""


def _number(name: str, default: float) -> float:
    with contextlib.suppress(KeyError, ValueError):
        return float(os.environ[name])
    return default


def wanted(xplane_bytes: int) -> int:
    """The events a run's preview keeps (0: no preview), by the run's size."""
    if xplane_bytes <= _number(FROM_MB_ENV, FROM_MB) * 1e6:
        return 0
    return max(1, int(_number(EVENTS_ENV, EVENTS)))


def cut(source: Path, target: Path, keep: int) -> dict[str, float]:
    """Write XSpace ``source`` to ``target`` with its first ``keep`` events; return what it shows.

    Left out are the events that start at or after the time before which ``keep`` of its events
    start (at least one).

    The profiler sorts each line's events by start before it writes the file, so the cut
    time and each line's cut are binary searches that parse a few events; a line found out
    of order (checked at 64 points) is sorted first. The rest is never parsed.
    """
    from xprof_magic._analysis.timeline import xspace

    space = xspace.LazyXSpace()
    space.ParseFromString(source.read_bytes())
    event = xspace.LazyXEvent()
    lines: list[_Line] = []
    for plane in space.planes:
        for index, data in enumerate(plane.lines):
            raw = xspace.RawXLine()
            raw.ParseFromString(data)
            if raw.events:
                lines.append(_Line(plane, index, raw, raw.timestamp_ns * 1000, event))
    if not lines:
        shutil.copyfile(source, target)
        return {"shown_s": 0.0, "total_s": 0.0, "events": 0, "of": 0}
    first = min(line.start(0) for line in lines)
    end = max(line.last_end for line in lines)
    total = sum(len(line) for line in lines)
    least = max(1, min(total, keep))
    low, high = first, end + 1  # the least time before which ``least`` events start
    while low < high:
        middle = (low + high) // 2
        if sum(line.before(middle) for line in lines) >= least:
            high = middle
        else:
            low = middle + 1
    until = low
    kept = 0
    for line in lines:
        count = line.before(until)
        kept += count
        if count < len(line):
            del line.raw.events[count:]
            line.plane.lines[line.index] = line.raw.SerializeToString()
    target.write_bytes(space.SerializeToString())
    return {
        "shown_s": round((min(until, end) - first) / 1e12, 6),
        "total_s": round((end - first) / 1e12, 6),
        "events": kept,
        "of": total,
    }


class _Line:
    """One line of a :func:`cut`, its events serialized, sorted by start once looked at."""

    def __init__(self, plane: Any, index: int, raw: Any, base: int, event: Any) -> None:
        self.plane, self.index, self.raw, self.base, self._event = plane, index, raw, base, event
        step = max(1, len(raw.events) // 64)
        probes = [*range(0, len(raw.events), step), len(raw.events) - 1]
        if any(a > b for a, b in itertools.pairwise(self.start(i) for i in probes)):
            pairs = sorted((self.start(i), data) for i, data in enumerate(raw.events))
            del raw.events[:]
            raw.events.extend(data for _, data in pairs)
        self.last_end = max(self.end(i) for i in probes)
        """The latest end among the probed events (the last one included): about the line's
        end, without parsing every event for it."""

    def __len__(self) -> int:
        return len(self.raw.events)

    def _read(self, i: int) -> Any:
        self._event.ParseFromString(self.raw.events[i])
        return self._event

    def start(self, i: int) -> int:
        return int(self.base + self._read(i).offset_ps)

    def end(self, i: int) -> int:
        read = self._read(i)
        return int(self.base + read.offset_ps + read.duration_ps)

    def before(self, time_ps: int) -> int:
        """How many of its events start before ``time_ps``."""
        low, high = 0, len(self.raw.events)
        while low < high:
            middle = (low + high) // 2
            if self.start(middle) < time_ps:
                low = middle + 1
            else:
                high = middle
        return low


class Previews:
    """The previews of one viewer's runs, by run name.

    Each is in a folder of ``scratch`` named ``<pid>-preview-<hex>`` (removed with the viewer's
    other scratch once it is gone); the newest :data:`KEPT` are kept. Not thread-safe: the
    preparer holds its lock.
    """

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._shown: dict[str, tuple[Path, dict[str, Any]]] = {}

    def take(self, name: str, child_scratch: Path) -> bool:
        """Adopt run ``name``'s preview, moved out of its conversion's scratch once finished.

        Finished: its :data:`SPAN_FILE` is written. Returns whether it was adopted now.
        """
        if name in self._shown:
            return False
        folder = child_scratch / FOLDER
        try:
            span = json.loads((folder / SPAN_FILE).read_text())  # written last
            target = self.scratch / f"{os.getpid()}-preview-{uuid.uuid4().hex[:12]}"
            os.replace(folder, target)
        except (OSError, ValueError):
            return False
        self._shown[name] = (target, span if isinstance(span, dict) else {})
        while len(self._shown) > KEPT:
            shutil.rmtree(self._shown.pop(next(iter(self._shown)))[0], ignore_errors=True)
        return True

    def folder(self, name: str) -> Path | None:
        """Run ``name``'s preview folder, if it has one."""
        return self._shown[name][0] if name in self._shown else None

    def span(self, name: str) -> dict[str, Any] | None:
        """What run ``name``'s preview shows (:data:`SPAN_FILE`), if it has one."""
        return self._shown[name][1] if name in self._shown else None

    def clear(self) -> None:
        for folder, _span in self._shown.values():
            shutil.rmtree(folder, ignore_errors=True)
        self._shown.clear()
