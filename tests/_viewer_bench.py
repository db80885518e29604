"""Time from "a run appears" to "the viewer answers ``run_tools`` and serves its trace".

``python tests/_viewer_bench.py CAPTURE_DIR [REPEATS]``: CAPTURE_DIR holds one capture folder
(``<host>.xplane.pb`` ...), e.g. made by ``_viewer_capture.py``. Cold: no server yet, the run is
on disk, the clock covers starting the server. Warm: the server runs, the run is moved into
place with one rename (as the store commits it), the clock starts after the rename.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from xprof_magic import _store, _viewer
from xprof_magic._viewer.launch import VIEWER_DIR_ENV

__all__ = ["main"]


def _place(capture: Path, logdir: Path, run: str) -> None:
    staged = logdir / f".staged-{run}"
    shutil.copytree(capture, staged)
    (logdir / "plugins" / "profile").mkdir(parents=True, exist_ok=True)
    os.rename(staged, logdir / "plugins" / "profile" / run)


def _answer(viewer: _viewer.Viewer, run: str, host: str) -> None:
    tools = _viewer.fetch_json(viewer, "run_tools", run=run)
    assert "trace_viewer@" in tools, tools
    trace = _viewer.fetch_json(viewer, "data", run=run, tag="trace_viewer@", host=host)
    assert trace["traceEvents"], trace


def _report(name: str, seconds: list[float]) -> None:
    ms = sorted(1000 * s for s in seconds)
    print(
        f"{name}: median {statistics.median(ms):.0f} ms, min {ms[0]:.0f}, max {ms[-1]:.0f} "
        f"(n={len(ms)})"
    )


def main(capture: Path, repeats: int) -> None:
    host = _store.hosts(capture)[0]
    work = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    os.environ[VIEWER_DIR_ENV] = str(work / "viewers")
    kinds: tuple[_viewer.ViewerKind, ...] = ("xprof", "tensorboard")
    for kind in kinds:
        cold, answered = [], []
        for i in range(repeats):
            logdir = work / f"{kind}-cold-{i}"
            _place(capture, logdir, "run")
            start = time.perf_counter()
            outcome = _viewer.ensure_viewer(logdir, kind=kind)
            assert isinstance(outcome, _viewer.Launched), outcome
            answered.append(time.perf_counter() - start)
            _answer(outcome.viewer, "run", host)
            cold.append(time.perf_counter() - start)
            _viewer.stop_viewer(outcome.viewer)
        _report(f"{kind} cold, server answers", answered)
        _report(f"{kind} cold, run_tools + trace served", cold)

        logdir = work / f"{kind}-warm"
        logdir.mkdir()
        outcome = _viewer.ensure_viewer(logdir, kind=kind)
        assert isinstance(outcome, _viewer.Launched), outcome
        warm = []
        for i in range(repeats):
            _place(capture, logdir, f"run{i}")
            start = time.perf_counter()
            _answer(outcome.viewer, f"run{i}", host)
            warm.append(time.perf_counter() - start)
        _report(f"{kind} warm, new run: run_tools + trace served", warm)
        _viewer.stop_viewer(outcome.viewer)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 5)
