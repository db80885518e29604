"""Real torch_xla captures on the CPU for the analysis tests, made as a script makes them.

Each run is one :func:`xprof_magic.capture` around a cell body that marks its blocks with
:func:`xprof_magic.label` and :func:`xprof_magic.step`, as the magic's rewritten cell does,
so the run folder and its ``xprof_magic.json`` are exactly what the core writes.

Run as a script to measure the analysis on a small and a large capture::

    PJRT_DEVICE=CPU TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python tests/_analysis_captures.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["make_run", "shapes_cell", "steps_cell"]


def make_run(logdir: Path, name: str, body: Callable[[], None]) -> Path:
    """Capture ``body`` into ``<logdir>/plugins/profile/<name>``; return the run folder."""
    import xprof_magic

    with xprof_magic.capture(logdir=logdir, name=name, server=False) as cap:
        body()
    assert cap.result is not None
    return cap.result.run_dir


def shapes_cell() -> None:
    """A loop whose input shape changes every iteration, with a CPU fallback and a user trace.

    Marker blocks as the magic places them for this cell, one ``step`` per iteration, and
    the user's ``xp.Trace`` nested in a marker block (no sync inside it, as torch_xla
    requires)::

        for i in range(3):
            x = torch.randn(4 + i, 32, device=dev)
            with xp.Trace("user_block"):
                y = (x @ w).relu()
            nz = torch.nonzero(x > 0)
            torch_xla.sync()
    """
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp

    from xprof_magic import label, step

    dev = torch_xla.device()
    w = torch.ones(32, 32, device=dev)
    with label("for i in range(3):"):
        for i in range(3):
            with step():
                with label("x = torch.randn(4 + i, 32, device=dev)"):
                    x = torch.randn(4 + i, 32, device=dev)
                with label('with xp.Trace("user_block"):'), xp.Trace("user_block"):
                    y = (x @ w).relu()
                with label("nz = torch.nonzero(x > 0)"):
                    torch.nonzero(x > 0)
                with label("torch_xla.sync()"):
                    del y
                    torch_xla.sync()


def steps_cell(steps: int = 6, width: int = 32) -> None:
    """A fixed-shape loop under ``xp.StepTrace``: compiles once or twice, then reuses::

    for i in range(6):
        with xp.StepTrace("train_step", step_num=i):
            loss = (torch.randn(16, 32, device=dev) @ w).tanh().mean()
    """
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp

    from xprof_magic import label

    dev = torch_xla.device()
    w = torch.ones(width, width, device=dev)
    with label(f"for i in range({steps}):"):
        for i in range(steps):
            with (
                xp.StepTrace("train_step", step_num=i),
                label("loss = (torch.randn(16, 32, device=dev) @ w).tanh().mean()"),
            ):
                x = torch.randn(16, width, device=dev)
                (x @ w).tanh().mean()


_MEASURE = """
import sys, time, tracemalloc
from xprof.profile_data import ProfileData  # loads XProf's native library: not our cost
from xprof_magic._analysis import summarize

def status_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0

base = status_mb("VmRSS")
times = []
for _ in range(3):
    t = time.perf_counter()
    summary = summarize(sys.argv[1], budget_s=None)
    times.append(time.perf_counter() - t)
peak_rss = status_mb("VmHWM") - base
tracemalloc.start()
summarize(sys.argv[1], budget_s=None)
peak_py = tracemalloc.get_traced_memory()[1] / 1e6
times.sort()
print(f"{summary.events} events; summarize best {times[0]:.3f} s, median {times[1]:.3f} s; "
      f"peak RSS +{peak_rss:.0f} MB over the {base:.0f} MB after imports; "
      f"Python allocations peak {peak_py:.1f} MB")
"""


def _bench() -> None:
    """Time and peak memory of ``summarize`` on a small and a larger capture.

    The captures are made here; each is then summarized in a fresh interpreter that imports
    only the analysis, so torch's memory does not hide the analysis's own.
    """
    import subprocess

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        runs = {
            "small: shapes cell, 3 iterations": make_run(logdir, "small", shapes_cell),
            "large: 500 steps": make_run(logdir, "large", lambda: steps_cell(500, 256)),
            "larger: 3000 steps": make_run(logdir, "larger", lambda: steps_cell(3000, 64)),
        }
        for title, run in runs.items():
            size = sum(p.stat().st_size for p in run.glob("*.xplane.pb"))
            result = subprocess.run(
                [sys.executable, "-c", _MEASURE, str(run)],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            )
            print(f"{title}: xplane {size / 1e6:.2f} MB, {result.stdout.strip()}")


if __name__ == "__main__":
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    _bench()
