"""A backend's words: the names, advice and headings the summary uses in its terms.

The analysis reads runs long after they were made, often in a process that must not pay for
importing a profiler, so a backend's words live apart from its code: a :class:`Vocabulary` in
a light module of its own (``<backend>_vocabulary.py``), which its registry entry
(:mod:`xprof_magic._backends.registry`) names. Only words: what a backend's runtime does (a lazy
graph, eager compiles) is a capability of its registry entry. Imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "NEUTRAL",
    "NEUTRAL_FIXES",
    "XLA_THREAD_ROLES",
    "Advice",
    "CaptureWords",
    "Headings",
    "MetricNames",
    "TimelineNames",
    "Vocabulary",
]


XLA_THREAD_ROLES = {
    "pjrt_async_work_runner": "PjRt workers: the host's side of host↔device copies",
    "pjrt-tpu-tasks": "PjRt TPU tasks: the host's side of host↔device copies",
    "py_xla_execute": "JAX's execute threads: launch programs on the devices",
    "py_xla_callback": "JAX's callbacks: frees device buffers",
    "Host Threads": "the device tracer's own threads",
    "tf_pjrt_compile_thread_pool": "XLA's compiler threads: compilation",
}
"""What the runtime's own threads do, where every backend on XLA shares them (a backend's
:attr:`TimelineNames.thread_roles` adds its own)."""


@dataclass(frozen=True)
class MetricNames:
    """Which of the backend's counters and metrics mean what; "" where it has none.

    Metrics are read from the run's ``metrics.metrics`` (samples and total: seconds for
    times, bytes for data), counters from ``metrics.counters``.
    ``function_compile_prefix`` + a compiled function's name is the metric of that
    function's compilations (count and seconds), where the backend can name them.
    """

    compile_time: str = ""
    compile_cache_hits: str = ""
    execute_time: str = ""
    to_device_time: str = ""
    to_device_bytes: str = ""
    from_device_time: str = ""
    from_device_bytes: str = ""
    fallback_prefix: str = ""
    host_read: str = ""
    function_compile_prefix: str = ""
    host_copy_ns: str = ""
    """A metric, in nanoseconds, of the host's side of copies to the device (torch_xla's
    ``TensorToData``), which the timeline has no event for: the breakdown counts it as
    transfer, not host."""


@dataclass(frozen=True)
class TimelineNames:
    """How the backend's own events and threads look on the timeline."""

    compile_events: tuple[str, ...] = ()
    compile_phases: frozenset[str] = frozenset()
    """The runtime's host events that prepare a compilation without being one (JAX's
    lowering to MLIR, which a recompile repeats): compile time, not counted as compiles."""
    runtime_names: frozenset[str] = frozenset()
    runtime_prefixes: tuple[str, ...] = ()
    thread_roles: Mapping[str, str] = field(default_factory=dict)
    input_pipeline: frozenset[str] = frozenset()
    """The data loader's own trace names: shown as one input-pipeline row, not as blocks."""
    waits: frozenset[str] = frozenset()
    """The runtime's host events in which the host waits for the device, besides XLA's own
    (``Wait for …``, barriers): sync time, and never input inside a loop's ``next()``."""
    step_ends: frozenset[str] = frozenset()
    """The runtime's events that end a step (a sync: the step's graph built, compiled and
    launched, after a barrier for the one before). Inside a loop's ``next()`` (a data
    loader that syncs for the step it hands on) their time is the step's, not input."""
    launches: tuple[str, ...] = ()
    """Name prefixes of the host events that launch a program on the device: the device
    time that follows belongs to the statement that made the launch, not to the one that
    waits for it later. A prefix ending in ``(`` names the program inside the brackets
    (``PjitFunction(train)``)."""


@dataclass(frozen=True)
class Advice:
    """What the summary tells the user, in the backend's terms.

    ``fallback_hints`` maps a fallback counter's full name to a hint; others get
    ``fallback_hint``. ``host_read_how`` lists the user's calls that read a value back.
    """

    fallback_hints: Mapping[str, str] = field(default_factory=dict)
    fallback_hint: str = "ran on the CPU outside the compiled program"
    fallback_effect: str = "Each call leaves the compiled program."
    host_read_how: str = "reading values on the host"
    recompile: str = (
        "Shapes or Python values change between runs; keep shapes fixed (pad or bucket)."
    )
    cpu_device: str = (
        "Ran on the CPU, not on an accelerator: these times say nothing about accelerator speed."
    )
    fixes: Mapping[str, str] = field(default_factory=lambda: dict(NEUTRAL_FIXES))
    """The diagnosis's advice, one sentence per verdict (and per compile cause:
    ``growing graph``, ``changing shapes``, ``changing values``, ``warm-up``, ``first run``;
    per transfer cause: ``host offload``; per host cause: ``eager``, many launches a step,
    ``compiled step``, a few), in the backend's words."""


