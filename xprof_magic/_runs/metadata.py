"""The one schema of ``xprof_magic.json``, the metadata stored beside every capture.

The capture writes a :class:`RunMetadata`; the analysis, the widget and ``%xprof runs`` read it
back. A run folder may come from an older version, another tool or a damaged disk, so reading
is lenient field by field: a malformed field becomes its default and is named in
:attr:`RunMetadata.problems`, never an exception. Writing is atomic (``store.write_json``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from xprof_magic._cell.labels import LabelStat as LabelTime
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

    type: str
    message: str


@dataclass(frozen=True)
class MemoryFigure:
    """The device's memory as its runtime counted it at one moment of the cell (the end of a
    labelled block; ``path`` ``()``: the cell's start or end): bytes in use, the process's
    peak so far, and the limit (0: unknown). ``t_ns`` is wall-clock time."""

    t_ns: int
    path: tuple[str, ...]
    in_use: float
    peak: float
    limit: float

    def to_json(self) -> list[Any]:
        return [self.t_ns, list(self.path), self.in_use, self.peak, self.limit]


@dataclass(frozen=True)
class MetricTotal:
    """One runtime metric over the cell: samples and their sum (seconds for ``*Time``)."""

    count: int
    total_s: float


@dataclass(frozen=True)
class RunMetrics:
    """The backend's counters and metrics for this cell alone (a delta, unchanged omitted),
    and what it explained in words during the cell (``notes``: why a function recompiled)."""

    counters: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, MetricTotal] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "counters": dict(self.counters),
            "metrics": {
                name: {"count": m.count, "total_s": m.total_s} for name, m in self.metrics.items()
            },
        }
        if self.notes:
            out["notes"] = list(self.notes)
        return out


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
    messages: tuple[str, ...] = ()
    memory: tuple[MemoryFigure, ...] = ()
    """The backend's live device-memory figures during the cell, where it keeps them."""
    cell_file: str = ""
    """The file name the cell's code was compiled under (``/tmp/ipykernel_…/….py``), which
    the runtime's messages (an out-of-memory error's ``source_file``) name the cell by."""
    lines: tuple[tuple[int, int, int, int], ...] = ()  # sampled: ns, line, flags, steps (sampler)
    schema: int = SCHEMA
    problems: tuple[str, ...] = field(default=(), compare=False)

    @property
    def first_line(self) -> int:
        """:attr:`cell_first_line`, or for an older run what it was: 2 for the magic's (its
        options hold the magic's ``line``), else 1 (a function's text came numbered)."""
        if self.cell_first_line is not None and self.cell_first_line > 0:
            return self.cell_first_line
        return 2 if "line" in self.options else 1

    @property
    def numbered_cell(self) -> str:
        """The cell's text with its lines where the editor numbers them (blank lines before
        it), so that every "line N" the summary names is the line the user sees."""
        return "\n" * (self.first_line - 1) + self.cell if self.cell else ""

    @property
    def cell_ns(self) -> tuple[int, int] | None:
        """The cell's span in wall-clock nanoseconds, when known and sane."""
        if self.start_ns is not None and self.end_ns is not None and self.end_ns > self.start_ns:
            return self.start_ns, self.end_ns
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run": self.run,
            "cell": self.cell,
            "cell_number": self.cell_number,
            "cell_first_line": self.cell_first_line,
            "labels": [label.to_json() for label in self.labels],
            "steps": list(self.steps),
            "options": self.options,
            "start": self.start,
            "end": self.end,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "wall_s": self.wall_s,
            "status": self.status,
            "error": None
            if self.error is None
            else {"type": self.error.type, "message": self.error.message},
            "backend": self.backend,
            "device": self.device,
            "device_name": self.device_name,
            "host": self.host,
            "pid": self.pid,
            "versions": dict(self.versions),
            "metrics": self.metrics.to_json(),
            "step_rule": self.step_rule,
            "step_window": self.step_window,
            "steps_first": self.steps_first,
            "messages": list(self.messages),
            "memory": [figure.to_json() for figure in self.memory],
            "cell_file": self.cell_file,
            "lines": [list(sample) for sample in self.lines],
        }

    @classmethod
    def from_json(cls, data: Any) -> RunMetadata:
        """Read a metadata object leniently; what cannot be used is named in ``problems``."""
        if not isinstance(data, dict):
            return cls(problems=(f"{METADATA_FILE} does not hold an object",))
        reader = _Reader(data)
        meta = cls(
            schema=reader.integer("schema") or SCHEMA,
            run=reader.text("run"),
            cell=reader.text("cell") or None,
            cell_number=reader.integer("cell_number"),
            cell_first_line=reader.integer("cell_first_line"),
            labels=reader.labels(),
            steps=reader.floats("steps"),
            options=reader.mapping("options"),
            start=reader.text("start"),
            end=reader.text("end"),
            start_ns=reader.integer("start_ns"),
            end_ns=reader.integer("end_ns"),
            wall_s=reader.number("wall_s"),
            status=reader.text("status") or "unknown",
            error=reader.error(),
            backend=reader.text("backend"),
            device=reader.text("device"),
            device_name=reader.text("device_name"),
            host=reader.text("host"),
            pid=reader.integer("pid"),
            versions={str(k): str(v) for k, v in reader.mapping("versions").items()},
            metrics=reader.metrics(),
            step_rule=reader.text("step_rule") or None,
            step_window=reader.text("step_window") or None,
            steps_first=reader.integer("steps_first"),
            messages=reader.texts("messages"),
            memory=reader.memory(),
            cell_file=reader.text("cell_file"),
            lines=reader.lines(),
        )
        if reader.bad:
            fields = ", ".join(sorted(reader.bad))
            return _with_problems(meta, f"{METADATA_FILE} has unusable fields: {fields}")
        return meta


