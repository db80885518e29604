"""Batches made in the user's own Python counted as the input pipeline, and the device's idle
time said by what the host did meanwhile, on breakdowns and looks written here (no
framework): the breakdown moves the looks' share of host time to input, the verdict then
says input with the data path's fix at the line that makes the batches, and every verdict
where the device idles says why in the profiling guide's terms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests._said import worded
from tests.test_gain import _steps
from xprof_magic._analysis.diagnosis.batches import as_input
from xprof_magic._analysis.diagnosis.idle import idle_time
from xprof_magic._analysis.diagnosis.own import Sampled
from xprof_magic._analysis.diagnosis.verdict import diagnose
from xprof_magic._analysis.model.diagnosis import Aside, Breakdown, Gain
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._backends.jax_vocabulary import VOCABULARY as JAX_WORDS

CELL = "\nfor i in range(8):\n    x = augment(raw)\n    W = train(W, x)\n    log(W)\n"


def _looks(per_step: list[tuple[int, int, int]]) -> Sampled:
    """Per step, ``(looks making batches at line 3, own looks at line 5, framework looks
    at line 4)``; every look the host's and the device idle."""
    step, own, batch, line = [], [], [], []
    for at, (made, mine, theirs) in enumerate(per_step):
        for _ in range(made):
            step.append(at), own.append(True), batch.append(True), line.append(3)
        for _ in range(mine):
            step.append(at), own.append(True), batch.append(False), line.append(5)
        for _ in range(theirs):
            step.append(at), own.append(False), batch.append(False), line.append(4)
    n = len(step)
    return Sampled(
        step=np.array(step),
        host=np.ones(n, bool),
        own=np.array(own),
        device=np.zeros(n, bool),
        line=np.array(line),
        batch=np.array(batch),
    )


def _diagnosed(parts: Breakdown, looks: Sampled | None) -> Any:
    s = Summary(run="r", run_dir="/r", cell=CELL, backend="jax")
    moved = as_input(parts, looks)
    return worded(replace(s, diagnosis=diagnose(s, JAX_WORDS, moved, looks=looks)))


def test_host_time_that_made_batches_moves_to_input_per_step_and_for_the_cell() -> None:
    parts = _steps({"host": 0.09, "device": 0.01}, busy=0.01, n=4)
    looks = _looks([(9, 0, 1), (9, 0, 1), (2, 0, 8), (1, 0, 1)])  # the last: too few looks
    moved = as_input(parts, looks)
    host, put = parts.categories.index("host"), parts.categories.index("input")
    assert [round(s.seconds[put], 4) for s in moved.steps] == [0.081, 0.081, 0.018, 0.0591]
    assert [round(s.made_s, 4) for s in moved.steps] == [0.081, 0.081, 0.018, 0.0591]
    for before, after in zip(parts.steps, moved.steps, strict=True):
        assert round(after.seconds[host] + after.seconds[put], 9) == before.seconds[host]
        assert after.total_s == before.total_s
    assert moved.made() == sum(s.made_s for s in moved.steps)
    assert as_input(parts, None) is parts
    assert as_input(parts, _looks([(0, 3, 7)] * 4)) is parts, "no batches made: unchanged"


def test_a_statement_outside_the_steps_that_made_batches_is_input() -> None:
    parts = Breakdown(
        categories=_steps({"host": 1.0}).categories,
        outside=(Aside(0.5, "host", 0.4, path=("batches = [augment(raw) for _ in range(8)]",)),),
    )
    looks = Sampled(
        step=np.full(10, -1),
        host=np.ones(10, bool),
        own=np.ones(10, bool),
        device=np.zeros(10, bool),
        line=np.full(10, 2),
        batch=np.array([True] * 8 + [False] * 2),
    )
    aside = as_input(parts, looks).outside[0]
    assert aside.category == "input" and round(aside.held_s, 4) == 0.32


def test_batches_made_in_the_step_are_an_input_verdict_with_the_data_paths_fix() -> None:
    parts = _steps({"host": 0.09, "device": 0.01}, busy=0.01, n=4)
    d = _diagnosed(parts, _looks([(18, 0, 2)] * 4))
    assert d.verdict == "input" and d.cause == "making batches"
    assert d.line == 3 and d.where[-1] == "x = augment(raw)"
    text = d.headline
    assert text.startswith("Input-bound"), text
    assert "idle 90% of each step while the host makes batches in your Python at line 3" in text
    fix = d.fix
    assert "vectorize the NumPy" in fix and "would not shorten it" in fix


def test_waiting_on_a_loader_keeps_the_loaders_fix_and_is_said_as_such() -> None:
    parts = _steps({"input": 0.09, "device": 0.01}, busy=0.01, n=4)
    d = _diagnosed(parts, None)
    assert d.verdict == "input" and d.cause == ""
    assert "the host waits on the data iterator" in d.headline
    assert "vectorize" not in d.fix


