"""Loops of tiny steps: marked while their length is unknown, then recorded in Python.

The tracker and the rewritten loop alone (fake events, no profiler): which steps are marked,
which are recorded in Python, and where each of those starts and ends, whatever ends the loop.
Then ``%%xprof --steps`` in an in-process shell with real JAX and real torch_xla on the CPU:
the steps recorded in Python are in the stored timeline (XProf's own reader finds each
marker) and in the summary, at the times they ran.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xprof_magic
from tests._said import worded
from tests.conftest import FakeEvent, run, step_numbers
from xprof_magic._analysis.render.text import render_text
from xprof_magic._cell import labels as _labels
from xprof_magic._cell import step_tracker as _steps
from xprof_magic._cell.fast_steps import spread_starts
from xprof_magic._cell.rewrite import rewrite
from xprof_magic._cell.sampler import SPARSE, WEIGHT
from xprof_magic._runs import metadata as _metadata

FIRST = _steps.FAST_AFTER


def spread(tracker: _steps.StepTracker) -> list[tuple[int, int]]:
    """The ranges of step numbers whose times are spread between the sampler's looks."""
    return [(first, end) for first, end, _ in tracker.spread()]


def marked() -> list[int]:
    """The step numbers of the markers that were closed, i.e. recorded."""
    return [s["step_num"] for kind, name, s in FakeEvent.log if kind == "close" and name == "step"]


def all_marked(tracker: Any, steps: int = 100) -> None:
    """Every step of the loop had its marker, and none was recorded in Python."""
    assert marked() == list(range(steps)) and tracker.python_steps() == []


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    FakeEvent.log = []


def traced(
    source: str,
    names: dict[str, Any] | Callable[[_steps.StepTracker], dict[str, Any]] | None = None,
) -> _steps.StepTracker:
    """Run ``source`` rewritten with ``--steps`` under a tracker of fake events, with ``names``
    (or the names it gives for the tracker) as its globals."""
    source = textwrap.dedent(source)
    cell = rewrite(ast.parse(source), source.splitlines(), labels=False, steps=True)
    recorder = _labels.Recorder(FakeEvent)
    tracker = _steps.StepTracker(FakeEvent, recorder, watch_syncs=True)
    with _labels.recording(recorder, tracker):
        tracker.arm()
        try:
            scope = names(tracker) if callable(names) else dict(names or {})
            exec(compile(cell.tree, "<cell>", "exec"), scope)
        finally:
            tracker.finish()
    return tracker


def check_python_steps(tracker: _steps.StepTracker, count: int) -> None:
    """The first steps are marked, the rest recorded in Python, one after another."""
    assert marked() == list(range(FIRST))
    python = tracker.python_steps()
    assert [number for number, _, _ in python] == list(range(FIRST, count))
    for (_, _, end), (_, start, _) in itertools.pairwise(python):
        assert end == start, "each step ends where the next starts"
    assert all(end >= start for _, start, end in python)
    assert len(tracker.durations()) == count and tracker.ended == count
    assert (tracker.first, tracker.last, tracker.rule) == (0, count - 1, "iteration")
    ns = [round(s * 1e9) for s in tracker.durations()[FIRST:]]
    assert ns == [end - start for _, start, end in python]


def test_a_loop_of_tiny_steps_is_recorded_in_python_after_its_first_marked_steps() -> None:
    tracker = traced("for i in range(300):\n    pass\n")
    check_python_steps(tracker, 300)


def test_a_break_ends_the_last_python_step_there() -> None:
    tracker = traced("for i in range(300):\n    if i == 200:\n        break\n")
    check_python_steps(tracker, 201)


def test_an_exception_ends_the_last_python_step_there() -> None:
    source = """
    try:
        for i in range(300):
            if i == 150:
                1 / 0
    except ZeroDivisionError:
        pass
    """
    check_python_steps(traced(source), 151)


