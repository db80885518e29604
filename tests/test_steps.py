"""Steps: one rule for every loop shape, the user's markers first, and step windows.

The tracker alone (fake events, no torch), then ``%%xprof --steps`` in an in-process shell
with real torch_xla on the CPU, reading the steps back from the stored xplane.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests.conftest import FakeEvent, host_events, only_run, run, step_numbers
from xprof_magic._capture import trace_window as _trace
from xprof_magic._capture.capture import parse_steps
from xprof_magic._cell import labels as _labels
from xprof_magic._cell import step_tracker as _steps
from xprof_magic._cell import step_window as _step_window
from xprof_magic._cell.rewrite import rewrite
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store


def recorded_steps() -> list[int]:
    """The step numbers of the markers that were closed, i.e. recorded."""
    return [s["step_num"] for kind, name, s in FakeEvent.log if kind == "close" and name == "step"]


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    FakeEvent.log = []


def test_syncs_end_steps_and_syncs_without_work_end_none() -> None:
    tracker = _steps.StepTracker(FakeEvent, watch_syncs=True)
    tracker.arm()
    tracker.synced(False)  # MpDeviceLoader's first next(): nothing ran yet
    tracker.iteration_started()
    tracker.synced(True)
    tracker.synced(False)  # the loader's sync right after optimizer_step(barrier=True)
    tracker.synced(True)
    tracker.finish()
    assert tracker.rule == "sync"
    assert recorded_steps() == [0, 1]
    assert len(tracker.durations()) == 2
    # the step opened by the last sync never closes: the cell ended, so it is no step
    assert [s["step_num"] for k, n, s in FakeEvent.log if k == "open"] == [0, 1, 2]


def test_without_syncs_each_iteration_is_a_step_and_the_sync_candidate_is_dropped() -> None:
    tracker = _steps.StepTracker(FakeEvent, watch_syncs=True)
    tracker.arm()
    for _ in range(3):
        tracker.iteration_started()
        tracker.iteration_ended()
    tracker.synced(True)  # a sync after the rule was decided changes nothing
    tracker.finish()
    assert tracker.rule == "iteration"
    assert recorded_steps() == [0, 1, 2]


def test_the_users_markers_win_and_ours_are_dropped() -> None:
    tracker = _steps.StepTracker(FakeEvent, watch_syncs=True)
    tracker.arm()
    tracker.iteration_started()
    tracker.user_step(True)
    tracker.synced(True)
    tracker.user_step(False)
    tracker.iteration_ended()
    tracker.finish()
    assert tracker.rule == "user"
    assert recorded_steps() == []
    assert tracker.ended == 1


def test_a_window_starts_and_stops_the_trace_at_its_steps() -> None:
    calls: list[tuple[str, int]] = []

    class Trace:
        def start(self) -> None:
            calls.append(("start", tracker.ended))

        def pause(self, doing: str) -> None:
            calls.append(("stop", tracker.ended))

    tracker = _steps.StepTracker(
        FakeEvent,
        watch_syncs=True,
        window=_trace.TraceWindow(_step_window.StepWindow(2, 4), Trace()),
    )
    tracker.arm()
    for _ in range(6):
        tracker.synced(True)
    tracker.finish()
    assert calls == [("start", 2), ("stop", 4)]
    assert recorded_steps() == [2, 3]
    assert (tracker.first, tracker.last, tracker.ended) == (2, 3, 6)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, (False, None)),
        (True, (True, None)),
        ("", (True, None)),
        ("100:103", (True, _step_window.StepWindow(100, 103))),
        ("5:", (True, _step_window.StepWindow(5, None))),
        (":3", (True, _step_window.StepWindow(0, 3))),
    ],
)
def test_step_options_parse(given: Any, expected: Any) -> None:
    assert parse_steps(given) == expected


@pytest.mark.parametrize(
    ("given", "reason"),
    [("-1:3", "negative"), ("2:-1", "negative"), ("5:5", "greater"), ("9:3", "greater")],
)
def test_bad_windows_are_refused_in_one_line(given: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as refused:
        parse_steps(given)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="not a step window"):
        parse_steps("ten")


def rewritten(source: str) -> Any:
    source = textwrap.dedent(source)
    cell = rewrite(ast.parse(source), source.splitlines(), labels=False, steps=True)
    return cell, ast.unparse(cell.tree)


def test_the_innermost_loops_are_the_iterations_and_functions_are_left_alone() -> None:
    cell, code = rewritten(
        """
        def train(n):
            for i in range(n):
                pass
        for epoch in range(2):
            for batch in range(3):
                pass
            for check in range(1):
                pass
        with open('f') as f:
            while True:
                break
        """
    )
    assert cell.step_loops == 3
    # A for loop's items are its iterations (steps(...)), a while loop's body is one.
    assert code.count(".steps(range(") == 2 and code.count(".iteration()") == 1
    assert code.count(".loop()") == 2
    assert code.splitlines()[0].endswith(".loops_ahead()")
    assert "def train(n):\n    for i in range(n):\n        pass" in code


def test_nested_loops_without_syncs_give_one_step_per_inner_iteration() -> None:
    cell, _ = rewritten("for epoch in range(2):\n    for batch in range(3):\n        pass\n")
    recorder = _labels.Recorder(FakeEvent)
    tracker = _steps.StepTracker(FakeEvent, recorder, watch_syncs=True)
    with _labels.recording(recorder, tracker):
        tracker.arm()
        exec(compile(cell.tree, "<cell>", "exec"), {})
        tracker.finish()
    assert tracker.rule == "iteration"
    assert recorded_steps() == list(range(6))


def test_a_synced_outer_loop_with_an_inner_python_loop_has_one_step_per_sync() -> None:
    body = "for step in range(3):\n    for j in range(4):\n        pass\n    sync()\n"
    cell, _ = rewritten(body)
    recorder = _labels.Recorder(FakeEvent)
    tracker = _steps.StepTracker(FakeEvent, recorder, watch_syncs=True, defer_nested=True)
    with _labels.recording(recorder, tracker):
        tracker.arm()
        exec(compile(cell.tree, "<cell>", "exec"), {"sync": lambda: tracker.synced(True)})
        tracker.finish()
    assert tracker.rule == "sync"
    assert recorded_steps() == [0, 1, 2], "one step per sync"


def test_without_a_sync_the_inner_iterations_after_the_first_outer_one_are_steps() -> None:
    cell, _ = rewritten("for step in range(3):\n    for j in range(4):\n        pass\n    x = 1\n")
    recorder = _labels.Recorder(FakeEvent)
    tracker = _steps.StepTracker(FakeEvent, recorder, watch_syncs=True, defer_nested=True)
    with _labels.recording(recorder, tracker):
        tracker.arm()
        exec(compile(cell.tree, "<cell>", "exec"), {})
        tracker.finish()
    assert tracker.rule == "iteration"
    assert recorded_steps() == list(range(8))


def test_tiny_ops_in_an_inner_loop_synced_by_the_outer_one_give_one_step_per_sync(
    ip: Any, logdir: Path
) -> None:
    body = (
        "import torch, torch_xla\n"
        "x = torch.ones(4, 4, device=torch_xla.device())\n"
        "for i in range(4):\n"
        "    for j in range(50):\n"
        "        x = x * 1.0001\n"
        "    torch_xla.sync()\n"
    )
    assert run(ip, logdir, body, "--steps --name inner").success
    run_dir = logdir / "plugins" / "profile" / "inner"
    assert step_numbers(run_dir) == list(range(4))
    meta = _metadata.read(run_dir)
    assert meta is not None and meta.step_rule == "sync"


# Real captures through the magic.


SYNCING_LOOP = """
import torch, torch_xla
x = torch.ones(4, 4, device=torch_xla.device())
for i in range({n}):
    # xprof: work
    x = (x @ x) / 4
    torch_xla.sync()
