"""The summary of one run as plain frozen dataclasses, and their JSON form.

A summary is saved beside its capture and shown again in later sessions without the kernel
that made it, so every field is a plain value (str, int, float, bool, None, tuples and nested
dataclasses) and the JSON form round-trips exactly. Reading a file written by another version
fails loudly here (``ValueError``) and quietly in :func:`~xprof_magic._analysis.load_summary`,
which then recomputes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, StepBreakdown

__all__ = [
    "SUMMARY_SCHEMA",
    "Breakdown",
    "CompareRow",
    "CompileSite",
    "Compiles",
    "DeviceBusy",
    "DeviceInfo",
    "Diagnosis",
    "Fallback",
    "HostRow",
    "LabelRow",
    "Note",
    "OpRow",
    "StepBreakdown",
    "StepStats",
    "Summary",
    "ThreadGroup",
    "Timed",
    "from_plain",
    "to_plain",
]

SUMMARY_SCHEMA = 2


@dataclass(frozen=True)
class Note:
    """One headline for the reader: ``level`` is ``error``, ``warning`` or ``info``."""

    level: str
    text: str


@dataclass(frozen=True)
class DeviceBusy:
    """How much of the capture window one accelerator spent running XLA programs."""

    name: str
    busy_s: float
    share: float


@dataclass(frozen=True)
class ThreadGroup:
    """Host threads of one kind (``tf_XLAEigen/*`` ...) and the time they were busy.

    ``busy_s`` adds the threads up (thread-seconds), so ``share`` of the window can pass 1.
    """

    name: str
    role: str
    threads: int
    busy_s: float
    share: float


@dataclass(frozen=True)
class HostRow:
    """One host of a multi-host run: its step time and how busy its device was.

    ``step_name`` is what the steps are: step markers of the timeline, else the most often
    repeated top-level block on its Python thread (a training loop's body); ``step_s`` is their
    median after the first. ``busy_s`` and ``busy_share`` are as :class:`DeviceInfo`'s.
    ``problem`` says why the host could not be read, when it could not.
    """

    host: str
    step_name: str = ""
    steps: int = 0
    step_s: float | None = None
    busy_s: float | None = None
    busy_share: float | None = None
    window_s: float | None = None
    problem: str = ""


@dataclass(frozen=True)
class DeviceInfo:
    """Which device ran the cell's work, said plainly, with its busy time.

    ``busy_s``/``busy_share``: on a TPU, the mean over chips of the time an XLA program ran;
    on the CPU, the time at least one XLA CPU client thread ran an execution (launch to
    completion), else, in a timeline without such events, an XLA op.
    """

    kind: str
    on_cpu: bool
    statement: str
    window_s: float | None = None
    busy_s: float | None = None
    busy_share: float | None = None
    devices: tuple[DeviceBusy, ...] = ()
    threads: tuple[ThreadGroup, ...] = ()


@dataclass(frozen=True)
class LabelRow:
    """One labelled block (a marker block, a user trace or a step), summed over its runs.

    ``path`` is the nesting from the outermost block. ``kind`` is ``label`` (the magic's
    markers), ``trace`` (the user's ``xp.Trace``), ``step``, or ``input``: the data
    loader's own traces, grouped under one row (they run on its threads, beside the cell).
    ``compiles`` counts the compilations whose innermost enclosing block is this one;
    ``compiled_runs`` how many of its ``count`` runs held at least one of them. Compile
    fields are None when unknown.
    """

    path: tuple[str, ...]
    kind: str
    count: int
    total_s: float
    mean_s: float
    share: float | None
    thread: str = ""
    compiles: int | None = None
    compile_s: float | None = None
    compiled_runs: int | None = None


@dataclass(frozen=True)
class StepStats:
    """Step times; the first step (which usually compiles) is kept apart from the rest.

    ``durations_s`` keeps the first 10,000 steps; the statistics cover all ``count``.
    ``compiling`` lists the steps whose span held a compilation (unknown: empty).
    """

    name: str
    source: str
    count: int
    durations_s: tuple[float, ...]
    first_s: float
    rest_min_s: float | None
    rest_median_s: float | None
    rest_max_s: float | None
    compiling: tuple[int, ...] = ()


@dataclass(frozen=True)
class CompileSite:
    """A block that held compilations; ``recompiled`` when the same code compiled again.

    ``first_runs`` are the indices (from 0) of the first 8 runs that compiled;
    ``first_steps`` the numbers of the steps those runs began in, when each began in one.
    """

    path: tuple[str, ...]
    runs: int
    compiled_runs: int
    compiles: int
    total_s: float
    first_runs: tuple[int, ...]
    recompiled: bool
    warm_up: bool
    first_steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Compiles:
    """Compilations: the backend's own count and time, and where the trace saw them.

    ``functions`` holds ``(name, compilations, seconds)`` for each function the backend
    named (JAX's ``fun_name``), most compiled first; ``reasons`` the backend's
    ``(function, why it compiled again)``.
    """

    count: int | None = None
    total_s: float | None = None
    cache_hits: int | None = None
    trace_count: int | None = None
    trace_s: float | None = None
    outside_labels: int = 0
    sites: tuple[CompileSite, ...] = ()
    functions: tuple[tuple[str, int, float], ...] = ()
    reasons: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Timed:
    """A count of runtime events with their time and, for transfers, their bytes."""

    count: int
    total_s: float
    bytes: float | None = None


@dataclass(frozen=True)
class Fallback:
    """An op that ran on the CPU outside the compiled program, from the backend's counter.

    ``op`` is the counter's full name (torch_xla: ``aten::nonzero``).
    """

    op: str
    count: int
    hint: str


@dataclass(frozen=True)
class OpRow:
    """One operation name with its self time (time not spent in nested events)."""

    name: str
    category: str
    count: int
    self_s: float
    share: float


@dataclass(frozen=True)
class CompareRow:
    """One quantity in two runs; ``unit`` is ``s``, ``count`` or ``text``.

    Label rows carry their ``path``; ``name`` is its last element.
    """

    section: str
    name: str
    a: float | str | None
    b: float | str | None
    unit: str
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    """What one run says at a glance. ``pending``: the timeline is still to be read.

    ``diagnosis`` is its conclusion: the bottleneck, where and the fix (:class:`Diagnosis`).

    ``missing`` lists, as sentences, what could not be read and so is absent here.
    """

    run: str
    run_dir: str
    schema: int = SUMMARY_SCHEMA
    host: str = ""
    status: str = "unknown"
    error: str | None = None
    cell: str = ""
    start: str = ""
    wall_s: float | None = None
    backend: str = ""
    versions: tuple[tuple[str, str], ...] = ()
    complete: bool = False
    pending: bool = False
    missing: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    device: DeviceInfo = field(
        default_factory=lambda: DeviceInfo("unknown", False, "The device is unknown.")
    )
    labels: tuple[LabelRow, ...] = ()
    label_source: str = "none"
    steps: StepStats | None = None
    compiles: Compiles = field(default_factory=Compiles)
    executions: Timed | None = None
    to_device: Timed | None = None
    from_device: Timed | None = None
    fallbacks: tuple[Fallback, ...] = ()
    host_ops: tuple[OpRow, ...] = ()
    device_ops: tuple[OpRow, ...] = ()
    compile_ops: tuple[OpRow, ...] = ()
    events: int = 0
    read_s: float = 0.0
    hosts: tuple[HostRow, ...] = ()
    slowest_host: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_json` gives back an equal summary."""
        plain = to_plain(self)
        assert isinstance(plain, dict)
        return plain

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        """The summary ``to_json`` wrote; ``ValueError`` if ``data`` is not one."""
        if not isinstance(data, dict) or data.get("schema") != SUMMARY_SCHEMA:
            raise ValueError(f"not a summary of schema {SUMMARY_SCHEMA}")
        return from_plain(cls, data)


def to_plain(value: Any) -> Any:
    """Dataclasses to dicts and tuples to lists, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    return value


T = TypeVar("T")
_hints_cache: dict[type, dict[str, Any]] = {}


def from_plain(cls: type[T], data: Any) -> T:
    """Rebuild dataclass ``cls`` from :func:`to_plain`'s output, checking every type."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints_cache.get(cls)
    if hints is None:
        hints = _hints_cache[cls] = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{cls.__name__}.{f.name}")
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"{cls.__name__}: {error}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {value!r} does not fit {hint}")
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], item, where) for item in value)
        if len(args) != len(value):
            raise ValueError(f"{where}: expected {len(args)} items")
        return tuple(_convert(a, item, where) for a, item in zip(args, value, strict=True))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_plain(hint, value)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    elif hint is Any:
        return value
    raise ValueError(f"{where}: {value!r} is not a {getattr(hint, '__name__', hint)}")
