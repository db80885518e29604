"""The TorchTPU backend, with real torch 2.13 and torch-tpu on the CPU host path (no TPU):
the cell's value, errors and names, labels and steps in the capture, a step window, the run
in the real viewer, the summary's words, the choice of backend and bad input.

Runs in .venv-torchtpu only (``-m torchtpu``). No test forces the ``tpu`` device: forcing
it without a TPU aborts the process and makes libtpu query the cloud metadata server, which
the variables below (also set by conftest and the Makefile) keep it from doing anyway.
"""

from __future__ import annotations

import importlib.util
import os

TPU_NO_METADATA = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v6e-1",
    "TPU_WORKER_ID": "0",
    "TPU_WORKER_HOSTNAMES": "localhost",
}
# Before torch is imported; only where TorchTPU is (elsewhere this module is only collected).
if importlib.util.find_spec("torch_tpu") is not None:
    os.environ.update(TPU_NO_METADATA)

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from tests.conftest import host_events, only_run, run, step_numbers  # noqa: E402

pytestmark = pytest.mark.torchtpu

TRAIN = """
import torch, torch_tpu
w = torch.zeros(4)
x = torch.ones(16, 4)
for i in range(4):
    # xprof: update
    w = w + 0.1 * (x @ w - 1).mean()
float(w.sum())
"""


def _meta(logdir: Path) -> Any:
    from xprof_magic._runs import metadata as _metadata

    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None
    return meta


def test_a_steps_cell_keeps_its_value_and_holds_labels_and_steps(ip: Any, logdir: Path) -> None:
    from xprof_magic._backends.torch_tpu_vocabulary import PRIVATE_ROUTE, ROUTE_KEY

    result = run(ip, logdir, TRAIN, "--steps --name train")
    assert result.success, result.error_in_exec
    assert result.result == pytest.approx(float(ip.user_ns["w"].sum()))
    run_dir = only_run(logdir).path
    meta = _meta(logdir)
    assert (meta.backend, meta.device, meta.step_rule) == ("torch_tpu", "CPU", "iteration")
    assert meta.versions["torch-tpu"].startswith("0.2")
    assert meta.versions["torch"].startswith("2.13")
    assert meta.versions[ROUTE_KEY] == PRIVATE_ROUTE
    assert len(meta.steps) == 4
    assert step_numbers(run_dir) == [0, 1, 2, 3]
    names = [event.name for event in host_events(run_dir)]
    assert names.count("update") == 4
    assert {"for i in range(4)", "x = torch.ones(16, 4)", "float(w.sum())"} <= set(names)
    # TorchTPU's RecordFunction callback also records the eager ops themselves.
    assert "aten::mm" in names or "aten::addmv_" in names


def test_the_summary_speaks_of_torchtpu_and_says_only_the_host_was_traced(
    ip: Any, logdir: Path
) -> None:
    from xprof_magic._analysis import render_html, render_text, summarize

    assert run(ip, logdir, TRAIN, "--steps").success
    summary = summarize(only_run(logdir).path)
    text = render_text(summary)
    assert "TorchTPU" in text
    assert "only the host was traced" in text
    assert "Steps: 4" in text
    # the versions that made the capture, in the text and the saved HTML
    assert "Versions: " in text and "torch-tpu 0.2" in text and "torch 2.13" in text
    assert "torch-tpu 0.2" in render_html(summary)
    blocks = {part for row in summary.labels for part in row.path}
    assert "update" in blocks
    # aten ops are TorchTPU's runtime, not blocks of the user's
    assert not [b for b in blocks if b.startswith("aten::")]


