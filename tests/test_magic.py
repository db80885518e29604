"""%%xprof in an in-process IPython shell, with real torch_xla on the CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests.conftest import only_run, run
from xprof_magic._analysis.summary.blocks import line_of
from xprof_magic._runs import store as _store

from .conftest import event_names, trace_events

TRAIN = """
import torch, torch_xla
import torch_xla.debug.profiler as xp
dev = torch_xla.device()
model = torch.nn.Linear(16, 4).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    with xp.StepTrace("train_step", step_num=i):
        # xprof: forward
        loss = model(torch.randn(8, 16, device=dev)).pow(2).mean()
        # xprof: backward
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch_xla.sync()
loss.item()
"""


def test_value_names_magics_and_shell_commands_behave_as_without_the_magic(
    ip: Any, logdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # The shell is shared by the session: the names this cell binds must be new here.
    for name in ("t", "doubled", "torch", "torch_xla"):
        ip.user_ns.pop(name, None)
    before = set(ip.user_ns)
    result = run(
        ip,
        logdir,
        "import torch, torch_xla\n"
        "t = torch.ones(3, device=torch_xla.device()) * 2\n"
        "%time doubled = t.sum().item()\n"
        "!echo from-the-shell\n"
        "doubled + 1",
    )
    assert result.success, result.error_in_exec
    assert result.result == 7.0
    assert ip.user_ns["doubled"] == 6.0
    assert set(ip.user_ns) - before >= {"t", "doubled"}
    assert ip.user_ns["torch_xla"].__name__ == "torch_xla"
    assert not [k for k in set(ip.user_ns) - before if "xprof" in k]
    out = capfd.readouterr().out
    assert "from-the-shell" in out and "Wall time" in out
    assert "xprof: run " in out and str(logdir) in out


def test_trailing_semicolon_hides_the_value(ip: Any, logdir: Path) -> None:
    assert run(ip, logdir, "1 + 1;").result is None
    assert run(ip, logdir, "1 + 1").result == 2


def test_labels_and_steps_land_in_the_trace_of_a_syncing_training_loop(
    ip: Any, logdir: Path
) -> None:
    result = run(ip, logdir, TRAIN, "--name train --steps")
    assert result.success, result.error_in_exec
    info = only_run(logdir)
    assert info.name == "train"
    names = event_names(info.path)
    assert {"forward", "backward", "train_step", "for i in range(3)"} <= names
    assert "dev = torch_xla.device()" in names
    # the cell's own StepTrace marks the steps, so --steps adds no marker of its own
    assert "step" not in names
    steps = [e for e in trace_events(info.path) if e.get("name") == "train_step"]
    assert sorted(int(e["args"]["step_num"]) for e in steps) == [0, 1, 2]
    last = xprof_magic.last()
    assert last is not None and last.run_dir == info.path
    paths = {s.path: s.count for s in last.labels}
    assert paths[("for i in range(3)", "forward")] == 3
    assert paths[("for i in range(3)", "backward")] == 3
    assert len(last.steps) == 3


def test_metadata_records_the_cell_and_its_outcome(ip: Any, logdir: Path) -> None:
    body = "import torch, torch_xla\nx = torch.zeros(2, device=torch_xla.device()).sum().item()"
    run(ip, logdir, body, "--name meta --sync")
    meta = json.loads((only_run(logdir).path / _store.METADATA_FILE).read_text())
    assert meta["cell"].strip() == body
    assert meta["run"] == "meta" and meta["status"] == "ok" and meta["error"] is None
    assert meta["options"]["sync"] is True and meta["options"]["name"] == "meta"
    assert meta["backend"] == "torch_xla" and meta["device"] == "CPU"
    assert meta["versions"]["torch_xla"].startswith("2.9")
    assert meta["end_ns"] > meta["start_ns"] and meta["wall_s"] > 0
    assert [tuple(label["path"]) for label in meta["labels"]][:2] == [
        ("import torch, torch_xla",),
        ("x = torch.zeros(2, device=torch_xla.device()).sum().item()",),
    ]
    assert meta["metrics"]["counters"].get("TransferFromDeviceTime", 0) >= 0
    assert "ExecuteTime" in meta["metrics"]["metrics"]


def test_an_exception_fails_the_cell_once_and_the_capture_is_kept(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(ip, logdir, "a = 1\ndef f():\n    return 1 / 0\nf()\nnever = 1")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "never" not in ip.user_ns and ip.user_ns["a"] == 1
    out = capsys.readouterr().out
    assert out.count("Traceback (most recent call last)") == 1
    assert out.count("ZeroDivisionError: division by zero") == 1
    assert "----> 5 f()" in out and "----> 4     return 1 / 0" in out
    info = only_run(logdir)
    meta = info.metadata or {}
    assert meta["status"] == "error"
    assert meta["error"] == {"type": "ZeroDivisionError", "message": "division by zero"}
    # The summary numbers the cell's lines as the traceback does: the magic is line 1.
    s = xprof_magic.summarize(info.path)
    assert line_of(s.cell, ("f()",)) == 5 and line_of(s.cell, ("a = 1",)) == 2


def test_a_syntax_error_runs_nothing_and_writes_nothing(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A name no other test binds: the in-process shell is shared by the whole session.
    result = run(ip, logdir, "ran_before_the_syntax_error = 1\ndef broken(:\n    pass")
    assert result.success is False
    assert "ran_before_the_syntax_error" not in ip.user_ns
    assert not logdir.exists()
    shown = capsys.readouterr()
    assert "line 3" in shown.out and "SyntaxError: invalid syntax" in shown.out
    assert "the cell was not run" in shown.err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus; %%xprof? lists the options"),
        ("--port x", "%%xprof? lists the options"),
        ("--port 70000", "--port 70000 is not a port"),
        ("--port x", "invalid int value"),
        ("--name ..", "no usable characters"),
    ],
)
def test_bad_options_refuse_the_cell(
    ip: Any, logdir: Path, options: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns.pop("refused", None)
    result = run(ip, logdir, "refused = 1", options)
    assert "refused" not in ip.user_ns
    assert not logdir.exists()
    err = capsys.readouterr()
    assert "UsageError" in err.err + err.out and message in err.err + err.out
    assert result.success is False


def test_an_unusable_logdir_refuses_the_cell(ip: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ip.user_ns.pop("refused", None)
    result = ip.run_cell(f"%%xprof --logdir {blocker}/sub\nrefused = 1")
    assert result.success is False and "refused" not in ip.user_ns
    assert list(tmp_path.iterdir()) == [blocker]


def test_a_trace_already_running_refuses_the_cell_and_keeps_earlier_runs(
    ip: Any, logdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, logdir, "x = 1", "--name kept")
    kept = only_run(logdir).path
    before = sorted(p.name for p in kept.iterdir())
    import torch_xla.debug.profiler as xp

    xp.start_trace(str(tmp_path / "user-trace"))
    try:
        ip.user_ns.pop("refused", None)
        result = run(ip, logdir, "refused = 1")
    finally:
        xp.stop_trace()
    assert result.success is False and "refused" not in ip.user_ns
    assert "trace is already running" in capsys.readouterr().err
    assert [r.name for r in _store.runs(logdir)] == ["kept"]
    assert sorted(p.name for p in kept.iterdir()) == before
    assert not (logdir / _store.STAGING_DIR).exists()


def test_two_captures_in_a_row_in_the_same_second_stay_distinct(ip: Any, logdir: Path) -> None:
    run(ip, logdir, "a = 1", "--name same")
    run(ip, logdir, "b = 2", "--name same")
    run(ip, logdir, "c = 3")
    run(ip, logdir, "d = 4")
    names = {r.name for r in xprof_magic.runs(logdir)}
    assert {"same", "same-2"} <= names and len(names) == 4


def test_no_labels_records_no_label_events(ip: Any, logdir: Path) -> None:
    run(ip, logdir, "x = 1\ny = 2", "--no-labels")
    assert "x = 1" not in event_names(only_run(logdir).path)
    last = xprof_magic.last()
    assert last is not None and last.labels == []


def test_script_api_captures_with_the_same_machinery(logdir: Path) -> None:
    import torch
    import torch_xla

    with xprof_magic.capture(logdir=logdir, name="script") as cap, xprof_magic.label("matmul"):
        x = torch.ones(4, 4, device=torch_xla.device())
        (x @ x).sum().item()
    assert cap.result is not None and cap.result.run == "script"
    assert xprof_magic.last() is cap.result
    assert "matmul" in event_names(cap.result.run_dir)
    assert [r.name for r in xprof_magic.runs(logdir)] == ["script"]


def test_script_api_picks_the_backend_its_caller_imported(logdir: Path) -> None:
    """``capture()``'s default is ``auto``, as everywhere else: the framework the calling
    module imported (nothing is started until the ``with`` block)."""
    import jax

    for imported, expected in ((jax, "jax"), (pytest, "torch_xla")):
        names: dict[str, Any] = {"xprof_magic": xprof_magic, "logdir": logdir, "m": imported}
        exec("cap = xprof_magic.capture(logdir=logdir)", names)
        assert names["cap"].plan.backend == expected
    with pytest.raises(ValueError, match="backend='tensorflow' is not a backend; use one of"):
        xprof_magic.capture(logdir=logdir, backend="tensorflow")


def test_line_magic_lists_runs_and_rejects_unknown_subcommands(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, logdir, "x = 1", "--name listed")
    ip.run_line_magic("xprof", f"runs {logdir}")
    assert "listed  [ok]" in capsys.readouterr().out
    ip.run_cell("%xprof frobnicate")
    assert "unknown subcommand" in capsys.readouterr().err


def test_help_says_what_the_options_alone_do_not(ip: Any) -> None:
    doc = " ".join(ip.find_cell_magic("xprof").__doc__.split())
    assert "await" in doc and "ALL interfaces" in doc


def test_load_ext_imports_no_torch_and_unload_removes_the_magics() -> None:
    """Loading registers the magics without importing the profiler; unloading removes them.
    (How long the load takes is measured by ``python -m bench load-ext``.)"""
    code = (
        "import sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "ip.run_line_magic('load_ext', 'xprof_magic')\n"
        "assert 'xprof' in ip.magics_manager.magics['cell']\n"
        "assert 'torch' not in sys.modules and 'torch_xla' not in sys.modules\n"
        "ip.run_line_magic('unload_ext', 'xprof_magic')\n"
        "assert 'xprof' not in ip.magics_manager.magics['cell']\n"
        "assert 'xprof' not in ip.magics_manager.magics['line']\n"
        "print('unloaded')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "unloaded"


def test_a_syntax_error_shows_the_users_line_not_the_magics_insides(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, logdir, "x = 1\ny = (1,")
    out = capsys.readouterr().out
    assert "SyntaxError" in out and "y = (1," in out
    assert "_magic.py" not in out and "ast.py" not in out


def test_unclosed_quotes_are_a_usage_error(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns.pop("refused", None)
    run(ip, logdir, "refused = 1", '--name "abc')
    ip.run_cell('%xprof view "abc')
    err = capsys.readouterr()
    assert err.err.count("UsageError") == 2 and "check the quotes" in err.err
    assert "refused" not in ip.user_ns and not logdir.exists()


def test_an_unusable_profile_folder_refuses_the_cell_before_it_runs(ip: Any, logdir: Path) -> None:
    (logdir / "plugins").mkdir(parents=True)
    (logdir / "plugins" / "profile").write_text("not a folder")
    ip.user_ns.pop("refused", None)
    result = run(ip, logdir, "refused = 1")
    assert result.success is False and "refused" not in ip.user_ns


def test_labels_follow_lines_joined_by_a_continued_magic(ip: Any, logdir: Path) -> None:
    run(ip, logdir, "!echo a \\\n  b\nx = 1\ny = 2")
    last = xprof_magic.last()
    assert last is not None
    names = [stat.path[-1] for stat in last.labels]
    assert "x = 1" in names and "y = 2" in names


def test_xprofs_step_tools_detect_the_steps_of_steps_option(
    ip: Any, logdir: Path, tmp_path: Path
) -> None:
    import shutil

    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    body = (
        "import torch, torch_xla\n"
        "x = torch.ones(16, 16, device=torch_xla.device())\n"
        "for i in range(6):\n"
        "    x = (x @ x) / 16\n"
        "    torch_xla.sync()\n"
    )
    assert run(ip, logdir, body, "--steps --name stepped").success
    copy = tmp_path / "copy"  # the converter writes caches beside the capture
    shutil.copytree(only_run(logdir).path, copy)
    data, _ = xspace_to_tool_data([str(next(copy.glob("*.xplane.pb")))], "overview_page", {})
    tables = json.loads(data)
    (steps,) = [t for t in tables if any(c.get("id") == "stepTimeMs" for c in t.get("cols", []))]
    # XProf leaves the first and the last step out of its table
    assert len(steps["rows"]) >= 4
    assert all(row["c"][0]["v"] for row in steps["rows"])


BLOCKS = """
for i in range(6):
    # xprof: forward
    y = (w @ w).relu()
    # xprof: correct
    c = (y > 0).sum()
    torch_xla.sync()
