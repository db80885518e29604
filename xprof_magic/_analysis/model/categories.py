"""The bottleneck's categories and causes: the one table the diagnosis, charts and renderers read.

A step's time is split into the :data:`Category` values, in :data:`BREAKDOWN`'s order (the order of
every chart, bottom to top in a bar and left to right in its legend); a verdict is one of them but
``idle``, or ``memory`` (the cell ran out of device memory) or ``unknown`` (:data:`Verdict`); a
cause says why (:data:`Cause`). Each category has one record, :class:`Kind`: its title, what its
time is, what a fix removes, its colour, and how cheap its fix is. The fix itself is the backend's
vocabulary's advice, under the cause's key, else the category's
(:meth:`~xprof_magic._analysis.model.diagnosis.Diagnosis.advice_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast, get_args

__all__ = [
    "BREAKDOWN",
    "CHEAPEST_FIRST",
    "FEW_CORES_CAUSES",
    "KIND",
    "OWN_CAUSES",
    "VERDICTS",
    "WORDED_CAUSES",
    "Category",
    "Cause",
    "Kind",
    "OwnCause",
    "Verdict",
    "as_cause",
    "as_verdict",
]

Category = Literal["input", "host", "compile", "transfer", "sync", "device", "collective", "idle"]
Verdict = Literal[
    "input", "host", "compile", "transfer", "sync", "device", "collective", "memory", "unknown"
]
Cause = Literal[
    "",
    # compile
    "growing graph",
    "changing shapes",
    "changing values",
    "eager shapes",
    "warm-up",
    "first run",
    # transfer
    "host offload",
    # input
    "making batches",
    "device loader",
    "few cores",
    "busy workers",
    # host
    "eager",
    "compiled step",
    "own code",
    "printing",
]

FEW_CORES_CAUSES = ("few cores", "busy workers")
"""The input causes whose fix makes the batches cheaper, or once, because the machine has too
few cores for more workers: the whole wait is their gain, which carries the cores
(:attr:`Gain.cores`) as why."""


@dataclass(frozen=True)
class Kind:
    """One category's record: its title, words, colour and how cheap its fix is.

    ``title``: a verdict's ("Input-bound"; "" for ``idle``); ``what`` its time is in a headline
    ("waits for the next batch"); ``noun`` in a list of shares ("transfers 34%"); ``without``: the
    thing a fix removes ("without the input wait"); ``colour`` in every chart; ``cheapest``: its
    fix's rank, cheapest first (None: no fix removes it).
    """

    name: Category
    title: str
    what: str
    noun: str
    without: str
    colour: str
    cheapest: int | None


GREY = "rgba(127,127,127,0.35)"

CATEGORIES = (
    Kind(
        "input", "Input-bound", "waits for the next batch", "input", "the input wait",
        "#e15759", 0,
    ),
    Kind(
        "host", "Host-bound", "is Python and graph building on the host", "host",
        "the host's Python and graph building", "#f28e2b", 4,
    ),
    Kind(
        "compile", "Compile-bound", "is compilation", "compilation", "the compilations",
        "#edc948", 3,
    ),
    Kind(
        "transfer", "Transfer-bound", "copies data between host and device", "transfers",
        "the transfers", "#b07aa1", 2,
    ),
    Kind(
        "sync", "Sync-bound", "waits for the device in mid-step", "sync", "the syncs",
        "#9c755f", 1,
    ),
    Kind(
        "device", "Device-bound", "runs on the device", "device", "the device's own work",
        "#59a14f", 6,
    ),
    Kind(
        "collective", "Collective-bound",
        "waits on collectives between the chips (all-reduce and the like)", "collectives",
        "the collectives", "#76b7b2", 5,
    ),
    Kind("idle", "", "leaves the device idle", "idle", "the idle time", GREY, None),
)  # fmt: skip
"""Every category, in the breakdown's order.

The ranks of their fixes, cheapest first: a loader's option or a line the loop can drop or
move (workers or prefetch for the input; a sync, a copy), then how the step is compiled
(fixed shapes, a sync per step), then the step's own code (fewer ops, a compiled step; fewer
collectives), the device's own compute last (the model itself). Input first also keeps
XProf's rule that a step waiting 20% for its input is input-bound."""
KIND: dict[str, Kind] = {kind.name: kind for kind in CATEGORIES}
BREAKDOWN: tuple[Category, ...] = tuple(kind.name for kind in CATEGORIES)
CHEAPEST_FIRST: tuple[Category, ...] = tuple(
    kind.name
    for kind in sorted(CATEGORIES, key=lambda k: -1 if k.cheapest is None else k.cheapest)
    if kind.cheapest is not None
)
VERDICTS: tuple[Verdict, ...] = (
    "input", "host", "compile", "transfer", "sync", "device", "collective", "memory", "unknown"
)  # fmt: skip
"""Every verdict a diagnosis can reach (``unknown``: none; ``memory``: the cell ran out of
device memory)."""


@dataclass(frozen=True)
class OwnCause:
    """A cause that is the user's own code rather than the framework's.

    Its category, ``what`` its time is in a headline, and what removing it removes.
    """

    category: Category
    what: str
    removed: str


OWN_CAUSES: dict[str, OwnCause] = {
    "making batches": OwnCause(
        "input",
        "is making batches in your own Python and NumPy on the host (the input pipeline), "
        "which runs no framework op",
        "making those batches on the step's path",
    ),
    "own code": OwnCause(
        "host",
        "is your own Python and NumPy on the host, which runs no framework op",
        "that Python",
    ),
    "printing": OwnCause(
        "host",
        "is printing on the host (each print of a device value waits for it and reads it back)",
        "the prints",
    ),
}
"""The causes whose time is the user's own code (:mod:`..diagnosis.own`)."""

WORDED_CAUSES: dict[str, OwnCause] = {
    **OWN_CAUSES,
    "compiled step": OwnCause(
        "host",
        "is Python and the framework's dispatch around the compiled step on the host",
        "the host's Python and dispatch",
    ),
}
"""The causes whose time a headline names in words of their own, not their category's: the
user's own code, and the host's time around a step that already runs as one compiled call
(no graph is built there)."""


def as_verdict(value: str) -> Verdict:
    """``value`` as a :data:`Verdict`; ``ValueError`` for anything else."""
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    raise ValueError(f"{value!r} is not a verdict ({', '.join(VERDICTS)})")


def as_cause(value: str) -> Cause:
    """``value`` as a :data:`Cause`; ``ValueError`` for anything else."""
    if value not in get_args(Cause):
        raise ValueError(f"{value!r} is not a cause ({', '.join(get_args(Cause))})")
    return cast("Cause", value)
