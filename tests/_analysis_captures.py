"""Real torch_xla captures on the CPU for the analysis tests, laid out as the core lays them out.

The core's capture API was being written at the same time, so this helper makes runs itself:
``<logdir>/plugins/profile/<name>/`` with ``<host>.xplane.pb`` and an ``xprof_magic.json``
holding what the core records (labels measured by the label wrappers, step times, wall time,
the torch_xla metrics delta). Labels are plain TraceMe events, as the core's wrappers emit.

Run as a script to measure the analysis on a small and a large capture::

    PJRT_DEVICE=CPU TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python tests/_analysis_captures.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["Labeller", "make_run", "shapes_cell", "steps_cell", "write_metadata"]


class Labeller:
    """The core's label and step wrappers in miniature: a TraceMe plus a host timer."""

    def __init__(self) -> None:
        import torch_xla

        self._trace_me = torch_xla._XLAC.profiler.TraceMe
        self._stack: list[str] = []
        self.totals: dict[tuple[str, ...], list[float]] = {}
        self.steps: list[float] = []

    @contextmanager
    def label(self, name: str) -> Iterator[None]:
        self._stack.append(name)
        path = tuple(self._stack)
        start = time.perf_counter()
        try:
            with self._trace_me(name):
                yield
        finally:
            entry = self.totals.setdefault(path, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - start
            self._stack.pop()

    @contextmanager
    def step(self) -> Iterator[None]:
        start = time.perf_counter()
        with self._trace_me("step", _r=1, step_num=len(self.steps)):
            yield
        self.steps.append(time.perf_counter() - start)


def _metrics() -> tuple[dict[str, int], dict[str, tuple[int, float]]]:
    import torch_xla.debug.metrics as met

    counters = {n: int(met.counter_value(n) or 0) for n in met.counter_names()}
    metrics: dict[str, tuple[int, float]] = {}
    for n in met.metric_names():
        data = met.metric_data(n)
        if data:
            total = float(data[1])
            metrics[n] = (int(data[0]), total / 1e9 if n.endswith("Time") else total)
    return counters, metrics


def _delta(before: Any, after: Any) -> dict[str, Any]:
    (c0, m0), (c1, m1) = before, after
    counters = {n: v - c0.get(n, 0) for n, v in c1.items() if v != c0.get(n, 0)}
    metrics = {
        n: {"count": c - m0.get(n, (0, 0.0))[0], "total_s": t - m0.get(n, (0, 0.0))[1]}
        for n, (c, t) in m1.items()
        if c != m0.get(n, (0, 0.0))[0]
    }
    return {"counters": counters, "metrics": metrics}


def write_metadata(run_dir: Path, data: dict[str, Any]) -> None:
    (run_dir / "xprof_magic.json").write_text(json.dumps(data, indent=1), encoding="utf-8")


def make_run(logdir: Path, name: str, body: Callable[[Labeller], None], cell: str = "") -> Path:
    """Trace ``body`` into ``<logdir>/plugins/profile/<name>`` and write its metadata."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.profiler as xp
    import torch_xla.runtime as xr

    staging = Path(tempfile.mkdtemp(dir=logdir, prefix=".staging-"))
    labeller = Labeller()
    before = _metrics()
    xp.start_trace(str(staging))
    start_ns, t0 = time.time_ns(), time.perf_counter()
    error: dict[str, str] | None = None
    try:
        body(labeller)
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc)}
    wall_s = time.perf_counter() - t0
    xm.wait_device_ops()
    xp.stop_trace()
    end_ns = time.time_ns()
    (session,) = (staging / "plugins" / "profile").iterdir()
    run_dir = logdir / "plugins" / "profile" / name
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    session.rename(run_dir)
    shutil.rmtree(staging)
    host = next(run_dir.glob("*.xplane.pb")).name[: -len(".xplane.pb")]
    iso = lambda ns: datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat()  # noqa: E731
    write_metadata(
        run_dir,
        {
            "schema": 1,
            "run": name,
            "cell": cell,
            "labels": [
                {"path": list(p), "count": int(c), "total_s": t}
                for p, (c, t) in labeller.totals.items()
            ],
            "steps": labeller.steps,
            "options": {},
            "start": iso(start_ns),
            "end": iso(end_ns),
            "start_ns": start_ns,
            "end_ns": end_ns,
            "wall_s": wall_s,
            "status": "ok" if error is None else "error",
            "error": error,
            "backend": "torch_xla",
            "device": str(xr.device_type()),
            "host": host,
            "versions": {"torch_xla": torch_xla.__version__},
            "metrics": _delta(before, _metrics()),
        },
    )
    return run_dir


SHAPES_CELL = """\
for i in range(3):
    x = torch.randn(4 + i, 32, device=dev)
    with xp.Trace("user_block"):
        y = (x @ w).relu()
    nz = torch.nonzero(x > 0)
    torch_xla.sync()
"""


def shapes_cell(lab: Labeller) -> None:
    """A loop whose input shape changes every iteration, with a CPU fallback and a user trace.

    Marker blocks as the magic would place them, one ``step`` per iteration, and the user's
    ``xp.Trace`` nested in a marker block (no sync inside it, as torch_xla requires).
    """
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp

    dev = torch_xla.device()
    w = torch.ones(32, 32, device=dev)
    with lab.label("for i in range(3):"):
        for i in range(3):
            with lab.step():
                with lab.label("x = torch.randn(4 + i, 32, device=dev)"):
                    x = torch.randn(4 + i, 32, device=dev)
                with lab.label('with xp.Trace("user_block"):'), xp.Trace("user_block"):
                    y = (x @ w).relu()
                with lab.label("nz = torch.nonzero(x > 0)"):
                    torch.nonzero(x > 0)
                with lab.label("torch_xla.sync()"):
                    del y
                    torch_xla.sync()


STEPS_CELL = """\
for i in range(6):
    with xp.StepTrace("train_step", step_num=i):
        loss = (torch.randn(16, 32, device=dev) @ w).tanh().mean()
"""


def steps_cell(lab: Labeller, steps: int = 6, width: int = 32) -> None:
    """A fixed-shape loop under ``xp.StepTrace``: compiles once or twice, then reuses."""
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp

    dev = torch_xla.device()
    w = torch.ones(width, width, device=dev)
    with lab.label(f"for i in range({steps}):"):
        for i in range(steps):
            with (
                xp.StepTrace("train_step", step_num=i),
                lab.label("loss = (torch.randn(16, 32, device=dev) @ w).tanh().mean()"),
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
            "large: 500 steps": make_run(
                logdir, "large", lambda lab: steps_cell(lab, steps=500, width=256)
            ),
            "larger: 3000 steps": make_run(
                logdir, "larger", lambda lab: steps_cell(lab, steps=3000, width=64)
            ),
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