def _with_problems(meta: RunMetadata, *problems: str) -> RunMetadata:
    return replace(meta, problems=(*meta.problems, *problems))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class _Reader:
    """Typed access to a JSON object that records which fields were present but unusable."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.bad: set[str] = set()

    def _typed(self, key: str, value: Any, ok: bool) -> bool:
        """Whether ``value`` is usable; a present but unusable field is recorded."""
        if value is not None and not ok:
            self.bad.add(key)
        return value is not None and ok

    def text(self, key: str) -> str:
        value: Any = self.data.get(key)
        return value if self._typed(key, value, isinstance(value, str)) else ""

    def integer(self, key: str) -> int | None:
        value: Any = self.data.get(key)
        ok = isinstance(value, int) and not isinstance(value, bool)
        return int(value) if self._typed(key, value, ok) else None

    def number(self, key: str) -> float | None:
        value: Any = self.data.get(key)
        number = _number(value)
        return number if self._typed(key, value, number is not None) else None

    def mapping(self, key: str) -> dict[str, Any]:
        value: Any = self.data.get(key)
        return dict(value) if self._typed(key, value, isinstance(value, dict)) else {}

    def texts(self, key: str) -> tuple[str, ...]:
        value: Any = self.data.get(key)
        if not self._typed(key, value, isinstance(value, list)):
            return ()
        if not all(isinstance(x, str) for x in value):
            self.bad.add(key)
        return tuple(x for x in value if isinstance(x, str))

    def floats(self, key: str) -> tuple[float, ...]:
        value: Any = self.data.get(key)
        if not self._typed(key, value, isinstance(value, list)):
            return ()
        numbers = [_number(x) for x in value]
        if any(n is None for n in numbers):
            self.bad.add(key)
        return tuple(n for n in numbers if n is not None)

    def labels(self) -> tuple[LabelTime, ...]:
        value: Any = self.data.get("labels")
        if not self._typed("labels", value, isinstance(value, list)):
            return ()
        found: list[LabelTime] = []
        for item in value:
            path = item.get("path") if isinstance(item, dict) else None
            count = item.get("count") if isinstance(item, dict) else None
            total = _number(item.get("total_s")) if isinstance(item, dict) else None
            if (
                isinstance(path, list)
                and path
                and all(isinstance(p, str) for p in path)
                and isinstance(count, int)
                and total is not None
            ):
                found.append(LabelTime(tuple(path), count, total))
            else:
                self.bad.add("labels")
        return tuple(found)

    def lines(self) -> tuple[tuple[int, int, int, int], ...]:
        value: Any = self.data.get("lines")
        ok = isinstance(value, list) and all(type(x) is list for x in value)
        ok = self._typed("lines", value, ok and all([*map(type, x)] == [int] * 4 for x in value))
        return tuple((x[0], x[1], x[2], x[3]) for x in value) if ok else ()

    def memory(self) -> tuple[MemoryFigure, ...]:
        value: Any = self.data.get("memory")
        if not self._typed("memory", value, isinstance(value, list)):
            return ()
        found: list[MemoryFigure] = []
        for item in value:
            ok = isinstance(item, list) and len(item) == 5
            t, path = (item[0], item[1]) if ok else (None, None)
            numbers = [_number(x) for x in item[2:]] if ok else []
            if (
                isinstance(t, int)
                and isinstance(path, list)
                and all(isinstance(p, str) for p in path)
                and all(n is not None for n in numbers)
            ):
                used, peak, limit = (float(n) for n in numbers if n is not None)
                found.append(MemoryFigure(t, tuple(path), used, peak, limit))
            else:
                self.bad.add("memory")
        return tuple(found)

    def error(self) -> RunError | None:
        value: Any = self.data.get("error")
        if value is None:
            return None
        if not isinstance(value, dict):
            self.bad.add("error")
            return RunError("Error", "")
        kind, message = value.get("type"), value.get("message")
        return RunError(
            kind if isinstance(kind, str) and kind else "Error",
            message if isinstance(message, str) else "",
        )

    def metrics(self) -> RunMetrics:
        value = self.mapping("metrics")
        counters_raw = value.get("counters")
        metrics_raw = value.get("metrics")
        counters: dict[str, int] = {}
        metrics: dict[str, MetricTotal] = {}
        for name, count in (counters_raw if isinstance(counters_raw, dict) else {}).items():
            if isinstance(count, int) and not isinstance(count, bool):
                counters[str(name)] = count
            else:
                self.bad.add("metrics")
        for name, entry in (metrics_raw if isinstance(metrics_raw, dict) else {}).items():
            count = entry.get("count") if isinstance(entry, dict) else None
            total = _number(entry.get("total_s")) if isinstance(entry, dict) else None
            if isinstance(count, int) and total is not None:
                metrics[str(name)] = MetricTotal(count, total)
            else:
                self.bad.add("metrics")
        notes_raw = value.get("notes")
        notes = tuple(
            n for n in (notes_raw if isinstance(notes_raw, list) else []) if isinstance(n, str)
        )
        return RunMetrics(counters, metrics, notes)


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
