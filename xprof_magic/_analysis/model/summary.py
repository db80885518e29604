"""The summary of one run as plain frozen dataclasses, and their JSON form.

A summary is saved beside its capture and shown again in later sessions without the kernel
that made it, so every field is a plain value (str, int, float, bool, None, tuples and nested
dataclasses) and the JSON form round-trips exactly. It holds figures and references (lines,
paths, shares), not the words a reader sees: those are made when it is shown
(:mod:`~xprof_magic._analysis.render`), so a summary saved today reads in tomorrow's words.

Its ``schema`` is the format's version. A summary of schema 2 (saved before the words left it)
still loads, with the words it was saved with (:class:`SavedWords`); one of schema 3 (its
``missing`` and ``warnings`` saved as sentences) loads with them as it said them (a
:class:`Gap` or :class:`Flaw` ``as saved``); one of an unknown schema
fails loudly here (``ValueError``) and quietly in :func:`~xprof_magic._analysis.load_summary`,
which then recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from xprof_magic._analysis.model import display
from xprof_magic._analysis.model.device_memory import Memory
from xprof_magic._analysis.model.diagnosis import Diagnosis
from xprof_magic._codec import from_plain, to_plain

__all__ = [
    "SUMMARY_SCHEMA",
    "CompileSite",
    "Compiles",
    "DeviceBusy",
    "DeviceInfo",
    "Fallback",
    "Flaw",
    "Gap",
    "HostRow",
    "LabelRow",
    "Note",
    "OpRow",
    "SavedWords",
    "StepStats",
    "Summary",
    "ThreadGroup",
    "Timed",
]

SUMMARY_SCHEMA = 4
SAVED_WORDS_SCHEMA = 2
"""The last schema whose summaries were saved with their words (:class:`SavedWords`)."""
SAID_GAPS_SCHEMA = 3
"""The last schema whose ``missing`` and ``warnings`` were saved as sentences."""

Lack = Literal[
    "analysis failed",
    "no run folder",
    "no metadata",
    "metadata unusable",
    "no timeline",
    "timeline unreadable",
    "timeline not read",
    "timeline too large",
    "other hosts",
    "labels not on timeline",
    "as saved",
]
"""What a summary could not read, and so lacks."""

Fault = Literal["metadata fields", "capture message", "as saved"]
"""What reading a run found wrong with it, though the summary stands."""


@dataclass(frozen=True)
class Gap:
    """One thing the summary could not read, and so lacks: ``what``, with what names it."""

    what: Lack
    """What is lacking (``as saved``: a sentence of a summary saved before gaps were data)."""
    path: str = ""
    """The folder or file concerned."""
    error: str = ""
    """The error raised, as it said it (``as saved``: the sentence)."""
    names: tuple[str, ...] = ()
    """The other hosts captured, the labels the timeline lacks, or the error's type."""
    mb: float | None = None
    """The timeline's size, in MB (too large: MiB)."""
    budget_s: float | None = None
    """The time budget that left the timeline unread (None: left for the full summary)."""


@dataclass(frozen=True)
class Flaw:
    """What reading the run found wrong with it, though the summary stands."""

    what: Fault
    """What was wrong."""
    said: str
    """As its finder said it: the metadata reader, the capture itself, an older summary."""
    level: str = "warning"
    """The note's level: ``warning``, or an older summary's own."""


@dataclass(frozen=True)
class Note:
    """One headline for the reader: ``level`` is ``error``, ``warning`` or ``info``."""

    level: str
    text: str


@dataclass(frozen=True)
class SavedWords:
    """The words a summary of schema 2 was saved with, shown as they were.

    Its figures lack some that today's words are made from (a verdict's ``shares``, ``warm_up``).
    """

    headline: str = ""
    fix: str = ""
    evidence: tuple[tuple[str, str], ...] = ()
    notes: tuple[Note, ...] = ()
    device: str = ""


@dataclass(frozen=True)
class DeviceBusy:
    """How much of the capture window one accelerator was busy, and of that, how much it copied.

    Busy is its lines' union (a chip's programs, a GPU's streams); ``copy_s``: of that, the time
    copying between host and device memory where its plane says so (a GPU's copies; None: not told
    apart).
    """

    name: str
    busy_s: float
    share: float
    copy_s: float | None = None


