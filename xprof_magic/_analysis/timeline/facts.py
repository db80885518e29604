"""What the timeline reader finds in one host's timeline: plain facts, no protobuf, no arrays.

:func:`.trace.read_trace` fills a :class:`TraceFacts`; the later stages (the summary's
build, its labels and steps, device and hosts; the diagnosis's breakdown) read it and never
the file. Kept apart from the reader so that those modules import the facts, not the pass;
:func:`device_side` too, the one rule that names a chip's waiting ops, which the reader
applies to the timeline and the diagnosis to the summary's table of device ops.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xprof_magic._analysis.timeline.programs import Program

__all__ = [
    "CATEGORIES",
    "COLLECTIVE",
    "COMPILE",
    "DEVICE_SIDE",
    "EXECUTION",
    "FRAMEWORK",
    "HOST_MEMORY_SPACE",
    "INLINE",
    "LABEL",
    "LAUNCH",
    "OFFLOAD",
    "READ",
    "RUNTIME",
    "STAGING",
    "STEP",
    "STEP_END",
    "TRACE",
    "XLA_OP",
    "Block",
    "GroupFacts",
    "ReadAborted",
    "TraceFacts",
    "device_side",
    "execution_key",
]

LABEL, TRACE, STEP = "label", "trace", "step"
RUNTIME, COMPILE, XLA_OP = "runtime", "compile", "XLA op"
CATEGORIES = (LABEL, TRACE, STEP, RUNTIME, COMPILE, XLA_OP)
"""What an event is, in this order: the reader keeps each event's category as its index."""
OFFLOAD = "device:offload"
"""The span key of a chip's host-offload copies (arrays kept in host memory)."""
STAGING = "staging"
"""The span key of the host's side of copies off the Python thread (``H2D Dispatch`` on
PjRt's workers, or on the CPU client's threads): also ``transfer``, and kept apart as work
a launch set going, which the step that launched it waits for
(:func:`~xprof_magic._analysis.summary.step_spans.launched_work`)."""
READ = "read"
"""The span key of the runtime's reads of a device value on the Python threads (the
vocabulary's ``waits``: JAX's ``np.asarray(jax.Array)`` behind ``float(x)``): after one,
everything launched before it began has run. Not torch_xla's ``TensorCollectionBarrier``:
its device runs on for tens of ms after it (seen on the CPU client)."""
EXECUTION = "execution:"
"""The span keys of the device's executions, one span each, where the timeline shows each
one's end, by program: this, then the program's module (``jit_train_step``; "" where not
known; :func:`execution_key`). The XLA CPU client marks the end of each
(:data:`~.events.EXECUTION_ENDS`); a chip's ``XLA Modules`` are executions. The device runs
launches in that order, so each launch's work ends where its program's next execution does
(:func:`~xprof_magic._analysis.summary.step_spans.launched_work`)."""


def execution_key(module: str) -> str:
    """The span key of ``module``'s executions (:data:`EXECUTION`)."""
    return EXECUTION + module


INLINE = "inline"
"""The span key of the XLA ops the CPU client ran on the Python thread itself, inside the
launch that asked for them (JAX's small programs): done when that launch returns."""
FRAMEWORK = "framework"
"""The span key of the runtime's own events on the Python threads (the vocabulary's runtime
names: JAX's ``PjitFunction(…)`` dispatch, a sync, a copy): the framework's time there, as
against the user's own Python (:mod:`~xprof_magic._analysis.diagnosis.own`)."""
STEP_END = "step end"
"""The span key of the runtime's step ends on the Python threads (a sync, whole)."""
LAUNCH = "launch:"
"""The span keys of program launches on the Python threads: this, then the program's name
("" where the launch names none). Each span runs from when the launch launched (after the
waits and compilation inside its event) to the event's end."""
DEVICE_SIDE = {
    "device:input": "input",
    "collective": "collective",
    "device:transfer": "transfer",
    OFFLOAD: "transfer",
}
"""The span keys of a chip's XLA ops that wait rather than compute (infeed; collectives;
outfeed and host send/recv; host-offload copies: :func:`device_side`), and the
breakdown's column of each."""
COLLECTIVE = re.compile(
    "all-reduce|all-gather|reduce-scatter|all-to-all|collective|send|recv|megascale"
)
"""The words of an ``hlo_category`` that make its op a collective: XLA's collective opcodes in any
form (``-start``, ``-done``, ``… fusion``, ``ragged-…``; ``collective`` covers
``collective-permute``/``-broadcast``), chip-to-chip ``send``/``recv``, Megascale's (DCN)."""
HOST_MEMORY_SPACE = "S(5)"
"""XLA's host memory space (``kHostMemorySpace``) in a layout: an array offloaded to the host."""
_OPCODE = re.compile(r" = .*? ([a-z][a-z0-9-]*)\(")