def test_each_run_of_an_inner_loop_is_marked_first_then_recorded_in_python() -> None:
    tracker = traced("for epoch in range(3):\n    for i in range(100):\n        pass\n")
    runs = [range(100 * k, 100 * k + FIRST) for k in range(3)]
    assert marked() == [n for run in runs for n in run]
    python = [n for n, _, _ in tracker.python_steps()]
    assert python == [n for k in range(3) for n in range(100 * k + FIRST, 100 * (k + 1))]
    assert spread(tracker) == [(100 * k + FIRST, 100 * (k + 1)) for k in range(3)]
    assert len(tracker.durations()) == 300 and (tracker.first, tracker.last) == (0, 299)
    # The durations are in step order: each run's marked steps, then its recorded ones.
    ns = [round(d * 1e9) for d in tracker.durations()]
    by_number = {n: end - start for n, start, end in tracker.python_steps()}
    assert [ns[n] for n in python] == [by_number[n] for n in python]


@pytest.mark.parametrize(
    "container",
    [
        "list(range(300))",
        "tuple(range(300))",
        "'x' * 300",
        "'\\u0100' * 300",
        "b'x' * 300",
        "bytearray(300)",
        "frozenset(range(300))",
    ],
)
def test_a_loop_over_a_built_in_container_is_counted_and_spread_evenly(container: str) -> None:
    """Its iterator says how many items it gave: no clock read per step, the count exact.

    Without the sampler's looks, the steps share the loop's time evenly.
    """
    tracker = traced(f"for i in {container}:\n    pass\n")
    check_python_steps(tracker, 300)
    assert spread(tracker) == [(FIRST, 300)]
    ns = [end - start for _, start, end in tracker.python_steps()]
    assert max(ns) - min(ns) <= 1


def test_a_dict_loop_is_stamped_step_by_step() -> None:
    """A dict's iterator forgets where it was when the dict changes: each start is read."""
    tracker = traced("for i in {k: k for k in range(300)}:\n    pass\n")
    check_python_steps(tracker, 300)
    assert spread(tracker) == []


def test_a_list_that_grows_while_its_loop_runs_is_counted_to_its_end() -> None:
    source = """
    items = list(range(100))
    for x in items:
        if len(items) < 300:
            items.append(x)
    """
    tracker = traced(source)
    check_python_steps(tracker, 300)
    assert spread(tracker) == [(FIRST, 300)]


def test_a_break_in_a_list_loop_ends_the_count_there() -> None:
    tracker = traced("for i in list(range(300)):\n    if i == 99:\n        break\n")
    check_python_steps(tracker, 100)
    assert spread(tracker) == [(FIRST, 100)]


@pytest.mark.parametrize(
    "loop", ["for i, j in zip(list(range(100)), range(100)):", "for i in (j for j in range(100)):"]
)
def test_a_loop_whose_items_may_wait_keeps_a_marker_each(loop: str) -> None:
    """Not a built-in container (a zip of two, a generator): its items may wait, so each step is
    marked, and counted."""
    all_marked(traced(f"{loop}\n    pass\n"))


def test_the_samplers_looks_place_the_counted_steps() -> None:
    """A look is when, and how many steps had started: a long step between two looks is long."""
    source = """
    for i in range(300):
        if i == 150:
            look()
            look()
    """
    looked: list[int] = []

    def looks(tracker: _steps.StepTracker) -> dict[str, Any]:
        def look() -> None:
            """A look; the first waits 2 ms after it (a loop in the cell would be a step loop)."""
            looked.append(tracker.look())
            until = time.time_ns() + 2_000_000
            while len(looked) == 1 and time.time_ns() < until:
                pass

        return {"look": look}

    tracker = traced(source, looks)
    check_python_steps(tracker, 300)
    assert looked == [151, 151], "each look: the steps started by then"
    python = {n: end - start for n, start, end in tracker.python_steps()}
    assert max(python, key=python.__getitem__) == 150
    assert python[150] >= 2_000_000
    assert sorted(python.values())[-2] < 2_000_000 / 10, "the others stay short"