@dataclass(frozen=True)
class ThreadGroup:
    """Host threads of one kind (``tf_XLAEigen/*`` ...) and the time they were busy.

    ``busy_s`` adds the threads up (thread-seconds), so ``share`` of the window can pass 1. What
    such threads do is the backend's words, said when the summary is shown.
    """

    name: str
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

    ``busy_s``/``busy_share``: on an accelerator, the mean over its devices of the time one
    was busy (a TPU's programs, a GPU's kernels, copies and memsets: the union of its
    streams); on the CPU, the time at least one XLA CPU client thread ran an execution
    (launch to completion), else, in a timeline without such events, an XLA op. ``name``:
    the device as the runtime or the timeline names it (``NVIDIA H200``), "" unknown.
    ``silent``: the timeline was read and holds none of that device's activity;
    ``planes``: how many of that kind's devices it shows (None: no timeline was read). The
    device said in words is the render stage's
    (:func:`~xprof_magic._analysis.render.notes.device_statement`).
    """

    kind: str
    on_cpu: bool
    window_s: float | None = None
    busy_s: float | None = None
    busy_share: float | None = None
    devices: tuple[DeviceBusy, ...] = ()
    threads: tuple[ThreadGroup, ...] = ()
    name: str = ""
    silent: bool = False
    planes: int | None = None


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
    peak_bytes: float | None = None
    """The device's memory in use at its highest during the block's runs (None: unknown)."""


@dataclass(frozen=True)
class StepStats:
    """Step times; the first step (which usually compiles) is kept apart from the rest.

    ``durations_s`` keeps the first 10,000 steps; the statistics cover all ``count``.
    ``compiling`` lists the steps whose span held a compilation (unknown: empty).
    ``starts_s``: where each of those steps starts on the timeline, in seconds from its
    origin, which is XProf's trace viewer's 0 ms (empty: unknown, as for the magic's step
    timer and summaries saved before this field). ``estimated``: the steps (indices) whose
    end is an estimate: the device was still running their work when their host part ended,
    and the timeline tells neither which launch each piece of its work was nor each
    execution whole, so the device's busy time is shared out among the launches it ran.
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
    starts_s: tuple[float, ...] = ()
    estimated: tuple[int, ...] = ()
    host_starts_s: tuple[float, ...] = ()
    """Where each step's own host part (its block) starts, as :attr:`starts_s`: earlier than
    the step where the host ran ahead of the device (the steps tile the loop, so such a step
    starts where the one before ended on the device). Empty: unknown."""
    spread: tuple[tuple[int, int], ...] = ()
    """The steps (ranges of indices: first, end exclusive) whose host times are estimates,
    spread evenly between the line sampler's looks: a loop of tiny steps whose steps were
    counted, not timed one by one (``RunMetadata.steps_spread``)."""


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

    ``op`` is the counter's full name (torch_xla: ``aten::nonzero``); what to do about it is
    the backend's words, said when the summary is shown.
    """

    op: str
    count: int


@dataclass(frozen=True)
class OpRow:
    """One operation name with its self time (time not spent in nested events)."""

    name: str
    category: str
    count: int
    self_s: float
    share: float


@dataclass(frozen=True)
class Summary:
    """What one run says at a glance. ``pending``: the timeline is still to be read.

    ``diagnosis`` is its conclusion: the bottleneck, where and the fix, as figures
    (:class:`Diagnosis`); its words and the headlines are made when the summary is shown
    (:func:`~xprof_magic._analysis.render.headline.said`,
    :func:`~xprof_magic._analysis.render.notes.notes_of`). ``warnings`` are what reading the
    run found wrong with it (its metadata's unusable fields, the capture's own messages):
    :class:`Flaw`. ``saved_words``: a summary of schema 2's.

    ``programs`` are the XLA programs that ran in the capture, as XProf names them
    (``<module>(<program id>)``), with their seconds, most first: the process's earlier
    programs, which the capture's metadata lists too, are not among them.

    ``missing`` lists what could not be read and so is absent here: :class:`Gap`.

    A summary displays itself (IPython's rich display: ``_repr_mimebundle_``), as the text
    and static HTML renderers (:mod:`~xprof_magic._analysis.render`) show it: they register
    themselves for it (:mod:`~xprof_magic._analysis.model.display`), the model imports none.
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
    missing: tuple[Gap, ...] = ()
    warnings: tuple[Flaw, ...] = ()
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    device: DeviceInfo = field(default_factory=lambda: DeviceInfo("unknown", False))
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
    programs: tuple[tuple[str, float], ...] = ()
    events: int = 0
    read_s: float = 0.0
    hosts: tuple[HostRow, ...] = ()
    slowest_host: str = ""
    memory: Memory = field(default_factory=Memory)
    saved_words: SavedWords | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_json` gives back an equal summary."""
        plain = to_plain(self)
        assert isinstance(plain, dict)
        return plain

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        """The summary ``to_json`` wrote, or one of schema 3 or 2; ``ValueError`` if it is neither.

        An older schema's gaps and notes, and schema 2's words, are kept as they were saved.
        """
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == SUMMARY_SCHEMA:
            return from_plain(cls, data)
        if schema not in (SAID_GAPS_SCHEMA, SAVED_WORDS_SCHEMA):
            raise ValueError(
                f"not a summary of schema {SUMMARY_SCHEMA}, {SAID_GAPS_SCHEMA} or "
                f"{SAVED_WORDS_SCHEMA}"
            )
        data = {**data, **_as_saved(data.get("missing"), data.get("warnings"))}
        if schema == SAID_GAPS_SCHEMA:
            return from_plain(cls, data)
        said = data.get("diagnosis")
        said = said if isinstance(said, dict) else {}
        words = {key: said[key] for key in ("headline", "fix", "evidence") if key in said}
        device = data.get("device")
        statement = device.get("statement", "") if isinstance(device, dict) else ""
        saved = from_plain(
            SavedWords, {**words, "notes": data.get("notes", []), "device": statement}
        )
        return from_plain(cls, {**data, "saved_words": to_plain(saved)})

    def verdict_window(self) -> tuple[float, float] | None:
        """The steps the verdict is about, as ``(start, end)`` seconds on the timeline.

        Seconds as :attr:`StepStats.starts_s` counts them: from the start of the first steady step
        (after the warm-up, the compiling first steps, and after any step unlike the others before
        it, which the verdict names apart) to the end of the last steady one, as the breakdown
        counts it (until the device has finished what it launched). A step unlike the others between
        steady ones stays in view; one before or after them only touches the window's edge (the
        trace viewer's margin shows its end, or its start). Without the breakdown's steps, from the
        first step after the warm-up to the last. None without the steps' times, or for a verdict
        about the cell.
        """
        steps = self.steps
        if steps is None or not steps.starts_s or len(steps.starts_s) != len(steps.durations_s):
            return None
        if self.diagnosis.scope == "cell":
            return None
        count = len(steps.starts_s)
        steady = self.diagnosis.steady() if len(self.diagnosis.breakdown.steps) == count else ()
        if steady:
            first, last = steady[0], steady[-1]
        else:
            first, last = min(self.diagnosis.warm_up, count - 1), count - 1
        start = steps.starts_s[first]
        if len(steps.host_starts_s) == count:
            # Where the host ran ahead, the step's own host part (its labels) comes first.
            start = min(start, steps.host_starts_s[first])
        end = steps.starts_s[last] + steps.durations_s[last]
        return (start, end) if end > start else None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """``text/plain`` and static ``text/html``, for IPython's display of a cell's value.

        Both are the render stage's (:mod:`~xprof_magic._analysis.model.display`).
        """
        return display.bundle(self)


def _as_saved(missing: Any, warnings: Any) -> dict[str, Any]:
    """A schema 2 or 3 summary's ``missing`` and ``warnings`` as the gaps and flaws they said.

    ``missing`` and ``warnings`` are sentences and notes; they are worded as they were
    (``as saved``). One that was loaded so and saved again holds them so already.
    """
    said = missing if isinstance(missing, list) else []
    notes = warnings if isinstance(warnings, list) else []
    return {
        "missing": [to_plain(Gap("as saved", error=m)) if isinstance(m, str) else m for m in said],
        "warnings": [
            to_plain(Flaw("as saved", n["text"], str(n.get("level", "warning"))))
            if isinstance(n, dict) and "text" in n
            else n
            for n in notes
        ],
    }
