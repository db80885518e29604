"""Each step's time from the timeline's own events: a launch's work ends where the device's
execution of it ends (XLA's CPU client marks each one), not at a share of the device's busy
time; where the timeline cannot tell, the step says it is an estimate, and from what."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import xprof_magic
from tests.conftest import run
from xprof_magic._analysis.render.breakdown_chart import breakdown_svg
from xprof_magic._analysis.render.text import steps_line
from xprof_magic._analysis.summary.step_spans import STALE_NS, by_execution, launched_work
from xprof_magic._analysis.timeline.facts import LAUNCH, TraceFacts, execution_key

MS = 1e6


def spans(*pairs: tuple[float, float]) -> tuple[Any, Any]:
    return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])


def test_each_launch_is_the_next_execution_in_turn() -> None:
    """Three launches at 0, 1 and 2 ms; the device busy from 3 ms, its executions ending at
    10, 11 and 12 ms: the first ran 3 to 10, the others one after the other."""
    at = np.array([0.0, 1.0, 2.0]) * MS
    runs = spans((3 * MS, 10 * MS), (10 * MS, 11 * MS), (11 * MS, 12 * MS))
    made, ended = by_execution(at, runs, spans((3 * MS, 12 * MS)))
    assert made.tolist() == at.tolist()
    assert ended.tolist() == [10 * MS, 11 * MS, 12 * MS]


def test_a_launch_that_ran_nothing_and_work_from_before_the_capture_are_left_out() -> None:
    """An execution ends at 1 ms, before any launch the capture holds (it was launched
    before the trace began); a launch at 2 ms is followed by an idle device for longer than
    a launch takes to start (it ran nothing the timeline shows); the launch at 40 ms is the
    execution from 41 to 45 ms."""
    at = np.array([2.0, 40.0]) * MS
    runs = spans((0.0, 1 * MS), (41 * MS, 45 * MS))
    busy = spans((0.0, 1 * MS), (41 * MS, 45 * MS))
    assert 38 * MS > STALE_NS
    made, ended = by_execution(at, runs, busy)
    assert made.tolist() == [40 * MS] and ended.tolist() == [45 * MS]


def _facts(launches: list[float], busy: list[tuple[float, float]]) -> TraceFacts:
    facts = TraceFacts(host="h")
    facts.spans["device"] = [([a for a, _ in busy], [b for _, b in busy])]
    facts.spans[LAUNCH + "PjitFunction(step)"] = [(launches, [t + 0.1 * MS for t in launches])]
    return facts


def test_without_executions_the_work_is_shared_out_and_marked_so() -> None:
    """The same launches with only the device's busy time: each launch's end is a share of
    it (an estimate, marked); with the executions' ends, each is seen (not marked)."""
    facts = _facts([0.0, 1 * MS, 2 * MS], [(3 * MS, 12 * MS)])
    shared = launched_work(facts)
    assert shared.shared.all() and len(shared.done) == 3
    assert np.allclose(np.diff(shared.done), 3 * MS)  # equal shares: not what ran
    ends = [10 * MS, 11 * MS, 12 * MS]
    facts.spans[execution_key("jit_other")] = [([1 * MS], [1 * MS])]  # another program's
    facts.spans[execution_key("jit_step")] = [(ends, ends)]
    seen = launched_work(facts)
    assert not seen.shared.any() and seen.done.tolist() == [10 * MS, 11 * MS, 12 * MS]


def _execution_ends(run_dir: Path) -> list[float]:
    """The ends (ns) of each execution on XLA's CPU client, read
    through XProf's own reader: its ``ThunkExecutor::Execute (wait for completion)`` marks."""
    from xprof.profile_data import ProfileData

    data = ProfileData.from_file(str(next(run_dir.glob("*.xplane.pb"))))
    ends: list[float] = []
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                if line.name.startswith("tf_XLAPjRtCpuClient") and event.name.endswith(
                    "(wait for completion)"
                ):
                    ends.append(event.start_ns + event.duration_ns)
    return sorted(ends)


QUICKSTART = """
import jax, jax.numpy as jnp
W = jnp.full((256, 256), 0.01)
xs = jnp.ones((8, 256, 256))

@jax.jit
def step(W, x):
    for _ in range(4):
        W = jnp.tanh(W @ x) * 0.5 + W * 0.5
    return W
"""


def test_a_jax_loops_steps_end_where_their_executions_do(ip: Any, logdir: Path) -> None:
    """JAX launches every step at once and the CPU client runs them after the first's long
    execution: each step ends where an execution of the CPU client ends (read with XProf's
    own reader), so the steps are measured, not the device's busy time divided into equal
    parts; none is marked an estimate."""
    assert ip.run_cell(QUICKSTART).success
    body = "for x in xs:\n    W = step(W, x)\njax.block_until_ready(W)\n"
    assert run(ip, logdir, body, "--steps --backend jax --name exact").success
    s = xprof_magic.summarize(logdir / "plugins" / "profile" / "exact")
    st = s.steps
    assert st is not None and st.count == 8 and not st.estimated
    # The steps after the first run from the first step's execution to the last one's (the
    # host launched them all long before): their times add up to the gaps between those
    # executions' ends, less the moments the device sat idle (nobody's). A share each of
    # the device's busy time (the first's long execution with them) would be far more.
    gaps = np.diff(_execution_ends(Path(s.run_dir))[-8:])
    after = sum(st.durations_s[1:]) * 1e9
    # (a step may end past its execution by its host part: a busy machine's scheduling, up to
    # 9.5 ms in all beside two CPU hogs on 2 cores)
    assert 0.5 * gaps.sum() - 0.2 * MS <= after <= 1.1 * gaps.sum() + 12 * MS, (after, gaps)
    assert len({round(d, 6) for d in st.durations_s[1:]}) > 1  # not one share each
    assert "estimated" not in steps_line(st)


def test_an_estimated_step_says_so_in_the_text_and_the_chart() -> None:
    """A summary whose steps' ends were shared out says which, and from what."""
    from dataclasses import replace

    from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, StepBreakdown
    from xprof_magic._analysis.model.summary import StepStats

    st = StepStats("step", "trace", 3, (0.3, 0.01, 0.01), 0.3, 0.01, 0.01, 0.01, (0,), (0, 1, 2))
    assert "estimated" not in steps_line(st)
    st = replace(st, estimated=(1, 2))
    assert "steps 1, 2 estimated: the device's busy time shared out" in steps_line(st)
    categories = ("device", "host")
    rows = tuple(StepBreakdown(i, t, (t, 0.0), t) for i, t in enumerate(st.durations_s))
    d = Diagnosis(verdict="device", breakdown=Breakdown(categories=categories, steps=rows))
    picture = breakdown_svg(d, st)
    assert "2 steps from step 1: estimated" in picture
    assert "dashed: median of the rest" in picture