def test_spread_steps_are_monotone_within_the_loop_whatever_the_looks() -> None:
    looks = [(150, 3), (140, 3), (400, 3), (500, 9), (900, 50), (2000, 7)]
    out = spread_starts(100, looks, 10, 1000)
    assert len(out) == 11 and out[0] == 100 and out[-1] == 1000
    assert all(a <= b for a, b in itertools.pairwise(out))
    assert out[2] <= 150 and out[3] >= 400, "step 2 held the looks at 3 started"


def test_spread_ends_move_between_the_events_they_cut() -> None:
    """A step holds its body's events whole; a long event takes one step, not many empty ones."""
    from xprof_magic._capture.step_events import _between_events

    steps = [(n, n * 10, n * 10 + 10) for n in range(10)]  # spread evenly over 0..100
    events = [(-5, 200), (3, 45), (4, 6)] + [(a, a + 2) for a in range(47, 93, 5)]
    out = _between_events(steps, [(0, 10, [(0.0, 0), (10.0, 100)])], events)
    assert [n for n, _, _ in out] == list(range(10))
    assert out[0][1] == 0 and out[-1][2] == 100
    assert all(end > start for _, start, end in out), "none empty"
    for (_, _, end), (_, start, _) in itertools.pairwise(out):
        assert end == start
    for a, b in events[1:]:
        assert any(start <= a and b <= end for _, start, end in out), (a, b, out)


def test_the_events_place_steps_that_a_look_inside_a_long_call_would_smear() -> None:
    """The only look came during step 7's long call: spread over time, steps 0-7 would share
    the call's time; spread over the events (a call a step), each step holds its own call."""
    from xprof_magic._capture.step_events import _between_events

    true_starts = [6 * k for k in range(8)] + [442, 448]
    calls = [(a + 1, a + 5) for a in true_starts[:7]] + [(43, 441), (443, 447), (449, 453)]
    looks = [(300, 8)]
    starts = spread_starts(0, looks, 10, 454)
    assert starts[1] > 30, "over time, the look smears the steps before it"
    steps = [(n, starts[n], starts[n + 1]) for n in range(10)]
    known = [(0.0, 0), (7.5, 300), (10.0, 454)]
    out = _between_events(steps, [(0, 10, known)], [(-1, 500), *calls])
    for (_, start, end), (a, b) in zip(out, calls, strict=True):
        assert start <= a and b <= end, (out, calls)
    assert max(out, key=lambda step: step[2] - step[1])[0] == 7


def test_long_steps_keep_a_marker_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_steps, "FAST_BELOW_NS", 0)
    tracker = traced("for i in range(100):\n    pass\n")
    all_marked(tracker)


def test_the_users_own_marker_ends_the_python_recording() -> None:
    source = """
    for i in range(200):
        if i >= 100:
            with step():
                pass
    """
    tracker = traced(source, {"step": _labels.step})
    # Step 100 was running when the user's marker came: like a marker of ours, it is
    # dropped; the user's steps follow, marked.
    assert [n for n, _, _ in tracker.python_steps()] == list(range(FIRST, 100))
    assert tracker.rule == "user"
    assert marked() == list(range(FIRST)) + list(range(100, 200))


# Real captures through the magic.


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many steps each capture wrote into its timeline after recording them in Python."""
    from xprof_magic._capture import step_events

    counts: list[int] = []
    write = step_events.write_steps

    def counted(folder: Path, steps: Any, *spread: Any) -> int:
        counts.append(write(folder, steps, *spread))
        return counts[-1]

    monkeypatch.setattr(step_events, "write_steps", counted)
    return counts


JAX_LOOP = """
import jax, jax.numpy as jnp
@jax.jit
def tiny(w):
    return w * 0.5 + 1.0
w = tiny(jnp.ones((4, 4)))
for i in range(300):
    w = tiny(w)
    if i == {stop}:
        break