"""


def test_a_window_on_a_top_level_loop_holds_just_its_steps(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ip, logdir, SYNCING_LOOP.format(n=160), "--steps 100:103 --name w").success
    run_dir = only_run(logdir).path
    assert step_numbers(run_dir) == [100, 101, 102]
    # a step ends at the sync inside the block: the block is cut there and goes on in the
    # next step, so that the events nest; the block open before the trace started is not in it
    events = host_events(run_dir)
    steps = sorted((e for e in events if e.name == "step"), key=lambda e: e.start_ns)
    work = [e for e in events if e.name == "work"]
    assert len(work) == 5
    assert sum(str(dict(e.stats).get("continued")) == "1" for e in work) == 2
    for event in work:
        assert any(
            s.start_ns <= event.start_ns
            and event.start_ns + event.duration_ns <= s.start_ns + s.duration_ns
            for s in steps
        )
    meta = _metadata.read(run_dir)
    assert meta is not None
    assert (meta.step_window, meta.steps_first, meta.step_rule) == ("100:103", 100, "sync")
    assert len(meta.steps) == 3
    assert [label.path for label in meta.labels] == [("for i in range(160)", "work")]
    assert meta.labels[0].count == 3
    out = capsys.readouterr().out
    assert "3 steps (100 to 102 of the cell, --steps 100:103; a step ends at each sync)" in out


def test_xprofs_overview_finds_the_windows_steps(ip: Any, logdir: Path, tmp_path: Path) -> None:
    import shutil

    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    assert run(ip, logdir, SYNCING_LOOP.format(n=30), "--steps 10:16").success
    copy = tmp_path / "copy"  # the converter writes caches beside the capture
    shutil.copytree(only_run(logdir).path, copy)
    data, _ = xspace_to_tool_data([str(next(copy.glob("*.xplane.pb")))], "overview_page", {})
    tables = json.loads(data)
    (steps,) = [t for t in tables if any(c.get("id") == "stepTimeMs" for c in t.get("cols", []))]
    # XProf leaves the first and the last step out of its table
    assert [row["c"][0]["v"] for row in steps["rows"]] == [f"step {n}" for n in (11, 12, 13, 14)]


def test_a_window_on_a_loop_inside_a_function(ip: Any, logdir: Path) -> None:
    body = (
        "import torch, torch_xla\n"
        "def train(n):\n"
        "    x = torch.ones(4, 4, device=torch_xla.device())\n"
        "    for i in range(n):\n"
        "        x = (x @ x) / 4\n"
        "        torch_xla.sync()\n"
        "train(60)\n"
    )
    assert run(ip, logdir, body, "--steps 20:23").success
    assert step_numbers(only_run(logdir).path) == [20, 21, 22]


def test_plain_steps_mark_every_sync_of_a_loop_inside_a_function(ip: Any, logdir: Path) -> None:
    body = (
        "import torch, torch_xla\n"
        "def train(n):\n"
        "    x = torch.ones(4, 4, device=torch_xla.device())\n"
        "    for i in range(n):\n"
        "        x = (x @ x) / 4\n"
        "        torch_xla.sync()\n"
        "train(5)\n"
    )
    assert run(ip, logdir, body, "--steps").success
    run_dir = only_run(logdir).path
    assert step_numbers(run_dir) == [0, 1, 2, 3, 4]
    # the first step starts inside the statement that runs the loop, so that it holds them
    events = host_events(run_dir)
    (call,) = [e for e in events if e.name == "train(5)"]
    for step in (e for e in events if e.name == "step"):
        assert call.start_ns <= step.start_ns
        assert step.start_ns + step.duration_ns <= call.start_ns + call.duration_ns


MP_LOADER = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
dev = torch_xla.device()
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=8), dev)
model = torch.nn.Linear(8, 1).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    xm.optimizer_step(opt{barrier})
"""