def test_a_torchtpu_run_is_summarized_without_importing_torch(ip: Any, logdir: Path) -> None:
    assert run(ip, logdir, TRAIN, "--steps").success
    code = (
        "import sys\n"
        "from xprof_magic._analysis import render_text, summarize\n"
        "assert 'TorchTPU' in render_text(summarize(sys.argv[1]))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'torch_tpu', 'libtpu'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(only_run(logdir).path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_errors_and_names_are_the_cells_own_and_the_run_is_kept(ip: Any, logdir: Path) -> None:
    body = "import torch\nbefore = torch.ones(3) * 2\nraise ValueError('bad shape')\nafter = 1\n"
    ip.user_ns.pop("after", None)
    result = run(ip, logdir, body, "--backend torch_tpu")
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "bad shape"
    assert ip.user_ns["before"].tolist() == [2.0, 2.0, 2.0]
    assert "after" not in ip.user_ns
    meta = _meta(logdir)
    assert (meta.status, meta.error.type) == ("error", "ValueError")


def test_a_window_traces_just_its_steps(ip: Any, logdir: Path) -> None:
    body = "import torch\nv = torch.ones(8, 8)\nfor i in range(10):\n    v = v @ v / 8\n"
    assert run(ip, logdir, body, "--steps 5:8 --backend torch_tpu").success
    run_dir = only_run(logdir).path
    assert step_numbers(run_dir) == [5, 6, 7]
    meta = _meta(logdir)
    assert (meta.step_window, meta.steps_first, meta.step_rule) == ("5:8", 5, "iteration")
    assert len(meta.steps) == 3


def test_xprofs_overview_finds_the_steps(ip: Any, logdir: Path, tmp_path: Path) -> None:
    import shutil

    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    body = "import torch\nv = torch.ones(8, 8)\nfor i in range(12):\n    v = v @ v / 8\n"
    assert run(ip, logdir, body, "--steps 2:9 --backend torch_tpu").success
    copy = tmp_path / "copy"  # the converter writes caches beside the capture
    shutil.copytree(only_run(logdir).path, copy)
    data, _ = xspace_to_tool_data([str(next(copy.glob("*.xplane.pb")))], "overview_page", {})
    tables = json.loads(data)
    (steps,) = [t for t in tables if any(c.get("id") == "stepTimeMs" for c in t.get("cols", []))]
    # XProf leaves the first and the last step out of its table
    assert [row["c"][0]["v"] for row in steps["rows"]] == [f"step {n}" for n in range(3, 8)]


def test_sync_without_a_device_adds_nothing(ip: Any, logdir: Path) -> None:
    from xprof_magic._backends.registry import get_vocabulary

    assert run(ip, logdir, "import torch\nq = torch.ones(2) + 1\n", "--sync").success
    names = {event.name for event in host_events(only_run(logdir).path)}
    assert "q = torch.ones(2) + 1" in names
    assert get_vocabulary("torch_tpu").capture.sync_label not in names


def test_the_cells_own_torchtpu_trace_wins_and_the_run_is_partial(
    ip: Any, logdir: Path, tmp_path: Path
) -> None:
    from torch_tpu._internal.profiler import _impl

    mine = tmp_path / "mine"
    body = (
        "import torch\n"
        "from torch_tpu._internal import profiler as tp\n"
        "before = torch.ones(2) + 1\n"
        f"handler = tp.xprof_trace_handler({str(mine)!r})\n"
        "with tp.profile(activities=[tp.ProfilerActivity.CPU], on_trace_ready=handler):\n"
        "    with torch.profiler.record_function('mine'):\n"
        "        torch.ones(4) * 2\n"
    )
    result = run(ip, logdir, body, "--backend torch_tpu")
    assert result.success, result.error_in_exec
    meta = _meta(logdir)
    assert meta.status == "partial"
    assert any("started a trace" in m for m in meta.messages)
    (xplane,) = mine.glob("plugins/profile/*/*.xplane.pb")
    assert "mine" in {event.name for event in host_events(xplane.parent)}
    names = {event.name for event in host_events(only_run(logdir).path)}
    assert "before = torch.ones(2) + 1" in names and "mine" not in names
    assert _impl.start_trace.__module__ == _impl.__name__


def test_bad_input_is_refused_in_one_line(ip: Any, logdir: Path, capsys: Any) -> None:
    for options, said in (
        ("--steps 5:3 --backend torch_tpu", "holds no step"),
        ("--steps abc --backend torch_tpu", "is not a step window"),
        ("--backend torch_tpux", "invalid choice"),
    ):
        result = run(ip, logdir, "y = 1\n", options)
        assert not result.success
        out = capsys.readouterr()
        assert said in out.out + out.err, options
    assert not logdir.exists() or not list(logdir.rglob("*.xplane.pb"))


def test_a_moved_private_api_fails_in_one_line_naming_the_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch_tpu._internal.profiler import _impl

    from xprof_magic._backends import torch_tpu_private as backend

    monkeypatch.delattr(_impl, "start_trace")
    with pytest.raises(RuntimeError) as raised:
        backend.private_api()
    message = str(raised.value)
    assert "\n" not in message
    assert "torch-tpu 0.2.0" in message and "start_trace" in message
    assert f"torch-tpu=={backend.TRIED}.0" in message


def test_steps_that_compile_after_the_first_are_flagged() -> None:
    from xprof_magic._backends.torch_tpu import step_recompiles

    assert step_recompiles({0: 0, 1: 3, 2: 3, 3: 3}, 3) == ""
    note = step_recompiles({0: 0, 1: 3, 2: 3, 3: 4}, 6)
    assert note.startswith("the cell's steps: num_compilations grew after step 0")
    assert "+1 in step 2" in note and "+2 in step 3" in note
    assert "step 1" not in note


def test_a_recompile_note_reaches_the_summary(logdir: Path) -> None:
    """Non-zero compile counters need a TPU: here the counter is made to grow at steps 2
    and 3, and the rest is the real capture and the real summary."""
    import dataclasses

    import xprof_magic
    from xprof_magic._analysis import render_text, summarize
    from xprof_magic._backends.registry import get_backend
    from xprof_magic._backends.torch_tpu import TorchTpuBackend

    backend = get_backend("torch_tpu")
    assert isinstance(backend, TorchTpuBackend)
    calls = iter([0, 0, 0, 0, 1, 3, 3, 3, 3, 3, 3])
    grows = type("Stats", (), {})

    def fake_stats() -> Any:
        stats = grows()
        stats.num_compilations = next(calls, 3)
        stats.num_cache_hits = stats.num_cache_reqs = 0
        stats.per_entry_stats = []
        return stats

    real = backend._api
    backend._api = dataclasses.replace(real, cache_stats=fake_stats)
    try:
        with xprof_magic.capture(logdir, name="grows", steps=True, backend="torch_tpu") as cap:
            for _ in range(4):
                with xprof_magic.step(), xprof_magic.label("train step"):
                    pass
    finally:
        backend._api = real
    assert cap.result is not None
    text = render_text(summarize(cap.result.run_dir))
    assert "Recompiled: the cell's steps compiled again" in text, text


def test_auto_picks_torchtpu_for_its_imports_devices_and_plain_torch() -> None:
    import torch

    from xprof_magic._backends.detect import choose_backend

    for cell in (
        "import torch_tpu",
        "from torch_tpu._internal import profiler",
        "x = torch.ones(2, device='tpu')",
        "x = torch.ones(2).to('tpu:0')",
        "model.tpu()",
        "import torch\nx = torch.ones(2)",
    ):
        assert choose_backend(cell, {}) == ("torch_tpu", ""), cell
    assert choose_backend("y = x + 1", {"x": torch.ones(2)}) == ("torch_tpu", "")
    assert choose_backend("y = 1", {"torch": torch}) == ("torch_tpu", "")
    assert choose_backend("y = 1", {}) == ("torch_tpu", "")


def test_the_run_is_served_by_the_real_viewer(ip: Any, logdir: Path) -> None:
    from xprof_magic._viewer.process.client import fetch_json
    from xprof_magic._viewer.process.manager import Launched, Reused, ensure_viewer, stop_viewer

    assert run(ip, logdir, TRAIN, "--steps --name served").success
    outcome = ensure_viewer(logdir, timeout=120)
    assert isinstance(outcome, Launched | Reused), outcome
    viewer = outcome.viewer
    try:
        assert "served" in fetch_json(viewer, "runs")
        assert "trace_viewer@" in fetch_json(viewer, "run_tools", run="served")
        hosts = fetch_json(viewer, "hosts", run="served", tag="trace_viewer@")
        trace = fetch_json(
            viewer, "data", run="served", tag="trace_viewer@", host=hosts[0]["hostname"]
        )
        names = {event.get("name") for event in trace["traceEvents"]}
        assert {"update", "for i in range(4)"} <= names
    finally:
        stop_viewer(viewer)


_FRESH = textwrap.dedent(
    """
    import glob, json, sys, tempfile
    import torch
    import torch_tpu._internal.profiler._impl as impl
    from xprof.profile_data import ProfileData

    def names(run):
        (path,) = glob.glob(run + "/plugins/profile/*/*.xplane.pb")
        data = ProfileData.from_file(path)
        return sorted({e.name for p in data.planes for l in p.lines for e in l.events})

    def traced(start, stop):
        run = tempfile.mkdtemp()
        start(run)
        with torch.profiler.record_function("my_label"):
            torch.ones(8, 8) @ torch.ones(8, 8)
        stop()
        return names(run)

    options = impl.ProfileOptions(host_tracer_level=2, device_tracer_level=0,
                                  python_tracer_level=0)
    raw = traced(lambda run: impl.start_trace(run, options), impl.stop_trace)
    from xprof_magic._backends.ports import listens_here
    from xprof_magic._backends.registry import get_backend
    backend = get_backend("torch_tpu")
    ours = traced(backend.start_trace, backend.stop_trace)
    port = int(sys.argv[1])
    before = listens_here(port)
    status = backend.start_server(port)
    again = backend.start_server(port + 1)
    print(json.dumps({"raw": raw, "ours": ours, "before": before, "started": status.started,
                      "listening": listens_here(port), "again": again.message}))
    """
)


def test_loading_the_extension_imports_neither_torch_nor_torchtpu() -> None:
    probe = (
        "import sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "start_ipython().run_line_magic('load_ext', 'xprof_magic')\n"
        "print(sorted(m for m in ('torch', 'torch_tpu', 'libtpu') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_labels_need_no_server_and_the_server_binds_every_interface(tmp_path: Path) -> None:
    """In a fresh process: TorchTPU's bare start_trace records no label (its RecordFunction
    callback is registered by the server's start only); the backend's does, without a
    server; then the server, started, listens on the wildcard address."""
    from tests._kernel import free_port

    port = free_port()
    env = dict(os.environ, **TPU_NO_METADATA, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "my_label" not in found["raw"]
    assert "my_label" in found["ours"] and "aten::mm" in found["ours"]
    assert not found["before"]
    assert found["started"] and found["listening"]
    assert "one server per process" in found["again"]
    assert f"Unable to bind to [::]:{port}" not in done.stderr


def test_a_profiled_function_is_a_torchtpu_run_with_its_labels_and_steps(logdir: Path) -> None:
    """``xprof_magic.profile``, the form TorchTPU's marimo guides would use, picks TorchTPU
    from the names the function uses."""
    import torch
    import torch_tpu  # noqa: F401

    import xprof_magic

    @xprof_magic.profile(logdir=logdir, name="profiled", steps=True)
    def train() -> float:
        x = torch.ones(8, 8)
        for _ in range(3):
            # xprof: matmul
            x = (x @ x) / 8
        return float(x.sum())

    assert train() == 64.0
    meta = _meta(logdir)
    assert (meta.backend, meta.step_rule) == ("torch_tpu", "iteration")
    names = {event.name for event in host_events(only_run(logdir).path)}
    assert {"matmul", "x = torch.ones(8, 8)", "for _ in range(3)"} <= names
    assert step_numbers(only_run(logdir).path) == [0, 1, 2]