jax.block_until_ready(w)
"""


@pytest.mark.parametrize(("stop", "count"), [(-1, 300), (220, 221)])
def test_jax_tiny_steps_are_in_the_timeline_and_the_summary(
    ip: Any, logdir: Path, written: list[int], stop: int, count: int
) -> None:
    name = f"tiny{count}"
    body = JAX_LOOP.format(stop=stop)
    assert run(ip, logdir, body, f"--steps --backend jax --name {name}").success
    run_dir = logdir / "plugins" / "profile" / name
    meta = _metadata.read(run_dir)
    assert meta is not None and len(meta.steps) == count and meta.step_rule == "iteration"
    assert written == [count - FIRST], "the steps after the first were recorded in Python"
    # Every step is an XProf step marker on the timeline, as XProf's own reader sees it.
    assert step_numbers(run_dir) == list(range(count))
    s = xprof_magic.summarize(run_dir)
    assert s.steps is not None and s.steps.count == count, "every step of the loop, no more"
    # The steps recorded in Python were counted: the summary says their times are estimates,
    # spread between the sampler's looks, as data (indices) and in its words.
    assert meta.steps_spread == ((FIRST, count),) and s.steps.spread == ((FIRST, count),)
    assert f"steps {FIRST}–{count - 1} estimated: a loop of tiny steps counted" in render_text(s)
    # On the timeline they follow one another, in the loop, after the marked ones; each holds
    # its body's events whole (XProf's reader found every step above), none is empty.
    starts = np.array(s.steps.host_starts_s or s.steps.starts_s)
    assert len(starts) == count and np.all(np.diff(starts) > 0)
    (loop_s,) = [row.total_s for row in s.labels if row.path[-1] == "for i in range(300)"]
    assert starts[-1] - starts[0] < loop_s
    # The breakdown has every step, with the summary's step times.
    d = worded(s)
    assert [round(x.total_s, 9) for x in d.breakdown.steps] == [
        round(x, 9) for x in s.steps.durations_s
    ]


def test_torch_xla_tiny_steps_are_in_the_timeline(
    ip: Any, logdir: Path, written: list[int]
) -> None:
    body = (
        "import torch, torch_xla\n"
        "x = torch.ones(4, 4, device=torch_xla.device())\n"
        "for i in range(200):\n"
        "    x = x * 0.5 + 1.0\n"
        "torch_xla.sync()\n"
    )
    assert run(ip, logdir, body, "--steps --backend torch_xla --name lazy").success
    run_dir = logdir / "plugins" / "profile" / "lazy"
    meta = _metadata.read(run_dir)
    assert meta is not None and len(meta.steps) == 200 and meta.step_rule == "iteration"
    assert written == [200 - FIRST]
    assert step_numbers(run_dir) == list(range(200))
    s = xprof_magic.summarize(run_dir)
    assert s.steps is not None and s.steps.count == 200
    assert meta.steps_spread == ((FIRST, 200),) and s.steps.spread == ((FIRST, 200),)


def test_jax_a_long_loop_of_tiny_steps_is_looked_at_less_often(
    ip: Any, logdir: Path, written: list[int]
) -> None:
    """Once a loop's steps are recorded in C, the sampler's looks come less often, each one
    standing for as many; the analysis reads them (the summary's verdict has its looks)."""
    body = JAX_LOOP.replace("range(300)", "range(6000)").format(stop=-1)
    assert run(ip, logdir, body, "--steps --backend jax --name sparse").success
    run_dir = logdir / "plugins" / "profile" / "sparse"
    meta = _metadata.read(run_dir)
    assert meta is not None and len(meta.steps) == 6000
    sparse = [look for look in meta.lines if look[2] // WEIGHT]
    assert sparse, meta.lines
    assert {look[2] // WEIGHT for look in sparse} == {SPARSE}
    assert min(look[3] for look in sparse) >= FIRST, "only once the loop is recorded in C"
    assert worded(xprof_magic.summarize(run_dir)).breakdown.steps
