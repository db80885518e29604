"""What a host event is, by its name and its stats: the rules the timeline pass applies.

Only XLA's own names are written here, which every backend built on XLA shares; the
backend's own (its vocabulary's ``runtime_names``, ``runtime_prefixes``, ``compile_events``)
come from the caller. Each rule runs once per distinct name of a line (:func:`name_flags`),
not per event.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline.line_arrays import Ints, Line

__all__ = [
    "EXECUTION_ENDS",
    "NO_RUNTIME",
    "XLA_CODEGEN",
    "XLA_CPU_CLIENT_GROUPS",
    "XLA_RUNTIME_NAMES",
    "XLA_RUNTIME_POOLS",
    "XLA_RUNTIME_PREFIXES",
    "Runtime",
    "blocks_host",
    "is_copy",
    "launched_program",
    "name_flags",
    "runtime_name",
    "step_nums",
    "thread_group",
]


class Runtime(NamedTuple):
    """A backend's own host events: its vocabulary's names and name prefixes.

    From its :class:`~xprof_magic._backends.TimelineNames`: exact names and name prefixes; of
    those, the waits for the device, the step ends, the prefixes of program launches, and the
    phases of a compilation that are not one (compile time, not a compile).
    """

    names: frozenset[str]
    prefixes: tuple[str, ...]
    waits: frozenset[str] = frozenset()
    step_ends: frozenset[str] = frozenset()
    launches: tuple[str, ...] = ()
    compile_phases: frozenset[str] = frozenset()


NO_RUNTIME = Runtime(frozenset(), ())

XLA_RUNTIME_PREFIXES = ("Wait for ", "ThreadpoolListener", "end: ")
"""Host events of XLA's PjRt runtime and thread pools, under any backend built on it."""
XLA_RUNTIME_NAMES = frozenset({"MemoryAllocation", "MemoryDeallocation", "<UNKNOWN>"})
"""Host events of XLA's allocators and of the device tracer itself, on any thread."""
XLA_RUNTIME_POOLS = (
    "tf_",
    "pjrt",
    "py_xla_",
    "tfrt-",
    "switchto-",
    "EventFDAsyncWorker",
    "Host Threads",
)
"""Name prefixes of the runtime's own threads: TSL's pools (``tf_*``), PjRt's workers
(``pjrt_async_work_runner/…`` stages host↔device copies on a GPU, ``pjrt-tpu-tasks/…`` on a
TPU), JAX's execute and callback threads (``py_xla_execute/…``, ``py_xla_callback/…``), TFRT's
queues and a TPU host's fibers (``switchto-…``, ``EventFDAsyncWorker/…``), and the GPU
tracer's own threads (``Host Threads/…``). Seen on torch_xla and JAX CPU captures, a TPU v6e
capture and H200 captures; every other thread is the user's (Python)."""
XLA_CPU_CLIENT_GROUPS = ("tf_XLAPjRtCpuClient", "tf_XLAEigen")
"""The threads of XLA's CPU client that run the compiled XLA ops."""
XLA_CODEGEN = "tf_xla-cpu-codegen"
EXECUTION_ENDS = frozenset({"ThunkExecutor::Execute (wait for completion)"})
"""The mark XLA's CPU client leaves on its threads where one execution of a program ends
(one per execution, whatever its ops: a jitted step's hundreds or an eager op's one)."""


def is_copy(name: str) -> bool:
    """A host-device copy: XLA's ``H2D``/``D2H`` dispatches, a client's ``Transfer*``."""
    return "H2D" in name or "D2H" in name or "transfer" in name.lower()


def blocks_host(name: str) -> bool:
    """The host waits for the device: XLA's ``Wait for …``, a runtime's barrier."""
    lower = name.lower()
    return "wait" in lower or "barrier" in lower


def launched_program(name: str, launches: tuple[str, ...]) -> str:
    """The program a launch event ``name`` names.

    The event's own name where its prefix ends with ``(`` (``PjitFunction(train)``), else
    ``""``.
    """
    named = any(p.endswith("(") and name.startswith(p) for p in launches)
    return name if named else ""


def name_flags(
    names: list[str],
    label_names: frozenset[str],
    runtime: Runtime,
    compile_events: frozenset[str],
) -> dict[str, NDArray[np.bool_]]:
    """Per distinct name: what the pass asks of it, computed once per line."""
    more, prefixes = runtime.names, runtime.prefixes
    return {
        "end": np.array([n.startswith("end: ") for n in names], bool),
        "execution_end": np.array([n in EXECUTION_ENDS for n in names], bool),
        "compiles": np.array([n in compile_events for n in names], bool),
        "compile": np.array(
            [n in compile_events or n in runtime.compile_phases for n in names], bool
        ),
        "runtime": np.array(
            [runtime_name(n) or n in more or n.startswith(prefixes) for n in names], bool
        ),
        "label": np.array([n in label_names for n in names], bool),
        "wait": np.array(["wait" in n.lower() for n in names], bool),
        "blocks": np.array([blocks_host(n) or n in runtime.waits for n in names], bool),
        "copy": np.array([is_copy(n) for n in names], bool),
        "step_end": np.array([n in runtime.step_ends for n in names], bool),
        "read": np.array([n in runtime.waits for n in names], bool),
        "barrier": np.array(["barrier" in n.lower() for n in names], bool),
        "launch": np.array(
            [bool(runtime.launches) and n.startswith(runtime.launches) for n in names], bool
        ),
    }


def step_nums(line: Line, events: Ints) -> list[int | None]:
    """Each of those events' ``step_num`` stat as a number.

    A number: the event is a step; else None.
    """
    return line.ints(events, "step_num")


def thread_group(line_name: str) -> str:
    """The kind of thread a line is: its runtime pool's name, else ``python``.

    The pool's name (the line's name up to ``/``) for the runtime's own threads
    (:data:`XLA_RUNTIME_POOLS`), else ``python``: the user's.
    """
    if not line_name.startswith(XLA_RUNTIME_POOLS):
        return "python"
    return line_name.split("/", 1)[0]


def runtime_name(name: str) -> bool:
    """Whether ``name`` is a host event of XLA's runtime.

    C++-qualified, one of :data:`XLA_RUNTIME_PREFIXES` or :data:`XLA_RUNTIME_NAMES`, or a
    host↔device copy of its own (``H2D``/``D2H`` in the name: ``D2H Copy From Staging
    Buffer``, ``H2D Dispatch``).
    """
    return (
        "::" in name
        or name.startswith(XLA_RUNTIME_PREFIXES)
        or name in XLA_RUNTIME_NAMES
        or "H2D" in name
        or "D2H" in name
    )