def assert_one_step_per_batch_tiling_the_loop(run_dir: Path) -> None:
    events = host_events(run_dir)
    assert step_numbers(run_dir) == list(range(8))
    (loop,) = [e for e in events if e.name == "for x, y in loader"]
    steps = [e for e in events if e.name == "step"]
    assert min(e.start_ns for e in steps) >= loop.start_ns
    assert sum(e.duration_ns for e in steps) >= 0.8 * loop.duration_ns
    meta = _metadata.read(run_dir)
    assert meta is not None and meta.step_rule == "sync"


@pytest.mark.parametrize("barrier", ["", ", barrier=True"])
def test_mp_device_loader_steps_tile_the_loop(ip: Any, logdir: Path, barrier: str) -> None:
    assert run(ip, logdir, MP_LOADER.format(barrier=barrier), "--steps").success
    # one step per batch: the loader's first sync, before any work, makes no empty step
    assert_one_step_per_batch_tiling_the_loop(only_run(logdir).path)


@pytest.mark.parametrize("barrier", ["", ", barrier=True"])
def test_work_left_pending_before_the_loop_is_step_0_not_a_step_of_its_own(
    ip: Any, logdir: Path, barrier: str
) -> None:
    # as in a notebook: an earlier cell started the runtime and left a tensor never read,
    # and the cell's own setup leaves another; the loader's first next() launches both
    earlier = "import torch, torch_xla\nleft = torch.ones(3, device=torch_xla.device()) * 2\n"
    assert ip.run_cell(earlier + "left.sum().item()").success
    ip.run_cell("import torch_xla.debug.profiler as xp\nxp.set_tracer_marked_step(False)")
    setup = "\nunread = torch.ones(8, device=dev) * 3\nfor x, y in loader:"
    cell = MP_LOADER.format(barrier=barrier).replace("\nfor x, y in loader:", setup)
    assert "unread" in cell
    assert run(ip, logdir, cell, "--steps").success
    run_dir = only_run(logdir).path
    assert_one_step_per_batch_tiling_the_loop(run_dir)
    # the pending graphs were launched inside step 0, before the first batch's graph
    events = host_events(run_dir)
    first = min((e for e in events if e.name == "step"), key=lambda e: e.start_ns)
    in_first = [
        e
        for e in events
        if e.name == "SyncTensorsGraph"
        and first.start_ns <= e.start_ns < first.start_ns + first.duration_ns
    ]
    assert len(in_first) >= 2