loss = y.sum().item()
"""
PRINTED_BLOCK = re.compile(r"^ {4}\s*(\d[\d.]* [µmn]?s) {2}\s*(\S.*?)(?: {2}×\d+)?$", re.M)


def test_each_block_is_said_once_under_the_cell(
    ip: Any, logdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Where the summary is shown, the text printed first leaves the labelled blocks to the
    summary's table (the timeline's times); with ``--no-display``, no summary, the text
    lists them by the magic's own timers."""
    from xprof_magic._units import seconds

    ip.run_cell("import torch, torch_xla\nw = torch.randn(64, 64, device=torch_xla.device())")
    capfd.readouterr()
    result = ip.run_cell(f"%%xprof --logdir {logdir} --name blocks --steps\n{BLOCKS}")
    assert result.success, result.error_in_exec
    out = capfd.readouterr().out
    text, shown = out.split("xprof summary — ", 1)
    assert "xprof: run blocks (ok)" in text and "6 steps" in text, out
    assert "labelled blocks" not in text and PRINTED_BLOCK.findall(text) == [], out
    summary = xprof_magic.summarize(logdir / "plugins" / "profile" / "blocks")
    assert summary.label_source == "trace"
    for row in summary.labels:
        if not row.thread:
            assert row.path[-1] in shown and seconds(row.total_s) in shown, row

    assert ip.run_cell(f"%%xprof --logdir {logdir} --name alone --no-display\n{BLOCKS}").success
    out = capfd.readouterr().out
    assert "xprof summary — " not in out
    assert "labelled blocks, host time, largest first:" in out, out
    printed = {name for _, name in PRINTED_BLOCK.findall(out)}
    assert {"forward", "correct"} <= printed, out
