"""Timings that the tests used to assert, measured here instead (a test asserting a time fails
on a loaded machine and says nothing on an idle one).

``python -m bench load-ext [REPS]``: ``%load_ext xprof_magic`` against ``%load_ext
tensorboard``, each in fresh processes, interleaved, in IPython's ``InteractiveShell`` started
before the clock (IPython's own start is not counted); median of REPS (default 9, at least 5)
each. Target: ≤ 50 ms, or ≤ 2× TensorBoard's.

``python -m bench host-steps``: ``%xprof capture`` of two running torch_xla workers, one of
which waits 20 ms in each step (tests/_worker.py); the step time the summary gives each host.
The slow host's must be at least its 20 ms wait.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "_worker.py"
LOAD_TARGET_S = 0.050
LOAD_TARGET_RATIO = 2.0
SLOW_STEP_S = 0.020

_LOAD = """
import sys, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
started = time.perf_counter()
ip.run_line_magic("load_ext", sys.argv[1])
took = time.perf_counter() - started
assert sys.argv[1] in ip.extension_manager.loaded, "the extension did not load"
assert "torch" not in sys.modules, "loading imported torch"
print(took)
"""


def load_ext(reps: int = 9) -> dict[str, list[float]]:
    """Seconds of ``%load_ext`` for each extension, one fresh process per measurement."""
    reps = max(reps, 5)
    found: dict[str, list[float]] = {"xprof_magic": [], "tensorboard": []}
    for rep in range(reps):
        order = list(found) if rep % 2 == 0 else list(reversed(found))
        for ext in order:
            done = subprocess.run(
                [sys.executable, "-c", _LOAD, ext],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,  # ``-c`` puts the folder first on sys.path: this checkout's package
            )
            if done.returncode != 0:
                raise RuntimeError(f"%load_ext {ext} failed:\n{done.stderr[-2000:]}")
            found[ext].append(float(done.stdout.strip().splitlines()[-1]))
    return found


def load_ext_report(found: dict[str, list[float]]) -> str:
    ours, theirs = (statistics.median(found[k]) for k in ("xprof_magic", "tensorboard"))
    met = ours <= LOAD_TARGET_S or ours <= LOAD_TARGET_RATIO * theirs
    return "\n".join(
        [
            f"- `%load_ext xprof_magic`: median **{ours * 1e3:.1f} ms** "
            f"(min {min(found['xprof_magic']) * 1e3:.1f}, max "
            f"{max(found['xprof_magic']) * 1e3:.1f}; {len(found['xprof_magic'])} fresh "
            "processes, IPython's InteractiveShell started before the clock; torch not imported).",
            f"- `%load_ext tensorboard`, the same way, interleaved: median {theirs * 1e3:.1f} ms "
            f"(min {min(found['tensorboard']) * 1e3:.1f}, max "
            f"{max(found['tensorboard']) * 1e3:.1f}).",
            f"- Ratio **{ours / theirs:.1f}×**; target ≤ {LOAD_TARGET_S * 1e3:.0f} ms or "
            f"≤ {LOAD_TARGET_RATIO:g}× TensorBoard's: **{'met' if met else 'not met'}**.",
        ]
    )


def host_steps(duration_ms: int = 1500) -> dict[str, Any]:
    """Capture a fast and a slow worker at once; each host's step name, count and time."""
    import xprof_magic
    from tests._kernel import Kernel, free_port, with_server

    ports = {"worker_a": free_port(), "worker_b": free_port()}
    sleeps = {"worker_a": 0, "worker_b": round(SLOW_STEP_S * 1000)}
    workers = {
        label: subprocess.Popen(
            [sys.executable, str(WORKER), str(port), label, str(sleeps[label])],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=with_server(),
        )
        for label, port in ports.items()
    }
    kernel = None
    try:
        for label, worker in workers.items():
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError(f"worker {label} did not start")
        kernel = Kernel(with_server())
        kernel.ok("%load_ext xprof_magic")
        with tempfile.TemporaryDirectory(prefix="bench-host-steps-") as logdir:
            addresses = ",".join(f"localhost:{port}" for port in ports.values())
            kernel.ok(
                f"%xprof capture {addresses} --duration-ms {duration_ms} --logdir {logdir} "
                "--name pair --no-display"
            )
            summary = xprof_magic.summarize("pair", logdir=logdir)
        rows = {row.host: row for row in summary.hosts}
        return {
            label: {
                "sleep_s": sleeps[label] / 1000,
                "step_name": rows[f"localhost_{port}"].step_name,
                "steps": rows[f"localhost_{port}"].steps,
                "step_s": rows[f"localhost_{port}"].step_s,
            }
            for label, port in ports.items()
        }
    finally:
        if kernel is not None:
            kernel.close()
        for worker in workers.values():
            worker.kill()
            worker.wait()


def host_steps_report(found: dict[str, Any]) -> str:
    lines = ["| worker | waits per step | steps captured | step time (summary) |"]
    lines.append("| --- | --- | --- | --- |")
    for label, row in found.items():
        step = "none" if row["step_s"] is None else f"{row['step_s'] * 1e3:.1f} ms"
        lines.append(f"| {label} | {row['sleep_s'] * 1e3:.0f} ms | {row['steps']} | {step} |")
    slow = found["worker_b"]["step_s"]
    held = "yes" if slow is not None and slow >= SLOW_STEP_S else "no"
    wait = f"{SLOW_STEP_S * 1e3:.0f} ms"
    lines += ["", f"- The slow host's step holds its {wait} wait: **{held}**."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m bench load-ext [REPS]`` or ``python -m bench host-steps``."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if argv[:1] == ["load-ext"]:
        print(load_ext_report(load_ext(int(argv[1]) if len(argv) > 1 else 9)))
        return 0
    if argv[:1] == ["host-steps"]:
        print(host_steps_report(host_steps()))
        return 0
    print("usage: python -m bench load-ext [REPS] | python -m bench host-steps", file=sys.stderr)
    return 2