def device_side(category: str | None, text: str) -> str:
    """The span key (:data:`DEVICE_SIDE`) of a chip's XLA op that waits, else ``""``.

    Infeed is input; outfeed and ``host send``/``recv`` a transfer; a copy
    (``copy-start``/``copy-done``) with the host memory space (:data:`HOST_MEMORY_SPACE`)
    anywhere in its shapes a host-offload copy (``device:offload``); a category holding a word
    of :data:`COLLECTIVE` a collective. An op that computes gets ``""``.

    Args:
        category: the op's ``hlo_category`` (None: the opcode in its HLO ``text``).
        text: the op's HLO text and shape.
    """
    if category is None:
        match = _OPCODE.search(text)
        category = match.group(1) if match else ""
    kind = category.lower()
    if "infeed" in kind:
        return "device:input"
    if "outfeed" in kind or kind.startswith("host "):
        return "device:transfer"
    if kind.startswith("copy"):
        return OFFLOAD if HOST_MEMORY_SPACE in text else ""
    if COLLECTIVE.search(kind):
        return "collective"
    return ""


class ReadAborted(Exception):
    """Reading the timeline would run past its deadline."""


@dataclass
class Block:
    """One run of an annotation (label, user trace or step) on a Python thread."""

    name: str
    kind: str
    start: float
    end: float
    parent: int
    line: str
    step_num: int | None = None
    compiles: int = 0
    compile_ns: float = 0.0
    holds_compile: bool = False
    continued: bool = False
    """A label block reopened after a step boundary cut it (``continued=1``): the same entry."""


@dataclass
class GroupFacts:
    threads: int = 0
    busy_ns: float = 0.0


@dataclass
class TraceFacts:
    """Everything the summary takes from one host's timeline."""

    host: str
    profile_start_ns: int | None = None
    window: tuple[float, float] | None = None
    blocks: list[Block] = field(default_factory=list)
    compile_count: int = 0
    compile_ns: float = 0.0
    compiles_outside: int = 0
    host_ops: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    device_ops: dict[str, list[float]] = field(default_factory=dict)
    compile_ops: dict[str, list[float]] = field(default_factory=dict)
    groups: dict[str, GroupFacts] = field(default_factory=dict)
    devices: list[tuple[str, float]] = field(default_factory=list)
    """Each device plane's name and busy time (ns): the union of its lines' events (a GPU's
    streams, a TPU's modules), never their sum."""
    device_names: dict[str, str] = field(default_factory=dict)
    """Each device plane's device as the plane names it (``NVIDIA H200``, ``TPU v6 Lite``)."""
    device_copy_ns: dict[str, float] = field(default_factory=dict)
    """Each device plane's time copying between host and device memory (ns, the union of
    its ``MemcpyH2D``/``MemcpyD2H``), where its plane says which events are copies (a GPU's
    copy streams)."""
    cpu_xla_busy_ns: float = 0.0
    has_cpu_client: bool = False
    events: int = 0
    planes: list[str] = field(default_factory=list)
    spans: dict[str, list[tuple[Sequence[float], Sequence[float]]]] = field(default_factory=dict)
    """Start and end times (ns) of what the step breakdown
    (:mod:`~xprof_magic._analysis.diagnosis.breakdown`) measures, by its category:
    ``compile``, ``transfer`` and ``sync`` on the Python threads, ``device`` (executions,
    launch to completion) on the XLA CPU client's threads or a chip's modules, and the keys
    of :data:`DEVICE_SIDE`, a chip's XLA ops that wait inside its modules; also, on the
    Python threads, the step ends (:data:`STEP_END`), the reads of device values
    (:data:`READ`) and each program's launches (:data:`LAUNCH` + its name), which say whose
    the device's time is. The reader keeps them as ``array('d')``, 8 bytes a time
    against a Python float's 32 in a list (a 100 MB capture keeps about a million)."""
    programs_ran: dict[str, float] = field(default_factory=dict)
    """The time (ns) of each program that ran, by XProf's name for it (``<module>(<id>)``):
    the XLA ops' on the CPU, the modules' on a chip."""
    memory: dict[str, list[tuple[list[float], list[float], list[float]]]] = field(
        default_factory=dict
    )
    """By allocator (``GPU_0_bfc``, ``xla_gpu_host_bfc``): chunks of its events' times (ns),
    the bytes in use after each and the bytes it could hold then (:mod:`.memory`)."""
    launch_ids: list[tuple[list[float], list[float]]] = field(default_factory=list)
    """The host's launches of device work that name it: each one's ``correlation_id`` and
    start (ns): a GPU's CUDA calls (``cuGraphLaunch``, a kernel launch, ``MemcpyH2D``)."""
    device_ids: list[tuple[list[float], list[float]]] = field(default_factory=list)
    """The first device's events that name their launch: each one's ``correlation_id`` and
    end (ns); with :attr:`launch_ids`, which step's launch each piece of device work was."""
    programs: list[Program] = field(default_factory=list)
    """The compiled programs the timeline holds that can tell a compile's cause: those its
    compile events compiled (the newest, one per event) and, per module name, the one
    compiled before them (:mod:`.programs`); serialized, decoded only when needed."""
    derived: dict[tuple[Any, ...], Any] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    """What later stages work out from these facts, kept by the first to ask (the
    summary's steps and the diagnosis's breakdown need the same step spans); not part of
    the facts, and a copy made with ``dataclasses.replace`` starts without it."""
