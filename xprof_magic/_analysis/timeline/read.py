"""Read one capture's timeline into plain facts: protobuf for the file, numpy for the sums.

Why the timeline and not XProf's tool converters: on a CPU capture ``hlo_stats`` and
``op_profile`` are empty and ``framework_op_stats`` lists only the outermost label; the
``overview_page`` finds the same step times (a test checks it) but drops the first and last
step; and every converter call is a full pass of its own that writes cache files into the
run. Labels, steps, compile events, XLA ops and thread activity are all timeline events.

Why not XProf's ``ProfileData`` API, which the first reader used: it costs about 10 µs an
event (43 s and 3 GB for a 100 MB capture). Here the file is mapped and split into planes
and lines (:mod:`.space`; each plane's metadata parsed by the protobuf runtime with a schema
of our own, :mod:`.xspace`); each line (thread), one at a time, is decoded into arrays of
start, duration and name (:mod:`.wire`, :mod:`.lines`), and nesting, self time and
per-name totals are array operations. The numbers are those of the former
event-by-event pass, which the tests keep as an oracle.

The pass by job: this module is the entry (the file, the profile window, plane by plane);
:mod:`.reader` reads one line; :mod:`.parallel` hands a big plane's lines to worker
processes; :mod:`.facts` is what comes out. Event times are nanoseconds from the
``Task Environment`` plane's ``profile_start_time``.

The backend's own event names come from the caller (its vocabulary's
:class:`~xprof_magic._backends.TimelineNames`); without them the reader names none.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from xprof_magic._analysis.timeline import forks, pool, space
from xprof_magic._analysis.timeline.device_planes import read_device_plane
from xprof_magic._analysis.timeline.events import Runtime
from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._analysis.timeline.parallel import host_lines_in_parallel
from xprof_magic._analysis.timeline.programs import METADATA_PLANE, read_programs
from xprof_magic._analysis.timeline.reader import Reader
from xprof_magic._analysis.timeline.thread_lines import Plane, object_planes, xspace_planes
from xprof_magic._backends import NEUTRAL, TimelineNames

__all__ = ["read_planes", "read_trace"]


def read_trace(
    path: Path,
    *,
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
    runtime: TimelineNames | None = None,
) -> TraceFacts:
    """Read ``<host>.xplane.pb``; raise ``ValueError`` if it is not one, ReadAborted late.

    ``label_names`` are the magic's marker names (from the metadata): such events are labels
    even where their text looks like a runtime name. ``cell_ns`` (wall-clock ns) narrows
    the window that busy time is measured against to the cell. ``runtime``: the run's
    backend's timeline names (``get_vocabulary(meta.backend).timeline``): its own host
    events (``runtime_names``, ``runtime_prefixes``), runtime rather than the user's traces,
    and its ``compile_events``. ``None`` names none (:data:`~xprof_magic._backends.NEUTRAL`).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error}") from error
    mapped, planes = _parse(path)
    big = size >= TRIM_FILES_FROM
    with _workers(size, deadline) as workers:
        facts = _read(
            xspace_planes(planes, mapped.release),
            host=path.name[: -len(".xplane.pb")],
            label_names=label_names,
            cell_ns=cell_ns,
            deadline=deadline,
            runtime=runtime,
            workers=workers,
            give_back=heap_trimmer() if big else None,
        )
    for found in planes:
        if found.plane.name == METADATA_PLANE:
            facts.programs = read_programs(found.plane, facts.compile_count)
    return facts


def _workers(size: int, deadline: float | None) -> pool.Pool | forks.Forks:
    """Who helps read a timeline of ``size`` bytes besides this process.

    Only where nothing waits on a deadline (the kernel's own quick pass has one), as many
    as :func:`.pool.worker_count` says: forked children where this process may fork
    (:func:`.forks.safe`), else fresh interpreters.
    """
    count = pool.worker_count(size) if deadline is None else 0
    if count and forks.safe():
        return forks.Forks(count)
    return pool.Pool(count)


def _parse(path: Path) -> tuple[space.Mapped, list[space.SplitPlane]]:
    """The file, mapped, and its planes (:func:`.space.split_space`).

    Each line's bytes stay in the file until that line is read, and are given back then.
    """
    try:
        mapped = space.Mapped(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path}: {error}") from error
    try:
        return mapped, space.split_space(mapped.data)
    except DecodeError as error:
        raise ValueError(
            f"{path.name} is not a profiler timeline (an XSpace protobuf): {error}; "
            "capture again, or check that the file was copied whole"
        ) from None