def test_other_own_python_stays_host_with_its_own_fix_and_the_idle_says_so() -> None:
    parts = _steps({"host": 0.08, "device": 0.02}, busy=0.02, n=4)
    d = _diagnosed(parts, _looks([(0, 16, 4)] * 4))
    assert d.verdict == "host" and d.cause == "own code"
    text = d.headline
    assert "idle 80% of each step: while the host runs your Python at line 5 (64%)" in text
    assert "while the host runs the framework's dispatch and graph building at line 4" in text


def test_every_verdict_where_the_device_idles_says_what_the_host_did() -> None:
    sync = _diagnosed(_steps({"sync": 0.06, "device": 0.04}, busy=0.04, n=4), None)
    assert sync.verdict == "sync"
    assert "idle 60% of each step while the host waits on a sync" in sync.headline
    compiled = _diagnosed(_steps({"compile": 0.07, "device": 0.03}, busy=0.03, n=4), None)
    assert "idle 70% of each step while the host compiles" in compiled.headline
    copies = _diagnosed(_steps({"transfer": 0.05, "device": 0.05}, busy=0.05, n=4), None)
    assert "while data is copied between host and device" in copies.headline
    device = _diagnosed(_steps({"host": 0.15, "device": 0.85}, busy=0.85, n=4), None)
    assert device.verdict == "device"
    assert "the device is idle 15% of each step while the host runs" in device.headline
    busy = _diagnosed(_steps({"host": 0.05, "device": 0.95}, busy=0.95, n=4), None)
    assert "idle" not in busy.headline, "under a tenth idle: nothing to say"


def test_the_idle_time_is_none_without_time_and_splits_input_from_compiles() -> None:
    assert idle_time(Breakdown(), None, ()) is None
    parts = _steps({"input": 0.04, "compile": 0.04, "device": 0.02}, busy=0.02, n=2)
    idle = idle_time(parts, None, (), cell_line=2)
    assert idle is not None and idle.share == 0.8
    assert dict((w, s) for w, s, _ in idle.during) == {"loader": 0.4, "compile": 0.4}
    assert ("loader", 0.4, 2) in idle.during


def test_moderate_input_made_in_the_users_python_is_noted_with_the_data_paths_fix() -> None:
    from xprof_magic._analysis.render.notes import diagnosis

    parts = _steps({"host": 0.09, "device": 0.01}, busy=0.01, n=4)
    looks = _looks([(1, 0, 8)] * 4)  # a ninth of the host's time makes batches
    s = Summary(run="r", run_dir="/r", cell=CELL, backend="jax")
    d = diagnose(s, JAX_WORDS, as_input(parts, looks), looks=looks)
    assert d.verdict == "host"
    notes = [n.text for n in diagnosis(replace(s, diagnosis=d), JAX_WORDS)]
    said = [n for n in notes if n.startswith("Moderately input-bound")]
    assert said and "is making batches in your own Python and NumPy" in said[0], notes
    assert "vectorize the NumPy" in said[0]


def test_the_idle_time_is_never_said_as_more_than_the_device_was_idle() -> None:
    """A chip's own copies count as transfer while the chip is busy: the host's, the
    syncs' and the transfers' seconds are scaled to the idle time."""
    parts = _steps({"transfer": 0.5, "device": 0.5}, busy=0.8, n=2)
    idle = idle_time(parts, None, ())
    assert idle is not None and idle.share == 0.2
    assert sum(share for _, share, _ in idle.during) <= idle.share + 1e-9


def _waits(cpus: int, on_cpu: bool, workers_s: float = 0.0) -> Sampled:
    """Ten looks a step for four steps, each at the loop's wait for its next batch (line 2),
    the cell's thread on a CPU in each (a collate_fn tokenizing) or in none (workers, a store's
    latency), on a machine of ``cpus`` cores whose child processes used ``workers_s`` of CPU."""
    n = 40
    return Sampled(
        step=np.repeat(np.arange(4), 10),
        host=np.ones(n, bool),
        own=np.zeros(n, bool),
        device=np.zeros(n, bool),
        line=np.full(n, 2),
        fed=np.ones(n, bool),
        ran=np.full(n, on_cpu),
        cpus=cpus,
        workers_s=workers_s,
    )


