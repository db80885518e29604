"""The marimo quickstart: valid marimo, and run headless as ``make demo`` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._marimo import MARIMO

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "notebooks" / "marimo_quickstart.py"


def test_the_quickstart_passes_marimos_own_check() -> None:
    done = subprocess.run(
        [MARIMO, "check", "--strict", str(QUICKSTART)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_demo_runs_the_quickstart_headless_and_prints_its_captures(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PJRT_DEVICE": "CPU",
        "XPROF_MAGIC_LOGDIR": str(tmp_path / "logs"),
        "XPROF_MAGIC_NO_SERVER": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "notebooks" / "demo.py"), str(QUICKSTART)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "xprof: run marimo-train (ok)" in out and "6 steps" in out, out
    for label in ("data  ×6", "forward  ×6", "backward  ×6", "optimizer  ×6"):
        assert label in out, out
    assert "xprof: run marimo-eval (ok)" in out and "evaluate" in out, out
    assert "xprof summary — run marimo-train" in out, out
    assert "2 run(s) in" in out, out