def read_planes(
    planes: Sequence[Any],
    *,
    host: str = "",
    label_names: frozenset[str] = frozenset(),
    cell_ns: tuple[int, int] | None = None,
    deadline: float | None = None,
    runtime: TimelineNames | None = None,
) -> TraceFacts:
    """The same pass over ``ProfileData``-shaped planes (``name``, ``stats``, ``lines``).

    Each line has ``name`` and ``events``; each event ``name``, ``start_ns``,
    ``duration_ns`` and ``stats`` as ``(key, value)`` text pairs. For tests that build a
    timeline by hand, and for XProf's own ``ProfileData``. The arguments are
    :func:`read_trace`'s.
    """
    return _read(
        object_planes(planes),
        host=host,
        label_names=label_names,
        cell_ns=cell_ns,
        deadline=deadline,
        runtime=runtime,
    )


TRIM_FILES_FROM = 16 * 2**20
"""The file size from which the heap is trimmed between big lines (:func:`heap_trimmer`):
a size the notebook reads in a process of its own.

numpy's huge pages (2 MB, for each array of 4 MB or more) were once switched off while such
a file was read: the kernel's merges of pages into huge ones kept parts of freed arrays
resident (the 100 MB capture peaked at 194 to 211 MB from run to run). With the heap trimmed
they no longer do (185 MB in every run), and a huge page saves 511 faults: 53k for that
capture against 88k, 0.05 s of CPU."""


TRIM_FROM = 1 << 18
"""The events read since the heap was last trimmed from which it is trimmed again before a
big line (:data:`TRIM_BEFORE`): the free pages their arrays left go back to the system."""
TRIM_BEFORE = 16 << 20
"""The bytes of a line before which the heap is trimmed (not after the last big line: the
pages would come back for nothing, each at the cost of a fault when used again)."""


def heap_trimmer() -> Callable[[], object] | None:
    """glibc's ``malloc_trim``: the free memory of the heap given back (None: no glibc).

    The pass frees a big line's arrays when the line is done, but glibc gives back only the
    heap's top: one object kept past the line above its arrays held all of them resident,
    and the next big line's arrays, and the pages of its bytes the framing walk reads, came
    on top (the 100 MB capture's peak was 195 to 208 MB from one environment to the next,
    with the same arrays alive). A trim costs some milliseconds.
    """
    try:
        trim: Callable[[int], object] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    return lambda: trim(0)


def _read(
    planes: list[Plane],
    *,
    host: str,
    label_names: frozenset[str],
    cell_ns: tuple[int, int] | None,
    deadline: float | None,
    runtime: TimelineNames | None,
    workers: pool.Pool | forks.Forks | None = None,
    give_back: Callable[[], object] | None = None,
) -> TraceFacts:
    facts = TraceFacts(host=host)
    words = NEUTRAL.timeline if runtime is None else runtime
    reader = Reader(
        facts,
        label_names,
        deadline,
        Runtime(
            words.runtime_names,
            tuple(words.runtime_prefixes),
            words.waits,
            words.step_ends,
            tuple(words.launches),
            words.compile_phases,
        ),
        frozenset(words.compile_events),
    )
    facts.planes = [plane.name for plane in planes]
    for plane in planes:
        if plane.name == "Task Environment":
            stats = dict(plane.stats)
            start, stop = stats.get("profile_start_time"), stats.get("profile_stop_time")
            if start and stop and start.isdigit() and stop.isdigit():
                facts.profile_start_ns = int(start)
                facts.window = (0.0, float(int(stop) - int(start)))
    if facts.window is not None and cell_ns is not None and facts.profile_start_ns:
        lo = max(facts.window[0], cell_ns[0] - facts.profile_start_ns)
        hi = min(facts.window[1], cell_ns[1] - facts.profile_start_ns)
        if hi > lo:
            facts.window = (float(lo), float(hi))
    for plane in planes:
        if plane.name.startswith("/host:") and plane.name != "/host:metadata":
            if workers is not None and workers.workers and plane.serialized is not None:
                host_lines_in_parallel(reader, plane.serialized, workers)
                continue
            big = _big_lines(plane) if give_back is not None else set()
            read_since = 0  # events read since the heap was last trimmed
            index = 0  # (not enumerate's: its tuple would keep each line until the next)
            for line in plane.lines():
                read_since += len(line.start)
                reader.host_line(line)
                del line  # before the next line is parsed: one line in memory at a time
                index += 1  # noqa: SIM113 (see above)
                if give_back is not None and read_since >= TRIM_FROM and index in big:
                    give_back()
                    read_since = 0
        elif plane.name.startswith("/device:"):
            read_device_plane(reader, plane)
        reader.check()
    reader.finish()
    return facts


def _big_lines(plane: Plane) -> set[int]:
    """The lines of ``plane`` the heap may be trimmed before (:data:`TRIM_BEFORE`)."""
    if plane.serialized is None:
        return set()
    return {i for i, data in enumerate(plane.serialized.data) if len(data) >= TRIM_BEFORE}
