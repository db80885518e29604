"""The protobuf + numpy timeline reader gives what the former ``ProfileData`` reader gave.

Real captures of a small training loop on the CPU, made through ``xprof_magic.capture()``,
read by both readers: every field of :class:`TraceFacts` and the whole summary must agree.
The former reader lives on in ``tests/_oracle_trace.py`` as the oracle.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import _oracle_trace as oracle
from xprof_magic._analysis import render_text, summarize
from xprof_magic._analysis.timeline import forks, nesting, pool
from xprof_magic._analysis.timeline import parallel as parallel_pass
from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._analysis.timeline.read import read_planes, read_trace
from xprof_magic._backends.torch_xla_vocabulary import VOCABULARY as TORCH_XLA_WORDS


def _train(steps: int) -> None:
    """A small MLP with labels, a step per iteration, a user trace, a CPU fallback and a
    batch whose shape changes once (a second compilation mid-loop)."""
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp

    import xprof_magic

    dev = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    with xprof_magic.label("for i in range(steps):"):
        for i in range(steps):
            batch = 32 if i != steps // 2 else 16
            x = torch.randn(batch, 64, device=dev)
            y = torch.randint(0, 10, (batch,), device=dev)
            with xprof_magic.step():
                with xprof_magic.label("forward"), xp.Trace("user_forward"):
                    loss = loss_fn(model(x), y)
                with xprof_magic.label("backward"):
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                if i == 1:
                    with xprof_magic.label("ns::looks_like_runtime"):
                        torch.nonzero(x > 0)
                with xprof_magic.label("torch_xla.sync()"):
                    torch_xla.sync()


def _background(batches: int) -> None:
    """A second Python thread with nested traces (a data loader's), so the capture has two
    Python lines whose blocks have parents."""
    import torch_xla.debug.profiler as xp

    for _ in range(batches):
        with xp.Trace("load_batch"), xp.Trace("decode"):
            time.sleep(0.002)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch_xla.core.xla_model as xm

    import xprof_magic

    logdir = tmp_path_factory.mktemp("reader")
    with xprof_magic.capture(logdir=logdir, name="mlp", server=False) as cap:
        loader = threading.Thread(target=_background, args=(12,))
        loader.start()
        _train(24)
        loader.join()
        xm.wait_device_ops()
    assert cap.result is not None
    return cap.result.run_dir


def _xplane(run_dir: Path) -> Path:
    (path,) = run_dir.glob("*.xplane.pb")
    return path


def _args(run_dir: Path) -> dict[str, Any]:
    """What the summary passes the reader: the labels' names, the cell's clock times and
    the backend's timeline names."""
    meta = json.loads((run_dir / "xprof_magic.json").read_text(encoding="utf-8"))
    return {
        "label_names": frozenset(label["path"][-1] for label in meta["labels"]),
        "cell_ns": (meta["start_ns"], meta["end_ns"]),
        "runtime": TORCH_XLA_WORDS.timeline,
    }


def _same(new: Any, old: Any, where: str = "") -> None:
    """Equal field by field, recursively; floats to a relative 1e-12 (sums may reorder)."""
    if dataclasses.is_dataclass(new) and not isinstance(new, type):
        assert type(new) is type(old), where
        for f in dataclasses.fields(new):
            _same(getattr(new, f.name), getattr(old, f.name), f"{where}.{f.name}")
    elif isinstance(new, dict):
        assert isinstance(old, dict), where
        assert list(new) == list(old), f"{where}: keys or their order differ"
        for key in new:
            _same(new[key], old[key], f"{where}[{key!r}]")
    elif isinstance(new, (list, tuple)):
        assert isinstance(old, type(new)) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(new, float) or isinstance(old, float):
        assert math.isclose(new, old, rel_tol=1e-12, abs_tol=1e-6), f"{where}: {new} != {old}"
    else:
        assert new == old, f"{where}: {new!r} != {old!r}"


def _former(facts: TraceFacts) -> TraceFacts:
    """The facts the former reader had: it kept no spans for the step breakdown, nor the
    programs that ran or compiled."""
    return dataclasses.replace(facts, spans={}, programs_ran={}, programs=[])


def test_facts_equal_the_former_readers(run_dir: Path) -> None:
    args = _args(run_dir)
    new = read_trace(_xplane(run_dir), **args)
    old = oracle.read_trace(_xplane(run_dir), **args)
    _same(_former(new), old)
    assert {"compile", "device"} <= set(new.spans)
    assert new.programs_ran and all(ns > 0 for ns in new.programs_ran.values())
    # The capture exercises what the figures come from, so equality is not vacuous.
    kinds = {b.kind for b in new.blocks}
    assert kinds == {"label", "step", "trace"}, kinds
    assert sum(b.kind == "step" for b in new.blocks) == 24
    assert "ns::looks_like_runtime" in {b.name for b in new.blocks}
    assert new.compile_count >= 2 and any(b.compiles for b in new.blocks)
    assert new.device_ops and new.host_ops and new.compile_ops and new.has_cpu_client
    assert new.cpu_xla_busy_ns > 0 and new.window is not None
    assert {"python", "tf_XLAPjRtCpuClient"} <= set(new.groups)


def test_the_whole_timeline_without_a_cell_window(run_dir: Path) -> None:
    new = read_trace(_xplane(run_dir), runtime=TORCH_XLA_WORDS.timeline)
    old = oracle.read_trace(_xplane(run_dir))
    _same(_former(new), old)
    assert {b.kind for b in new.blocks} == {"trace", "step"}, "no label names: traces"


def test_array_nesting_equals_the_stack_walk(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _args(run_dir)
    fast = read_trace(_xplane(run_dir), **args)
    monkeypatch.setattr(nesting, "nest", nesting.walk)
    _same(read_trace(_xplane(run_dir), **args), fast)


def test_the_summary_is_the_same_with_either_reader(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = summarize(run_dir, budget_s=None)

    # Wherever summarize lives, it reads the timeline through its module's read_trace. The
    # former reader kept no spans nor programs: those come from the new one in both.
    def former(*args: Any, **kwargs: Any) -> TraceFacts:
        new = read_trace(*args, **kwargs)
        old = oracle.read_trace(*args, **kwargs)
        return dataclasses.replace(
            old, spans=new.spans, programs_ran=new.programs_ran, programs=new.programs
        )

    monkeypatch.setattr(sys.modules[summarize.__module__], "read_trace", former)
    old = summarize(run_dir, budget_s=None)
    assert new.complete and new.labels and new.steps is not None and new.device_ops
    new, old = dataclasses.replace(new, read_s=0.0), dataclasses.replace(old, read_s=0.0)
    _same(new, old)
    assert render_text(new) == render_text(old)


def test_a_file_that_is_not_a_timeline_is_a_value_error(tmp_path: Path) -> None:
    bad = tmp_path / "host.xplane.pb"
    bad.write_text("hello, this is not a profile\n")
    with pytest.raises(ValueError, match="not a profiler timeline"):
        read_trace(bad)
    with pytest.raises(ValueError):
        oracle.read_trace(bad)


def test_a_truncated_timeline_is_a_value_error(run_dir: Path, tmp_path: Path) -> None:
    cut = tmp_path / "host.xplane.pb"
    cut.write_bytes(_xplane(run_dir).read_bytes()[:5000])
    with pytest.raises(ValueError):
        read_trace(cut)


# --- planes shaped like XProf's, for what real captures do not show -------------------------


class _Event:
    def __init__(self, name: str, start: float, dur: float, stats: tuple[Any, ...] = ()):
        self.name, self.start_ns, self.duration_ns, self.stats = name, start, dur, stats


class _Line:
    def __init__(self, name: str, events: list[_Event]):
        self.name, self.events = name, tuple(events)

    def close(self) -> None:
        pass


class _Plane:
    def __init__(self, name: str, lines: list[_Line], stats: tuple[Any, ...] = ()):
        self.name, self.lines, self.stats = name, tuple(lines), stats


def _both(planes: list[_Plane], **kwargs: Any) -> TraceFacts:
    new = read_planes(planes, runtime=TORCH_XLA_WORDS.timeline, **kwargs)
    _same(_former(new), oracle.read_planes(planes, **kwargs))
    return new


def test_a_child_that_outlasts_its_parent_is_read_as_before() -> None:
    python = _Line(
        "python",
        [
            _Event("outer", 0, 100),
            _Event("inner", 10, 150),
            _Event("XLAGraphExecutor::Compile", 20, 30),
            _Event("after", 120, 50, (("step_num", "3"),)),
            _Event("late", 160, 20),
            _Event("instant", 165, 0),
            _Event("end: late", 170, 5),
        ],
    )
    client = _Line(
        "tf_XLAPjRtCpuClient/1",
        [
            _Event("fusion", 0, 50, (("hlo_op", "7"),)),
            _Event("dot", 40, 30, (("hlo_op", "8"),)),
            _Event("ThreadpoolListener::Record", 45, 1),
            _Event("copy", 90, 5),
        ],
    )
    env = _Plane(
        "Task Environment", [], (("profile_start_time", "5"), ("profile_stop_time", "205"))
    )
    facts = _both([_Plane("/host:CPU", [python, client]), env], label_names=frozenset({"outer"}))
    assert [b.name for b in facts.blocks] == ["outer", "inner", "after", "late"]
    assert facts.blocks[2].kind == "step" and facts.blocks[1].compiles == 1
    assert facts.blocks[1].parent == 0 and facts.blocks[3].parent == 2
    assert set(facts.device_ops) == {"fusion", "dot", "ThreadpoolListener::Record"}


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 16])
def test_a_child_outlasting_its_parent_anywhere_is_walked(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a child ends after its parent is looked at a chunk of events at a time:
    wherever that child is in the line, the nesting is the stack walk's."""
    import numpy as np

    monkeypatch.setattr(nesting, "_CHECK_CHUNK", chunk)
    # Two top-level events with three children each, the middle child with one of its own,
    # and a last one.
    start = np.array([0, 10, 30, 32, 50, 100, 110, 130, 132, 150, 192], np.float64)
    end = np.array([90, 20, 40, 35, 60, 190, 120, 140, 135, 160, 193], np.float64)
    pushed = np.ones(len(start), bool)
    nested = nesting.nest(start, end, pushed)
    walked = nesting.walk(start, end, pushed)
    assert nested.parent.tolist() == walked.parent.tolist()
    assert walked.parent.tolist() == [-1, 0, 0, 2, 0, -1, 5, 5, 7, 5, -1]
    kids = [i for i, up in enumerate(walked.parent.tolist()) if up >= 0]
    for kid in kids:
        # It outlasts its parent, past the start of the next event after its parent's end:
        # the walk nests that event in it, where counting ends would not.
        late = end.copy()
        late[kid] = start[start >= end[walked.parent[kid]]].min() + 5
        want = nesting.walk(start, late, pushed)
        got = nesting.nest(start, late, pushed)
        for field in ("parent", "depth", "closed"):
            assert getattr(got, field).tolist() == getattr(want, field).tolist(), (kid, field)


def test_device_planes_and_windows_read_as_before() -> None:
    ms = 1e6
    device = _Plane(
        "/device:TPU:0",
        [
            _Line("XLA Modules", [_Event("jit", 40 * ms, 10 * ms), _Event("jit", 70 * ms, 10)]),
            _Line(
                "XLA Ops",
                [
                    _Event("fusion.1", 40 * ms, 6 * ms),
                    _Event("dot.2", 41 * ms, 2 * ms),
                    _Event("dot.3", 45 * ms, 3 * ms),
                    _Event("fusion.1", 70 * ms, 6 * ms),
                ],
            ),
        ],
    )
    python = _Line("python", [_Event("train", -5 * ms, 90 * ms), _Event("x", 95 * ms, 9 * ms)])
    env = _Plane(
        "Task Environment",
        [],
        (("profile_start_time", "1000"), ("profile_stop_time", str(int(1000 + 100 * ms)))),
    )
    planes = [_Plane("/host:CPU", [python]), device, env]
    facts = _both(planes, cell_ns=(1000 + int(10 * ms), 1000 + int(60 * ms)))
    assert facts.window == (10 * ms, 60 * ms)
    assert facts.device_ops["fusion.1"][0] == 2
    _both(planes[:2])


def test_the_full_schema_and_the_lazy_one_read_the_same_events(run_dir: Path) -> None:
    from xprof_magic._analysis.timeline import xspace

    data = _xplane(run_dir).read_bytes()
    full, lazy = xspace.XSpace.FromString(data), xspace.LazyXSpace.FromString(data)
    assert [p.name for p in full.planes] == [p.name for p in lazy.planes]
    for whole, part in zip(full.planes, lazy.planes, strict=True):
        for line, raw in zip(whole.lines, part.lines, strict=True):
            other = xspace.parse_line(raw)
            assert (line.name, line.timestamp_ns) == (other.name, other.timestamp_ns)
            assert [(e.metadata_id, e.offset_ps, e.duration_ps) for e in line.events] == [
                (e.metadata_id, e.offset_ps, e.duration_ps) for e in other.events
            ]
            for event, lazy_event in zip(line.events, other.events, strict=True):
                assert list(event.stats) == [xspace.parse_stat(s) for s in lazy_event.stats]
    assert (
        sum(len(line.events) for p in full.planes for line in p.lines)
        == read_trace(_xplane(run_dir)).events
    )


@pytest.fixture
def lines_read_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Workers take every line they can (none is too small to send); the lines this
    process read itself are recorded. The workers are fresh interpreters, as in a process
    with threads (forked ones: ``test_forks.py``)."""
    monkeypatch.setattr(forks, "safe", lambda: False)
    monkeypatch.setattr(pool, "START_BYTES", 0)
    monkeypatch.setattr(pool, "LINE_MIN_BYTES", 0)
    monkeypatch.setenv(pool.WORKERS_ENV, "2")
    here: list[int] = []
    read_part = parallel_pass._read_part

    def recorded(lines: Any, index: int, settings: Any) -> Any:
        here.append(index)
        return read_part(lines, index, settings)

    monkeypatch.setattr(parallel_pass, "_read_part", recorded)
    return here


@pytest.fixture(scope="module")
def one_process(run_dir: Path) -> TraceFacts:
    """The capture read in this process alone: what the workers' pass must equal."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(pool.WORKERS_ENV, "0")
        return read_trace(_xplane(run_dir), **_args(run_dir))


def _host_lines(run_dir: Path) -> int:
    from xprof_magic._analysis.timeline import xspace

    space = xspace.LazyXSpace()
    space.ParseFromString(_xplane(run_dir).read_bytes())
    return sum(len(p.lines) for p in space.planes if p.name == "/host:CPU")


def test_lines_read_by_workers_add_up_to_the_one_process_pass(
    run_dir: Path, lines_read_here: list[int], one_process: TraceFacts
) -> None:
    parallel = read_trace(_xplane(run_dir), **_args(run_dir))
    # Exactly equal, floats included: the parts are added in the serial pass's order.
    assert parallel == one_process
    assert parallel.compile_count >= 2 and parallel.blocks and parallel.device_ops
    total = _host_lines(run_dir)
    assert total >= 4 and 0 < len(lines_read_here) < total, (lines_read_here, total)


def test_a_worker_that_fails_costs_time_not_the_result(
    run_dir: Path,
    lines_read_here: list[int],
    one_process: TraceFacts,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "_WORKER_MODULE", "xprof_magic._no_such_worker")
    assert read_trace(_xplane(run_dir), **_args(run_dir)) == one_process
    assert sorted(lines_read_here) == list(range(_host_lines(run_dir)))


def test_a_worker_that_never_answers_is_stopped_and_its_lines_read_here(
    run_dir: Path,
    lines_read_here: list[int],
    one_process: TraceFacts,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "_WORKER_MODULE", "tests._hanging_worker")
    monkeypatch.setattr(pool, "ANSWER_S", 1.0)
    started: list[Any] = []
    popen = pool.subprocess.Popen

    def recorded(*a: Any, **k: Any) -> Any:
        started.append(popen(*a, **k))
        return started[-1]

    monkeypatch.setattr(pool.subprocess, "Popen", recorded)
    assert read_trace(_xplane(run_dir), **_args(run_dir)) == one_process
    assert sorted(lines_read_here) == list(range(_host_lines(run_dir)))
    assert len(started) == 2 and all(p.poll() is not None for p in started), "left running"


def test_no_workers_for_the_kernels_quick_pass(
    run_dir: Path, lines_read_here: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(pool.subprocess, "Popen", lambda *a, **k: started.append(a))
    facts = read_trace(_xplane(run_dir), deadline=time.perf_counter() + 60)
    assert facts.events and started == []
    read_trace(_xplane(run_dir))
    assert len(started) == 2, "without a deadline, the same call starts its workers"


def test_workers_do_not_run_the_callers_script_again(run_dir: Path, tmp_path: Path) -> None:
    # multiprocessing's spawn would import an unguarded __main__ again in each worker.
    marker = tmp_path / "runs.txt"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import resource
            import xprof_magic
            from xprof_magic._analysis.timeline import pool

            with open({str(marker)!r}, "a") as f:
                f.write("ran\\n")
            pool.START_BYTES = pool.LINE_MIN_BYTES = 0
            summary = xprof_magic.summarize({str(run_dir)!r})
            assert summary.complete, summary.missing
            assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime > 0, "no worker ran"
            """
        ),
        encoding="utf-8",
    )
    env = {**os.environ, pool.WORKERS_ENV: "2", "PYTHONPATH": str(Path(__file__).parents[1])}
    subprocess.run([sys.executable, str(script)], check=True, env=env, timeout=120)
    assert marker.read_text(encoding="utf-8") == "ran\n"


def test_the_biggest_lines_go_to_workers_and_small_ones_stay() -> None:
    mb = 1_000_000
    # Longest first, to whoever is free soonest; a worker starts 8 MB behind this process.
    lines = [40 * mb, 9 * mb, 41 * mb, mb // 2, 3 * mb]
    assert pool.assign(lines, workers=1) == [0, -1, -1, -1, 0]
    assert pool.assign([40 * mb, 41 * mb, 39 * mb], workers=2) == [0, -1, 1]
    assert pool.assign([2 * mb, mb // 2], workers=3) == [-1, -1]
    assert pool.assign([40 * mb, 41 * mb], workers=0) == [-1, -1]
