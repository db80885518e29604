"""The one schema of ``xprof_magic.json``, the metadata stored beside every capture.

The capture writes a :class:`RunMetadata`; the analysis, the widget and ``%xprof runs`` read it
back, through the one codec of xprof_magic's files (:mod:`xprof_magic._codec`). A run folder
may come from an older version, another tool or a damaged disk, so reading is lenient field by
field: a malformed field becomes its default (a list keeps the items that fit) and is named in
:attr:`RunMetadata.problems`, never an exception. Writing is atomic (``store.write_json``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from xprof_magic._cell.labels import LabelStat as LabelTime
from xprof_magic._codec import read_plain, to_plain
from xprof_magic._runs.store import METADATA_FILE, write_json

__all__ = [
    "SCHEMA",
    "LabelTime",
    "MemoryFigure",
    "MetricTotal",
    "RunError",
    "RunMetadata",
    "RunMetrics",
    "read",
    "write",
]

SCHEMA = 1


@dataclass(frozen=True)
class RunError:
    """The exception that ended the cell (``KeyboardInterrupt`` included)."""

    type: str = "Error"
    message: str = ""


@dataclass(frozen=True)
class MemoryFigure:
    """The device's memory as its runtime counted it at one moment of the cell.

    The moment is the end of a labelled block (``path`` ``()``: the cell's start or end); the
    figures are bytes in use, the process's peak so far, and the limit (0: unknown). ``t_ns`` is
    wall-clock time.
    """

    SAVED_AS_ROW: ClassVar[bool] = True
    """Saved as ``[t_ns, path, in_use, peak, limit]``: a cell may have thousands."""

    t_ns: int
    path: tuple[str, ...]
    in_use: float
    peak: float
    limit: float


@dataclass(frozen=True)
class MetricTotal:
    """One runtime metric over the cell: samples and their sum (seconds for ``*Time``)."""

    count: int
    total_s: float


@dataclass(frozen=True)
class RunMetrics:
    """The backend's counters and metrics for this cell alone, and what it explained in words.

    The metrics are a delta (unchanged ones omitted); ``notes`` are what it explained during the
    cell (why a function recompiled).
    """

    counters: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, MetricTotal] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunMetadata:
    """Everything the magic knows about a run that the timeline does not say.

    ``step_rule`` says how steps were found (``sync``, ``iteration`` or ``user``; None when
    none were); ``step_window`` is ``--steps A:B`` as asked, and ``steps_first`` the cell's
    number of the first step the run holds (its ``steps`` are that one and the next ones).
    """

    run: str = ""
    cell: str | None = None
    cell_number: int | None = None
    cell_first_line: int | None = None
    """The editor's number of ``cell``'s first line: 2 under ``%%xprof`` (the magic is line
    1, as in IPython's traceback), a profiled function's first line as marimo's cell or its
    file numbers it. None in a run from before it was kept (see :attr:`first_line`)."""
    labels: tuple[LabelTime, ...] = ()
    steps: tuple[float, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    start: str = ""
    end: str = ""
    start_ns: int | None = None
    end_ns: int | None = None
    wall_s: float | None = None
    status: str = "unknown"
    error: RunError | None = None
    backend: str = ""
    device: str = ""
    device_name: str = ""
    host: str = ""
    pid: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    metrics: RunMetrics = field(default_factory=RunMetrics)
    step_rule: str | None = None
    step_window: str | None = None
    steps_first: int | None = None
    steps_spread: tuple[tuple[int, int], ...] = ()
    """The steps (ranges of their numbers: first, end exclusive) of a loop of tiny steps that
    were counted, not timed one by one: their times are spread evenly between the line
    sampler's looks (the whole loop's time shared out, without one)."""
    messages: tuple[str, ...] = ()
    memory: tuple[MemoryFigure, ...] = ()
    """The backend's live device-memory figures during the cell, where it keeps them."""
    cell_file: str = ""
    """The file name the cell's code was compiled under (``/tmp/ipykernel_…/….py``), which
    the runtime's messages (an out-of-memory error's ``source_file``) name the cell by."""
    lines: tuple[tuple[int, int, int, int], ...] = ()  # sampled: ns, line, flags, steps (sampler)
    cpus: int | None = None
    """The cores the cell's process could run on (its CPU affinity): how far a fix that moves
    work to other cores (DataLoader workers) can spread it. None in a run from before it was
    kept, or from another process (an on-demand capture)."""
    children_cpu_s: float | None = None
    """The CPU seconds the cell's child processes (a DataLoader's workers) used while it ran:
    how busy the cores were that more workers would share. None where not known (not Linux, a
    run from before it was kept, an on-demand capture)."""
    schema: int = SCHEMA
    problems: tuple[str, ...] = field(default=(), compare=False, metadata={"saved": False})

    @property
    def first_line(self) -> int:
        """:attr:`cell_first_line`, or for an older run what it was.

        2 for the magic's (its options hold the magic's ``line``), else 1 (a function's text came
        numbered).
        """
        if self.cell_first_line is not None and self.cell_first_line > 0:
            return self.cell_first_line
        return 2 if "line" in self.options else 1

    @property
    def numbered_cell(self) -> str:
        """The cell's text with its lines where the editor numbers them (blank lines before it).

        So every "line N" the summary names is the line the user sees.
        """
        return "\n" * (self.first_line - 1) + self.cell if self.cell else ""

    @property
    def cell_ns(self) -> tuple[int, int] | None:
        """The cell's span in wall-clock nanoseconds, when known and sane."""
        if self.start_ns is not None and self.end_ns is not None and self.end_ns > self.start_ns:
            return self.start_ns, self.end_ns
        return None

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``xprof_magic.json`` holds (:mod:`xprof_magic._codec`)."""
        plain = to_plain(self)
        assert isinstance(plain, dict)
        return plain

    @classmethod
    def from_json(cls, data: Any) -> RunMetadata:
        """Read a metadata object leniently; what cannot be used is named in ``problems``."""
        if not isinstance(data, dict):
            return cls(problems=(f"{METADATA_FILE} does not hold an object",))
        meta, bad = read_plain(cls, data)
        # Empty text is "not known", as it always was read.
        meta = replace(
            meta,
            schema=meta.schema or SCHEMA,
            cell=meta.cell or None,
            status=meta.status or "unknown",
            step_rule=meta.step_rule or None,
            step_window=meta.step_window or None,
        )
        if "error" in bad and data.get("error") is not None:
            meta = replace(meta, error=RunError())  # the cell failed, though we cannot say how
        if bad:
            fields = ", ".join(bad)
            return replace(meta, problems=(f"{METADATA_FILE} has unusable fields: {fields}",))
        return meta


def write(run_dir: str | os.PathLike[str], meta: RunMetadata) -> Path:
    """Write ``xprof_magic.json`` into ``run_dir`` atomically; return its path."""
    path = Path(run_dir) / METADATA_FILE
    write_json(path, meta.to_json())
    return path


def read(run_dir: str | os.PathLike[str]) -> RunMetadata | None:
    """The run's metadata, or None when the run has no ``xprof_magic.json``.

    An unreadable file gives a :class:`RunMetadata` whose ``problems`` say why.
    """
    path = Path(run_dir) / METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        return RunMetadata(problems=(f"{METADATA_FILE} is unreadable ({error})",))
    try:
        data = json.loads(text)
    except ValueError as error:
        return RunMetadata(problems=(f"{METADATA_FILE} is unreadable ({error})",))
    return RunMetadata.from_json(data)