def test_a_step_trace_in_an_earlier_cell_leaves_the_loader_steps_as_they_were(
    ip: Any, logdir: Path
) -> None:
    # a StepTrace sets torch_xla's "a step just synced" flag, which only the loader clears:
    # its first next() then skips its sync, and no sync comes before the first batch ends
    earlier = (
        "import torch, torch_xla\nimport torch_xla.debug.profiler as xp\n"
        "with xp.StepTrace('warm_up', step_num=0):\n"
        "    warm = torch.ones(3, device=torch_xla.device()) * 2\n"
    )
    assert ip.run_cell(earlier).success
    assert ip.user_ns["xp"].get_tracer_marked_step()
    assert run(ip, logdir, MP_LOADER.format(barrier=""), "--steps").success
    assert not ip.user_ns["xp"].get_tracer_marked_step()
    assert_one_step_per_batch_tiling_the_loop(only_run(logdir).path)


def test_a_sync_before_the_loops_first_iteration_ends_no_step() -> None:
    tracker = _steps.StepTracker(FakeEvent, watch_syncs=True)
    tracker.disarm()
    tracker.synced(True)  # the cell's setup syncs: before the loop, no step yet
    tracker.arm(by_loop=True)
    tracker.synced(True)  # MpDeviceLoader's first next() launches what setup left pending
    for _ in range(2):
        tracker.iteration_started()
        tracker.synced(True)
        tracker.iteration_ended()
    tracker.finish()
    assert tracker.rule == "sync"
    assert recorded_steps() == [0, 1]
    assert [s["step_num"] for k, n, s in FakeEvent.log if k == "open"] == [0, 1, 2]


def test_only_the_cells_syncs_count_and_only_for_the_work_they_launch() -> None:
    import threading

    import torch
    import torch_xla

    from xprof_magic._backends.registry import get_backend

    dev = torch_xla.device()
    torch_xla.sync()
    seen: list[bool] = []
    with get_backend().step_hooks(seen.append, lambda begin: None):
        (torch.ones(2, device=dev) * 3).sum().item()  # a graph launched by no sync
        torch_xla.sync()
        pending = torch.ones(2, device=dev) * 5
        other = threading.Thread(target=torch_xla.sync)  # launches `pending`, not the cell
        other.start()
        other.join()
        torch_xla.sync()
        pending = pending * 7
        torch_xla.sync()
    assert seen == [False, False, True]


def test_nested_epochs_give_one_step_per_batch(ip: Any, logdir: Path) -> None:
    body = (
        "import torch, torch_xla\n"
        "x = torch.ones(4, 4, device=torch_xla.device())\n"
        "for epoch in range(2):\n"
        "    for batch in range(3):\n"
        "        x = (x @ x) / 4\n"
        "        torch_xla.sync()\n"
    )
    assert run(ip, logdir, body, "--steps --name synced").success
    assert step_numbers(logdir / "plugins" / "profile" / "synced") == list(range(6))
    lazy = body.replace("        torch_xla.sync()\n", "") + "x.sum().item()\n"
    assert run(ip, logdir, lazy, "--steps --name lazy").success
    run_dir = logdir / "plugins" / "profile" / "lazy"
    assert step_numbers(run_dir) == list(range(6))
    meta = _metadata.read(run_dir)
    assert meta is not None and meta.step_rule == "iteration"


