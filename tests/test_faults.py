"""Faults survived: a full or vanished log directory, many captures, concurrent kernels."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests.conftest import missing
from xprof_magic._analysis.render.gaps import gaps_said
from xprof_magic._runs import store as _store


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: tests run as root, where mounting one is allowed. A capture's size
    grows with the programs the process has compiled (its metadata holds each one's HLO),
    so after a session's other tests it needs megabytes once the disk is freed."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        missing(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill the disk up to ``leave`` free bytes."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


WORK = (
    "import torch, torch_xla\n"
    "x = torch.randn(64, 64, device=torch_xla.device())\n"
    "for i in range(20):\n"
    "    x = x @ x\n"
    "    torch_xla.sync()\n"
    "value = 41 + 1\n"
    "value"
)


def test_a_full_disk_keeps_the_cells_outcome_and_shows_no_half_run(
    ip: Any, tiny_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logdir = tiny_disk / "logs"
    logdir.mkdir()  # the folder exists; then the disk fills up
    fill(tiny_disk, leave=16 * 1024)
    result = ip.run_cell(f"%%xprof --logdir {logdir} --no-display\n{WORK}")
    assert result.success and result.result == 42
    out = capsys.readouterr()
    assert "could not be stored" in out.out + out.err and "free space" in out.out + out.err
    assert _store.runs(logdir) == []
    assert not (logdir / _store.STAGING_DIR).exists()
    # the profiler is usable again once there is room
    (tiny_disk / "filler").unlink()
    result = ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name after\n{WORK}")
    assert result.success and [r.name for r in _store.runs(logdir)] == ["after"]


def test_a_full_disk_does_not_hide_the_cells_exception(ip: Any, tiny_disk: Path) -> None:
    logdir = tiny_disk / "logs"
    logdir.mkdir()
    fill(tiny_disk, leave=16 * 1024)
    body = WORK.replace("value = 41 + 1", "raise ValueError('the cell failed')")
    result = ip.run_cell(f"%%xprof --logdir {logdir} --no-display\n{body}")
    assert isinstance(result.error_in_exec, ValueError)
    assert _store.runs(logdir) == []


def test_a_log_directory_removed_between_and_during_cells(ip: Any, tmp_path: Path) -> None:
    import shutil

    logdir = tmp_path / "logs"
    assert ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name one\nx = 1").success
    shutil.rmtree(logdir)
    assert ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name two\nx = 2").success
    remove = f"import shutil; shutil.rmtree({str(logdir)!r})\ny = 3\ny"
    result = ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name three\n{remove}")
    assert result.success and result.result == 3
    assert [r.name for r in _store.runs(logdir)] in (["three"], [])


def test_a_hundred_captures_are_all_kept_without_leaking(ip: Any, tmp_path: Path) -> None:
    logdir = tmp_path / "many"

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    cell = f"%%xprof --logdir {logdir} --no-display\nimport torch, torch_xla\n"
    cell += "(torch.ones(8, device=torch_xla.device()) * 3).sum().item()"
    for _ in range(5):  # warm up: compile caches, lazy imports
        assert ip.run_cell(cell).success
    fds_before, threads_before = fds(), threading.active_count()
    for _ in range(100):
        assert ip.run_cell(cell).success
    assert len(_store.runs(logdir)) == 105
    assert fds() <= fds_before + 2
    assert threading.active_count() <= threads_before + 1
    assert not (logdir / _store.STAGING_DIR).exists()


@pytest.mark.slow
def test_two_kernels_writing_one_log_directory_at_once(tmp_path: Path) -> None:
    logdir = tmp_path / "shared"
    script = (
        "import sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython(); ip.run_line_magic('load_ext', 'xprof_magic')\n"
        "for i in range(5):\n"
        "    r = ip.run_cell(f'%%xprof --logdir {sys.argv[1]} --no-display --name same\\n"
        "import torch, torch_xla\\n(torch.ones(4, device=torch_xla.device())*2).sum().item()')\n"
        "    assert r.success, r.error_in_exec\n"
    )
    env = {**os.environ, "XPROF_MAGIC_NO_SERVER": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(logdir)], env=env) for _ in range(2)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    found = _store.runs(logdir)
    assert len(found) == 10 and len({r.name for r in found}) == 10
    assert {(r.metadata or {})["pid"] for r in found} == {p.pid for p in procs}


def test_run_names_from_users_never_escape_the_log_directory(ip: Any, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    for name in ("../escape", "/etc/x", "a/../../b", "..\\\\win", "~root"):
        result = ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name '{name}'\nx = 1")
        assert result.success
    profile = (logdir / "plugins" / "profile").resolve()
    for run in _store.runs(logdir):
        assert run.path.resolve().parent == profile
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
    assert xprof_magic.last() is not None


def test_huge_traces_are_explained_with_a_lowered_threshold(
    ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from xprof_magic._capture import result as _result

    logdir = tmp_path / "logs"
    ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name normal\nx = 1")
    assert "warning" not in capsys.readouterr().out
    monkeypatch.setattr(_result, "TRACE_VIEWER_EVENT_CAP", 1)
    ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name many\nx = 1")
    out = capsys.readouterr().out
    assert "million events" in out and "trace viewer shows about a million" in out
    assert "host_tracer_level=1" in out
    monkeypatch.setattr(_result, "PROTOBUF_LIMIT_BYTES", 64)
    ip.run_cell(f"%%xprof --logdir {logdir} --no-display --name huge\nx = 1")
    assert "protobuf's 2 GB limit" in capsys.readouterr().out
    assert {r.name for r in _store.runs(logdir)} == {"normal", "many", "huge"}


def test_a_timeline_too_big_to_read_gets_a_metadata_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xprof_magic._analysis import summaries
    from xprof_magic._notebook.show import SUMMARY_BUDGET_S

    with (
        xprof_magic.capture(logdir=tmp_path, name="big", server=False) as cap,
        xprof_magic.label("work"),
    ):
        pass
    assert cap.result is not None
    run_dir = cap.result.run_dir
    monkeypatch.setattr(summaries, "FULL_SUMMARY_MAX_BYTES", 1)
    for summary in (
        summaries.summary_of(run_dir, budget_s=SUMMARY_BUDGET_S),
        summaries.summary_of(run_dir, budget_s=SUMMARY_BUDGET_S, apart=True),
    ):
        assert not summary.pending
        assert [gap.what for gap in summary.missing] == ["timeline too large"]
        assert "too large to read" in gaps_said(summary)[0]
        assert [row.path for row in summary.labels] == [("work",)]
    monkeypatch.setattr(summaries, "FULL_SUMMARY_MAX_BYTES", 2**30)
    full = summaries.summary_of(run_dir, budget_s=SUMMARY_BUDGET_S, apart=True)
    assert full.complete and not full.missing
