"""The diagnosis of a run, as plain frozen dataclasses: the step-time breakdown and the verdict.

Part of the summary's model (:mod:`.summary`), saved with it in ``xprof_magic_summary.json``;
:mod:`~xprof_magic._analysis.diagnosis.breakdown` measures the breakdown and
:mod:`~xprof_magic._analysis.diagnosis.verdict` draws the verdict from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xprof_magic._analysis.model.categories import CHEAPEST_FIRST, VERDICTS, Cause, Verdict

__all__ = [
    "APART_MOST",
    "APART_RATIO",
    "CHEAPEST_FIRST",
    "HIGHLY_INPUT",
    "HOST_OFFLOAD",
    "MIN_CELL_S",
    "MIN_SHARE",
    "MIXED_LEADER",
    "MIXED_MARGIN",
    "MIXED_NAMED",
    "MODERATELY_INPUT",
    "OUTSIDE_SHARE",
    "STEPS_SHARE",
    "VERDICTS",
    "Aside",
    "Breakdown",
    "Diagnosis",
    "Gain",
    "HostLooks",
    "IdleTime",
    "ReadBack",
    "StepBreakdown",
]

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
MIXED_LEADER = 0.50
"""The share the largest category needs to be the step's single bottleneck (most of it)."""
MIXED_MARGIN = 0.10
"""A runner-up within this many points of the largest category makes the step mixed: a
step's shares move by a few points between two runs of the same cell on a busy machine."""
MIXED_NAMED = 0.15
"""The least share a category of a mixed step needs to be named as the one to remove."""
APART_RATIO = 3.0
"""A step this many times the median step (of those after the warm-up) is unlike the others:
the verdict describes the steady steps and names it apart, when such steps are at most a
quarter of them."""
APART_MOST = 0.5
"""The share of the steps' time that two or more steps :data:`APART_RATIO` times their median
must stay under to be named apart: past it they are the loop's cost come round again, not
exceptions (one such step is named apart however long: a fresh program's first run)."""
STEPS_SHARE = 0.5
"""The least share of the cell's busy time its steps need for the verdict to be about them;
below it the verdict is about the cell, whose time is mostly outside its loop."""
OUTSIDE_SHARE = 0.2
"""The share of the cell's time a statement outside the steps needs to be named beside a
verdict about the steps."""


