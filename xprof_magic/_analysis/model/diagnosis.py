"""The diagnosis of a run, as plain frozen dataclasses: the step-time breakdown and the verdict.

Part of the summary's model (:mod:`.summary`), saved with it in ``xprof_magic_summary.json``;
:mod:`~xprof_magic._analysis.diagnosis.breakdown` measures the breakdown and
:mod:`~xprof_magic._analysis.diagnosis.verdict` draws the verdict from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "HIGHLY_INPUT",
    "HOST_OFFLOAD",
    "MIN_CELL_S",
    "MIN_SHARE",
    "MODERATELY_INPUT",
    "VERDICTS",
    "Breakdown",
    "Diagnosis",
    "StepBreakdown",
]

VERDICTS = ("input", "host", "compile", "transfer", "sync", "device", "collective", "unknown")
"""Every verdict a diagnosis can reach, the bottleneck's category (``unknown``: none)."""
HIGHLY_INPUT = 0.20
"""Input's share that is XProf's "highly input-bound": the verdict, over every other."""
MODERATELY_INPUT = 0.05
"""Input's share that is XProf's "moderately input-bound" (up to :data:`HIGHLY_INPUT`)."""
MIN_SHARE = 0.20
"""The least share a category other than input needs to be the verdict."""
MIN_CELL_S = 0.010
"""A cell whose breakdown covers less time has no bottleneck worth acting on."""
HOST_OFFLOAD = 0.5
"""The part of the transfer time that, as the chip's host-offload copies, is that cause."""


@dataclass(frozen=True)
class StepBreakdown:
    """One step: its number, its length, and its ``seconds`` per category of the
    :class:`Breakdown`'s ``categories``, in their order."""

    step: int
    total_s: float
    seconds: tuple[float, ...]


@dataclass(frozen=True)
class Breakdown:
    """Where the time went, for the cell (its window, ``cell_s`` long) and each step.

    ``categories`` names the columns of ``cell`` and of each step's ``seconds``: input, host,
    compile, transfer, sync, device, collective and idle (how each is measured:
    :mod:`xprof_magic._analysis.diagnosis.breakdown`). ``steps`` keeps the first 10,000 of
    ``step_count``. Empty when the timeline was not read.

    ``on_device``: per category, the seconds of ``cell`` that a chip's own XLA ops held
    (infeed as input, collectives, outfeed and host-offload copies as transfer), empty
    where the timeline has none (the CPU); ``offload_s``: of those, the host-offload copies'
    (a chip copying arrays between its memory and the host's). Summaries saved before these
    fields load with them empty.
    """

    categories: tuple[str, ...] = ()
    cell: tuple[float, ...] = ()
    cell_s: float = 0.0
    steps: tuple[StepBreakdown, ...] = ()
    step_count: int = 0
    on_device: tuple[float, ...] = ()
    offload_s: float = 0.0

    def seconds(self, category: str, of_steps: bool = True) -> float:
        """A category's seconds over the steps (``of_steps``, when there are any) or the cell."""
        if category not in self.categories:
            return 0.0
        at = self.categories.index(category)
        if of_steps and self.steps:
            return sum(s.seconds[at] for s in self.steps)
        return self.cell[at] if self.cell else 0.0

    def total_s(self, of_steps: bool = True) -> float:
        """The time the shares are of: the steps' (``of_steps``, when there are any), else the
        cell's thread's busy time (its window less idle)."""
        if of_steps and self.steps:
            return sum(s.total_s for s in self.steps)
        return self.cell_s - self.seconds("idle", of_steps=False)

    def share(self, category: str, of_steps: bool = True) -> float:
        """A category's share of :meth:`total_s` (0 when there is no time)."""
        total = self.total_s(of_steps)
        return self.seconds(category, of_steps) / total if total > 0 else 0.0


@dataclass(frozen=True)
class Diagnosis:
    """The summary's conclusion: what bounds the cell, where in its code, and what to do.

    What the diagnosis stage decides (:mod:`~xprof_magic._analysis.diagnosis.verdict`):

    - ``verdict``: one of :data:`VERDICTS`: the bottleneck's category (``device`` is the
      healthy case: the device computes most of the time);
    - ``share``: that category's share of step time (of the cell's time without steps);
    - ``shares``: every measured category's share of the same time, ``(category, share)`` in
      the breakdown's order (idle left out); empty when the cell was too short to diagnose;
    - ``warm_up``: how many first steps (that compiled) the shares leave out;
    - ``busy``: the device's busy share of the same time: compute and the chip's own waits
      (collectives, infeed, outfeed, host-offload copies), not ``device`` alone;
    - ``where``: the label path that carries most of it, and ``line``, its line in the cell
      (from 1; 0 when unknown); for ``device``, the block that launched the programs the
      device ran, not the one that waited for them, ending with the statement inside it that
      calls ``program`` when that is on another line (a loop's body);
    - ``program``: for ``device``, the program those launches name (``PjitFunction(train)``),
      ``""`` where the runtime names none;
    - ``cause``: for ``compile``, why it compiled: ``growing graph``, ``changing shapes``,
      ``warm-up``, ``first run`` or ``""``; for ``transfer``, ``host offload`` when most of
      it is the chip's own copies to and from host memory; ``shapes``: the input shapes
      seen, in order, when they changed; ``offloaded``: for ``host offload``, the chip's
      copy ops and the array each moves (``(op, HLO shape)``, longest copy first);
    - the fix: the vocabulary's advice for ``cause``, else for ``verdict``
      (:meth:`advice_keys`);
    - ``source``: what the breakdown was measured from: ``timeline``, or ``metadata`` while
      the timeline waits;
    - ``level``: the headline's level: ``warning`` for a bottleneck, ``info`` otherwise;
    - ``breakdown``: every category, for the cell and per step.

    Its words, which the render stage writes (:mod:`~xprof_magic._analysis.render.headline`)
    when the summary is built and saves with it: ``evidence``, the numbers behind the verdict
    as ``(name, value)`` text pairs; ``fix``, one sentence of advice in the backend's words;
    ``headline``, the verdict in words, the summary's first note after the device line.
    """

    verdict: str = "unknown"
    share: float | None = None
    where: tuple[str, ...] = ()
    line: int = 0
    evidence: tuple[tuple[str, str], ...] = ()
    fix: str = ""
    cause: str = ""
    shapes: tuple[str, ...] = ()
    headline: str = ""
    level: str = "info"
    breakdown: Breakdown = Breakdown()
    shares: tuple[tuple[str, float], ...] = ()
    warm_up: int = 0
    busy: float = 0.0
    offloaded: tuple[tuple[str, str], ...] = ()
    source: str = "timeline"
    program: str = ""

    def share_of(self, category: str) -> float:
        """``category``'s share (of :attr:`shares`; 0 when not measured)."""
        return dict(self.shares).get(category, 0.0)

    def basis(self) -> Breakdown:
        """The breakdown the shares are of: the steps after the :attr:`warm_up` ones."""
        if not self.warm_up:
            return self.breakdown
        return replace(self.breakdown, steps=self.breakdown.steps[self.warm_up :])

    def advice_keys(self) -> tuple[str, ...]:
        """Where the fix is found in the vocabulary's advice, in order: the cause, the verdict
        (none for ``unknown``)."""
        if self.verdict == "unknown":
            return ()
        return (self.cause, self.verdict) if self.cause else (self.verdict,)