@pytest.mark.parametrize(
    ("looks", "cause", "said", "fix"),
    [
        (
            _waits(2, True),
            "few cores",
            "The loop's own thread makes the batches, and workers would share",
            "Make the batches cheaper rather than elsewhere",
        ),
        (
            _waits(2, False, workers_s=0.2),
            "busy workers",
            "The loader's workers keep the cores busy already: more of them would share",
            "Make the batches cheaper rather than by more workers",
        ),
    ],
)
def test_a_wait_for_batches_computed_on_a_2_core_machine_is_fixed_by_cheaper_batches(
    looks: Sampled, cause: str, said: str, fix: str
) -> None:
    """The loop waits 70 ms of each 100 ms step (280 ms in all) for its next batch.

    On 2 cores, where the loop's own thread makes the batches (a collate_fn tokenizing: two
    workers slowed such a loop by 5 to 48% here, ``bench device-truth``, kind ``xla_loader``),
    or where its loader's workers computed for at least half the wait (two workers tokenizing
    used 0.7 to 1.5 times it here), more workers would share the same cores: causes ``few
    cores`` and ``busy workers``, whose fix makes the batches cheaper, or once, and whose gain
    is the whole wait. On 8 cores, or for workers that wait on a store (0.2 times the wait
    here; no CPU on the loop's thread either), the loader's workers stay the fix."""
    parts = _steps({"input": 0.07, "device": 0.02, "host": 0.01}, busy=0.02, n=4)
    d = _diagnosed(parts, looks)
    assert (d.verdict, d.cause) == ("input", cause), d.headline
    assert d.gain == Gain("input", 0.1, 0.03, 2)
    assert (
        f"{said} this machine's 2 cores with the step: made once before the loop, a step would"
        " take about 30.0 ms instead of 100.0 ms on average (3.3×)." in d.headline
    ), d.headline
    assert d.fix.startswith(fix) and "once, before the loop" in d.fix, d.fix
    others = (_waits(8, True), _waits(2, False), _waits(8, False, 0.2), _waits(2, False, 0.05))
    for other in others:
        d = _diagnosed(parts, other)
        assert (d.verdict, d.cause) == ("input", ""), d.headline
        assert d.fix.startswith("Prefetch") and "would share" not in d.headline


def test_a_moderate_wait_is_noted_with_the_fix_the_wait_would_take_as_the_verdict() -> None:
    from xprof_magic._analysis.render.notes import diagnosis

    parts = _steps({"input": 0.01, "device": 0.085, "host": 0.005}, busy=0.085, n=4)
    for looks, fix in ((_waits(2, True), "Make the batches cheaper"), (None, "Prefetch")):
        s = Summary(run="r", run_dir="/r", cell=CELL, backend="jax")
        d = diagnose(s, JAX_WORDS, parts, looks=looks)
        assert d.verdict == "device" and d.input_cause == ("few cores" if looks else "")
        notes = [n.text for n in diagnosis(replace(s, diagnosis=d), JAX_WORDS)]
        said = [n for n in notes if n.startswith("Moderately input-bound")]
        assert said and f"waits for the next batch. {fix}" in said[0], notes


def test_a_moderate_wait_is_of_the_steps_the_verdict_is_about() -> None:
    """One step that waited long for its batch (a loader's start-up) is left out as unlike the
    others: the note of a moderate wait leaves it out too, as the verdict's shares do."""
    from xprof_magic._analysis.render.notes import diagnosis

    slow = {"input": 0.3, "device": 0.05}  # over 3 times the median step: apart
    parts = _steps(slow, *[{"device": 0.095, "host": 0.005}] * 19, n=1)
    s = Summary(run="r", run_dir="/r", cell=CELL, backend="jax")
    d = diagnose(s, JAX_WORDS, parts)
    assert d.verdict == "device" and 0 not in d.steady(), d
    assert 0.05 <= parts.share("input") < 0.2 and d.share_of("input") == 0
    notes = [n.text for n in diagnosis(replace(s, diagnosis=d), JAX_WORDS)]
    assert not [n for n in notes if "input-bound" in n], notes


def test_a_moderate_wait_recurs_the_first_steps_fill_of_the_pipeline_is_not_one() -> None:
    """The loop's first step waits 16 ms for its batch, the others' 50 ms of device work after
    it (the loader's threads start and its first batch is copied, hidden by no prefetch): 6% of
    the five steps, not a moderate wait, and not a step apart. A wait in every step is one."""
    from xprof_magic._analysis.render.notes import diagnosis

    step = {"device": 0.05}
    for first, then, noted in ((0.016, 0.0, False), (0.016, 0.004, True), (0.0, 0.004, True)):
        parts = _steps({**step, "input": first}, *[{**step, "input": then}] * 4, n=1)
        s = Summary(run="r", run_dir="/r", cell=CELL, backend="jax")
        d = diagnose(s, JAX_WORDS, parts)
        assert d.verdict == "device" and d.steady() == (0, 1, 2, 3, 4), d
        assert parts.share("input") >= 0.05
        notes = [n.text for n in diagnosis(replace(s, diagnosis=d), JAX_WORDS)]
        said = [n for n in notes if n.startswith("Moderately input-bound")]
        assert bool(said) == noted, (first, then, notes)