def test_a_window_never_reached_says_so_and_keeps_nothing(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ip, logdir, SYNCING_LOOP.format(n=40), "--steps 100:103").success
    out = capsys.readouterr().out
    assert "the cell ran 40 steps; --steps 100:103 never started" in out
    assert "choose a window within steps 0 to 39" in out
    assert _store.runs(logdir) == []
    staging = logdir / _store.STAGING_DIR
    assert not staging.exists() or not any(staging.iterdir())


def test_a_cell_ending_inside_the_window_keeps_what_ran(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ip, logdir, SYNCING_LOOP.format(n=12), "--steps 10:20").success
    assert step_numbers(only_run(logdir).path) == [10, 11]
    assert "the cell ended inside the window --steps 10:20" in capsys.readouterr().out


def test_the_users_step_trace_gets_no_second_marker(ip: Any, logdir: Path) -> None:
    body = (
        "import torch, torch_xla\n"
        "import torch_xla.debug.profiler as xp\n"
        "x = torch.ones(4, 4, device=torch_xla.device())\n"
        "def one_step(i):\n"
        "    global x\n"
        "    with xp.StepTrace('train_step', step_num=i):\n"
        "        x = (x @ x) / 4\n"
        "for i in range(4):\n"
        "    one_step(i)\n"
    )
    assert run(ip, logdir, body, "--steps --name all").success
    run_dir = logdir / "plugins" / "profile" / "all"
    assert step_numbers(run_dir, "train_step") == [0, 1, 2, 3]
    assert step_numbers(run_dir) == []
    meta = _metadata.read(run_dir)
    assert meta is not None and meta.step_rule == "user"
    # a window counts the user's steps
    assert run(ip, logdir, body, "--steps 1:3 --name window").success
    run_dir = logdir / "plugins" / "profile" / "window"
    assert step_numbers(run_dir, "train_step") == [1, 2]
    assert step_numbers(run_dir) == []


def test_steps_that_find_nothing_say_so(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ip, logdir, "y = 1 + 1", "--steps").success
    assert "--steps found no step to mark" in capsys.readouterr().out


@pytest.mark.parametrize("window", ["-1:3", "5:2", "a:b"])
def test_a_bad_window_is_a_usage_error_and_the_cell_does_not_run(
    ip: Any, logdir: Path, window: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns.pop("refused", None)
    run(ip, logdir, "refused = 1", f"--steps={window}")
    err = capsys.readouterr().err
    assert "UsageError" in err and "--steps" in err
    assert "refused" not in ip.user_ns and not logdir.exists()


def test_the_script_api_takes_a_window(tmp_path: Path) -> None:
    import torch
    import torch_xla

    x = torch.ones(4, 4, device=torch_xla.device())
    with xprof_magic.capture(logdir=tmp_path, name="api", server=False, steps="2:4") as cap:
        for _ in range(6):
            x = (x @ x) / 4
            torch_xla.sync()
    assert cap.result is not None
    assert step_numbers(cap.result.run_dir) == [2, 3]
    assert cap.result.metadata.step_window == "2:4"
    assert "2 steps (2 to 3 of the cell" in cap.result.text()
    with pytest.raises(ValueError, match="negative"):
        xprof_magic.capture(logdir=tmp_path, steps="-2:")


def test_the_step_hooks_do_not_start_the_runtime() -> None:
    code = (
        "from torch_xla import _XLAC\n"
        "from xprof_magic._backends.registry import get_backend\n"
        "backend = get_backend()\n"
        "seen = []\n"
        "with backend.step_hooks(seen.append, seen.append):\n"
        "    pass\n"
        "assert not backend.runtime_started()\n"
        "assert not _XLAC._xla_runtime_is_initialized()\n"
        "import torch, torch_xla\n"
        "with backend.step_hooks(seen.append, seen.append):\n"
        "    torch_xla.sync()\n"
        "    y = (torch.ones(2, device=torch_xla.device()) * 2).sum()\n"
        "    torch_xla.sync()\n"
        "assert seen == [False, True], seen\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_a_window_over_iterations_when_nothing_syncs(ip: Any, logdir: Path) -> None:
    body = (
        "import torch, torch_xla\n"
        "x = torch.ones(4, 4, device=torch_xla.device())\n"
        "for i in range(6):\n"
        "    x = (x @ x) / 4\n"
        "x.sum().item()\n"
    )
    assert run(ip, logdir, body, "--steps 2:4").success
    run_dir = only_run(logdir).path
    assert step_numbers(run_dir) == [2, 3]
    meta = _metadata.read(run_dir)
    assert meta is not None and (meta.step_rule, meta.steps_first) == ("iteration", 2)