NEUTRAL_FIXES: Mapping[str, str] = {
    "input": "Prefetch the next batch, or move its decoding off the step (a loader with "
    "worker processes).",
    "host": "Do more per step: fewer, larger ops (vectorize the inner Python loop), or a "
    "compiled function around the step.",
    "eager": "Compile the step: its ops run one at a time, each launched from Python, so the "
    "host's dispatch bounds it; one compiled function around the step launches them as one.",
    "compiled step": "The step already runs as a compiled program, so the host's own Python "
    "between launches is the cost: do more per launch (a larger batch, several steps in one "
    "compiled call) and move per-step Python (logging, data handling) out of the loop.",
    "making batches": "That line runs no framework op, so compiling the step would not "
    "shorten it: it is the input pipeline. Make the batches off the step's path: vectorize "
    "the NumPy over the whole batch, make them once before the loop if they do not change, "
    "or have a background thread or a loader with worker processes prepare the next ones "
    "while the step runs.",
    "few cores": "Make the batches cheaper rather than elsewhere: decode or tokenize the "
    "dataset once, before the loop, and iterate over the results, or vectorize the loader's "
    "per-item work over the whole batch; worker processes pay off on a machine with more cores.",
    "busy workers": "Make the batches cheaper rather than by more workers: decode or tokenize "
    "the dataset once, before the loop, and iterate over the results, or vectorize the "
    "loader's per-item work over the whole batch; more workers pay off on a machine with more "
    "cores.",
    "printing": "Print less often (every N steps), and copy what you print to the host once: "
    "each print of a device value waits for the step and reads it back; compiling the step "
    "would not shorten it.",
    "own code": "That line runs no framework op, so compiling the step would not shorten "
    "it: do it less often (every N steps), vectorize it, or move it out of the loop.",
    "compile": "Keep shapes and Python values fixed between steps, so compiled programs are "
    "reused.",
    "changing shapes": "Pad the inputs to a few fixed sizes (bucketing), or drop the last "
    "partial batch.",
    "eager shapes": "That call runs outside the compiled step, so it compiles for every new "
    "shape it is given: do it on the host before the data reaches the device, or inside the "
    "compiled step on inputs of fixed shape.",
    "memory": "Make the step fit the device: a smaller batch, bf16 instead of f32, "
    "recomputing the largest activations in the backward pass instead of keeping them, or "
    "sharding the step across devices.",
    "growing graph": "End each step where it should: the graph grows while nothing ends it.",
    "warm-up": "Only the first steps compiled: later runs of the same shapes reuse them.",
    "first run": "Run the cell again to see it without compiling (compiled programs are reused "
    "for the same shapes); for a loop, profile its steps with --steps after a warm-up run.",
    "transfer": "Keep the data on the device between steps, and copy less (smaller dtypes, "
    "only what the step needs).",
    "sync": "Read values back once, after the loop, instead of in every step.",
    "device": "Speed now comes from the model itself: a larger batch, bf16, fused ops (or a "
    "faster chip).",
    "changing values": "Pass numbers that change between steps as tensors or arrays, not as "
    "Python numbers that the compiled graph bakes in.",
    "collective": "The chips wait on collectives (all-reduce and the like): overlap them with "
    "compute, shard so that less crosses the chips, or communicate less often.",
    "host offload": "The chip waits for copies between its memory and the host's (host "
    "offload): keep those arrays in HBM if they fit, or start the copies earlier so that "
    "they overlap compute.",
}


@dataclass(frozen=True)
class Headings:
    """Section titles that name the backend."""

    metrics: str = "Runtime, this cell only"
    fallbacks: str = "Ops that fell back to the CPU"


@dataclass(frozen=True)
class CaptureWords:
    """What a capture tells the user, in the backend's terms."""

    stop_trace: str = "the profiler's stop_trace()"
    """The call that stops a trace the user's code left running."""
    sync_label: str = "sync (--sync)"
    """The label of the block ``--sync`` adds at the cell's end: what the backend's sync runs."""
    no_steps: str = (
        "the cell neither synced nor ran a loop; mark steps yourself with xprof_magic.step()"
    )
    """Why ``--steps`` found no step, and how to mark them."""
    shrink: str = "To shrink a capture, profile fewer steps (a shorter loop in the cell)."
    """How to make the next capture smaller."""
    workers: str = "start a profiler server in each worker and capture it with %xprof capture"
    """How to capture worker processes the run does not hold."""


@dataclass(frozen=True)
class Vocabulary:
    """A backend's words, so that the analysis itself names no profiler.

    The defaults (:data:`NEUTRAL`) say nothing backend-specific and read no metric: they
    serve runs whose backend is unknown.
    """

    backend: str = ""
    metrics: MetricNames = field(default_factory=MetricNames)
    timeline: TimelineNames = field(default_factory=TimelineNames)
    advice: Advice = field(default_factory=Advice)
    headings: Headings = field(default_factory=Headings)
    capture: CaptureWords = field(default_factory=CaptureWords)


NEUTRAL = Vocabulary()