@dataclass(frozen=True)
class Aside:
    """Time the verdict leaves out, named so the user knows where it went.

    A step unlike the others (``step``: its position among the breakdown's steps) or a statement of
    the cell outside its steps (``path``, ``line``), with its ``seconds``, the category that held
    most of them and that category's ``held_s``.
    """

    seconds: float
    category: str
    held_s: float
    step: int = -1
    path: tuple[str, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class StepBreakdown:
    """One step: its number, its length, and its seconds per category.

    ``seconds`` holds one figure per category of the :class:`Breakdown`'s ``categories``, in their
    order; ``busy_s``: the seconds the device was busy in it, whichever category holds them (0 in
    summaries saved before it).
    """

    step: int
    total_s: float
    seconds: tuple[float, ...]
    busy_s: float = 0.0
    made_s: float = 0.0


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
    (a chip copying arrays between its memory and the host's); ``busy_s``: the seconds of
    the cell's window the device was busy, whichever category holds them. Summaries saved
    before these fields load with them empty.

    ``made_s`` (a step's and the cell's): of the ``input`` seconds, those the host spent
    making batches in the user's own Python and NumPy (inside the step or before the loop,
    sampled: :mod:`~xprof_magic._analysis.diagnosis.batches`) rather than waiting on a
    loader's ``next()``.
    """

    categories: tuple[str, ...] = ()
    cell: tuple[float, ...] = ()
    cell_s: float = 0.0
    steps: tuple[StepBreakdown, ...] = ()
    step_count: int = 0
    on_device: tuple[float, ...] = ()
    offload_s: float = 0.0
    busy_s: float = 0.0
    outside: tuple[Aside, ...] = ()
    made_s: float = 0.0

    def made(self, of_steps: bool = True) -> float:
        """The ``input`` seconds spent making batches in the user's own Python (``made_s``).

        Over the steps (``of_steps``, when there are any) or the cell.
        """
        if of_steps and self.steps:
            return sum(s.made_s for s in self.steps)
        return self.made_s

    def seconds(self, category: str, of_steps: bool = True) -> float:
        """A category's seconds over the steps (``of_steps``, when there are any) or the cell."""
        if category not in self.categories:
            return 0.0
        at = self.categories.index(category)
        if of_steps and self.steps:
            return sum(s.seconds[at] for s in self.steps)
        return self.cell[at] if self.cell else 0.0

    def total_s(self, of_steps: bool = True) -> float:
        """The time the shares are of: the steps' (``of_steps``, if there are any), else the cell's.

        The cell's is its thread's busy time (its window less idle).
        """
        if of_steps and self.steps:
            return sum(s.total_s for s in self.steps)
        return self.cell_s - self.seconds("idle", of_steps=False)

    def share(self, category: str, of_steps: bool = True) -> float:
        """A category's share of :meth:`total_s` (0 when there is no time)."""
        total = self.total_s(of_steps)
        return self.seconds(category, of_steps) / total if total > 0 else 0.0


@dataclass(frozen=True)
class Gain:
    """What a fix would gain: a step's time now and without one category's time.

    ``step_s`` is the mean step (the cell's busy time without steps) the shares are of;
    ``without_s`` the mean step with ``category``'s seconds taken out, never below the
    device's own busy time in it (host work overlaps the device on a lazy or asynchronous
    backend: a step cannot be shorter than the device's work in it). For ``device``, the
    healthy case, ``without_s`` is the step with everything but the device's own time
    taken out: the most that any fix outside the model would gain.
    (:mod:`~xprof_magic._analysis.diagnosis.gain` measures it.)
    """

    category: str
    step_s: float
    without_s: float
    cores: int = 0
    """The machine's cores, where they bound ``without_s`` (or, for causes ``few cores`` and
    ``busy workers``, where they are why the fix is to make the batches cheaper): a fix that
    moves the work to other
    cores (DataLoader workers) still needs it done, and the step's own host work too, on
    these (0: they did not bound it)."""

    @property
    def speedup(self) -> float:
        """How many times faster a step would be (infinite when nothing would be left)."""
        return self.step_s / self.without_s if self.without_s > 0 else float("inf")


@dataclass(frozen=True)
class HostLooks:
    """Host time sampled in the verdict's steps that is ``whose``: the user's or the framework's.

    ``whose`` is ``own``, the user's own Python and NumPy (no framework op), or ``framework``, the
    framework's dispatch and graph building (:mod:`~xprof_magic._analysis.diagnosis.own`). It holds
    that time's share of the verdict's time and of the host's, the cell ``line`` (and its
    ``statement``) holding most of it, the share of the verdict's time the device sat idle
    meanwhile, and whether that line makes the step's data (``batches``).
    """

    share: float
    of_host: float
    line: int
    statement: str
    idle: float
    batches: bool = False
    whose: str = "own"


@dataclass(frozen=True)
class IdleTime:
    """The device's idle time in the verdict's steps, said by what the host was doing meanwhile.

    In the cell's time when it has no steps; found by :mod:`~xprof_magic._analysis.diagnosis.idle`.
    ``share``: the idle part of the time the shares are of; ``during``: each thing the host did
    while the device idled, largest first, as
    ``(what, its share of the same time, the cell line holding it, 0: unknown)``. ``what`` is one of
    ``making batches`` (the user's Python and NumPy making the step's data), ``loader`` (waiting on
    the data iterator), ``own code`` (the user's other Python), ``framework`` (dispatch and graph
    building), ``sync``, ``transfer``, ``compile``, or ``host`` (the host's time, not sampled).
    """

    share: float
    during: tuple[tuple[str, float, int], ...] = ()


@dataclass(frozen=True)
class ReadBack:
    """The steps read a value back from the device (``float(loss)``, ``np.asarray(x)``).

    ``steps`` of ``of`` steps did, ``reads`` times in all, at ``path`` (the loop) and ``line`` (the
    statement that reads, 0: unknown); the host waits for the device in each and launches nothing
    meanwhile, so the device idles between steps. ``step_s`` is their mean step now, ``without_s``
    with the host's work overlapping the device's as it would without the reads.
    ``shared``: the device was this machine's CPU, whose cores the host's work shares, so that
    overlap may not come (a torch_xla loop on the CPU ran slower without its reads): the
    estimate is an accelerator's, not this machine's.
    """

    steps: int
    of: int
    reads: int
    path: tuple[str, ...]
    line: int
    call: str
    step_s: float
    without_s: float
    shared: bool = False


@dataclass(frozen=True)
class Diagnosis:
    """The summary's conclusion: what bounds the cell, where in its code, and what to do.

    What the diagnosis stage decides (:mod:`~xprof_magic._analysis.diagnosis.verdict`):

    - ``verdict``: one of :data:`VERDICTS`: the bottleneck's category (``device`` is the
      healthy case: the device's own compute bounds the step); for a ``mixed`` step, the
      one of its large categories that is cheapest to remove (:data:`CHEAPEST_FIRST`);
    - ``mixed``: no single bottleneck: the largest category holds less than
      :data:`MIXED_LEADER` of the step, or the runner-up is within :data:`MIXED_MARGIN` of
      it; ``runner_up``: the largest category besides ``verdict`` (``""``: none);
    - ``gain``: what removing the verdict's time would leave of a step (:class:`Gain`; for
      ``unknown``, of the largest category's); None where nothing was measured;
    - ``share``: that category's share of step time (of the cell's time without steps);
    - ``shares``: every measured category's share of the same time, ``(category, share)`` in
      the breakdown's order (idle left out); empty when the cell was too short to diagnose;
    - ``warm_up``: how many first steps (that compiled) the shares leave out;
    - ``apart``: the steps unlike the others that the shares also leave out, and the
      statements outside the steps that hold much of the cell's time (:class:`Aside`);
    - ``scope``: what the shares are of: ``steps`` (the steady steps), or ``cell`` when the
      steps hold less than :data:`STEPS_SHARE` of the cell's busy time;
    - ``read_back``: the steps read values back from the device each time (:class:`ReadBack`),
      None when they don't;
    - ``busy``: the device's busy share of the same time: compute and the chip's own waits
      (collectives, infeed, outfeed, host-offload copies), not ``device`` alone;
    - ``idle``: the device's idle time in the same time, by what the host did meanwhile
      (:class:`IdleTime`), None under a tenth;
    - ``own``, ``framework``: the sampled host time at the verdict's line that is the user's
      own Python (batches it makes, for ``making batches``) or the framework's
      (:class:`HostLooks`);
    - ``where``: the label path that carries most of it, and ``line``, its line in the cell
      (from 1; 0 when unknown); for ``device``, the block that launched the programs the
      device ran, not the one that waited for them, ending with the statement inside it that
      calls ``program`` when that is on another line (a loop's body);
    - ``program``: for ``device``, the program those launches name (``PjitFunction(train)``),
      ``""`` where the runtime names none;
    - ``cause``: for ``compile``, why it compiled: ``growing graph``, ``changing shapes``,
      ``changing values`` (Python numbers baked into the compiled programs), ``warm-up``,
      ``first run`` or ``""``; for ``transfer``, ``host offload`` when most of it is the
      chip's own copies to and from host memory; for ``input``, ``making batches`` when
      most of it is the user's own Python making them (not a wait on a loader); for
      ``host``, ``eager``, ``compiled step``, ``own code`` or ``printing``; ``shapes``:
      the input shapes seen, in order, when they changed; ``changed``: what changed between
      the compilations, each input once, ``(name, its shapes or values in order)`` (the
      name is a dict batch's key, ``[i]`` a tuple's part, ``""`` for a lone tensor or a
      compiled program's input), and
      ``changed_in`` where that was seen: ``items`` (the loop's), ``program inputs``,
      ``program outputs`` (a tensor made inside the step) or ``program constants``;
      ``offloaded``: for ``host offload``, the chip's copy ops and the array each moves
      (``(op, HLO shape)``, longest copy first);
    - the fix: the vocabulary's advice for ``cause``, else for ``verdict``
      (:meth:`advice_keys`);
    - ``source``: what the breakdown was measured from: ``timeline``, or ``metadata`` while
      the timeline waits;
    - ``level``: the headline's level: ``warning`` for a bottleneck, ``info`` otherwise;
    - ``breakdown``: every category, for the cell and per step;
    - ``input_cause``: the cause whose fix a wait for the next batch takes, whatever the
      verdict (a moderate wait's note takes it too): ``device loader`` where the framework's own
      loader fed the loop; on a machine of 2 cores or fewer, ``few cores`` where the loop's own
      thread made the batches, ``busy workers`` where its loader's workers kept the cores busy;
      ``""`` otherwise.

    Its words (the headline, the fix in the backend's words, the evidence) are the render
    stage's, made when the summary is shown (:func:`~xprof_magic._analysis.render.headline.said`).
    """

    verdict: Verdict = "unknown"
    share: float | None = None
    where: tuple[str, ...] = ()
    line: int = 0
    cause: Cause = ""
    shapes: tuple[str, ...] = ()
    level: str = "info"
    breakdown: Breakdown = Breakdown()
    shares: tuple[tuple[str, float], ...] = ()
    warm_up: int = 0
    busy: float = 0.0
    offloaded: tuple[tuple[str, str], ...] = ()
    source: str = "timeline"
    program: str = ""
    mixed: bool = False
    runner_up: str = ""
    gain: Gain | None = None
    changed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    changed_in: str = ""
    apart: tuple[Aside, ...] = ()
    scope: str = "steps"
    read_back: ReadBack | None = None
    own: HostLooks | None = None
    framework: HostLooks | None = None
    idle: IdleTime | None = None
    input_cause: Cause = ""

    def apart_steps(self) -> frozenset[int]:
        """The positions of the steps unlike the others (:attr:`apart`)."""
        return frozenset(a.step for a in self.apart if a.step >= 0)

    def steady(self) -> tuple[int, ...]:
        """The positions of the steps the shares are of: after the warm-up, not apart.

        None when the verdict is about the cell.
        """
        if self.scope == "cell":
            return ()
        apart = self.apart_steps()
        count = len(self.breakdown.steps)
        return tuple(i for i in range(self.warm_up, count) if i not in apart)

    def share_of(self, category: str) -> float:
        """``category``'s share (of :attr:`shares`; 0 when not measured)."""
        return dict(self.shares).get(category, 0.0)

    def basis(self) -> Breakdown:
        """The breakdown the shares are of: the :meth:`steady` steps.

        The cell, without steps, when the verdict is about the cell.
        """
        if self.scope == "cell":
            return replace(self.breakdown, steps=())
        if not self.warm_up and not self.apart_steps():
            return self.breakdown
        steps = self.breakdown.steps
        return replace(self.breakdown, steps=tuple(steps[i] for i in self.steady()))

    def recurring(self) -> Breakdown:
        """The :meth:`basis` less the loop's step 0, where it is one of them and 3 or more follow.

        What a wait that recurs is measured over (a moderate wait's note): the first step's wait
        for its batch is the loader filling its pipeline (its threads start; the first batch is
        made and copied), which no prefetch hides. A fill that makes the step slow is set apart
        already (:attr:`apart`); one the device's work hides leaves the step the others' length.
        A window that starts later (``--steps 2:8``) has no fill in it.
        """
        basis = self.basis()
        if self.scope == "cell" or len(basis.steps) < 4 or basis.steps[0].step != 0:
            return basis
        return replace(basis, steps=basis.steps[1:])

    def advice_keys(self) -> tuple[str, ...]:
        """Where the fix is found in the vocabulary's advice, in order: the cause, the verdict.

        The verdict is left out for ``unknown``.
        """
        if self.verdict == "unknown":
            return ()
        return (self.cause, self.verdict) if self.cause else (self.verdict,)
