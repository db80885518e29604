"""Real training captures of a chosen size, and what reading them costs.

``python -m bench summary`` (or ``python -m bench.captures``) builds, once, captures of a
3-layer MLP training loop (batch 256, SGD with momentum, two labels and ``torch_xla.sync()``
per step: about 12 KB of ``xplane.pb`` a step) of about 5, 30 and 100 MB under
``bench/.captures/`` (ignored by git), then times, each in a fresh process, median of 3:

- ``summary``: :func:`xprof_magic._analysis.summarize` with no budget, as the magic runs it
  in a process of its own, started with the same environment
  (``cache.SUMMARY_PROCESS_ENV``: one BLAS thread): a capture over 200 MB gets worker
  processes for its biggest lines, one less than the CPUs, forked (the process holds one
  thread: :mod:`xprof_magic._analysis.timeline.forks`), their CPU time counted with the
  process's;
- ``summary_serial``: the same in one process (``XPROF_MAGIC_SUMMARY_WORKERS=0``);
- ``summary_nodiag``: ``summary`` without the diagnosis (no breakdown spans read, no
  compiled programs kept, no verdict), for the diagnosis's cost: ``--routes summary
  summary_nodiag`` (its patch reaches no worker process, so compare it on captures under
  40 MB or with ``XPROF_MAGIC_SUMMARY_WORKERS=0``);
- ``overview_page``: XProf's own converter on the same file;
- ``parse``: a plain ``ParseFromString`` of the whole file with our schema (the floor),
  its schema imported from this package (so its time holds the package's imports too);
- ``parse_bare``: the same with the schema's module loaded alone (protobuf and the parse:
  the floor without this package's imports; ``--routes ... parse_bare``);
- ``summary_warm`` and ``overview_page_warm``: ``summary`` and ``overview_page`` with their
  imports done before the clock starts, as the magic's summary process started ahead
  (``cache.Spare``: every capture's but a kernel's first) and XProf's running server have
  them (``--routes ... summary_warm overview_page_warm``).

``--against DIR`` (a checkout of the code before a change, e.g. ``git worktree add DIR
main``) runs the ``summary`` route with that code too, in turns with the others: before and
after, side by side in one run.

Each time counts from before the imports the route needs to its end (Python's own start
excluded); the CPU time beside it is the process's, which the other work on a shared
machine disturbs less than the wall time.

The layers are 256 wide on purpose: with 1024-wide layers torch_xla's profiler holds about
8 MB of memory per step until the trace stops (1.1 MB at 256), so a 100 MB capture would
need some 40 GB (this machine has 24). Synthetic TraceMe-only captures have about half the
bytes per event of a real one, so they would overstate how many events a megabyte holds:
only real training captures are used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["SIZES", "build_capture", "child_env", "measure", "step_window", "trace_viewer_costs"]

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".captures"
SIZES = {"5MB": 400, "30MB": 2500, "100MB": 8400}
REPEATED = {"300MB": ("100MB", 3), "1GB": ("100MB", 10)}
"""Captures this machine cannot record (bench.scaled): a real one's threads, repeated."""


def make_step() -> Callable[[int], None]:
    """The benchmark's training step (the MLP above, batch ``i % 4``, two labels and a
    ``torch_xla.sync()``), its model and data made now."""
    import torch
    import torch_xla

    import xprof_magic

    dev = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = [torch.randn(256, 512, device=dev) for _ in range(4)]
    ys = [torch.randint(0, 10, (256,), device=dev) for _ in range(4)]
    torch_xla.sync()

    def step(i: int) -> None:
        with xprof_magic.label("forward"):
            loss = loss_fn(model(xs[i % 4]), ys[i % 4])
        with xprof_magic.label("backward"):
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch_xla.sync()

    return step


def _train(steps: int) -> None:
    import xprof_magic

    step = make_step()
    for i in range(steps):
        with xprof_magic.step():
            step(i)


def build_capture(steps: int, logdir: Path, name: str) -> Path:
    """Capture ``steps`` training steps into ``<logdir>/plugins/profile/<name>``; its folder."""
    import torch_xla.core.xla_model as xm

    import xprof_magic

    with xprof_magic.capture(logdir=logdir, name=name, server=False, steps=False) as cap:
        _train(steps)
        xm.wait_device_ops()
    assert cap.result is not None, "the capture was not stored"
    return cap.result.run_dir


def ensure_captures(names: list[str]) -> dict[str, Path]:
    """The cached run folder of each size, building the missing ones in a child process."""
    found: dict[str, Path] = {}
    for name in names:
        run_dir = CACHE / "plugins" / "profile" / name
        if name in REPEATED and not any(run_dir.glob("*.xplane.pb")):
            from bench.scaled import repeat_capture

            source, times = REPEATED[name]
            print(f"building the {name} capture ({source} x {times})...", file=sys.stderr)
            repeat_capture(ensure_captures([source])[source], run_dir, times)
        elif not any(run_dir.glob("*.xplane.pb")):
            print(f"building the {name} capture ({SIZES[name]} steps)...", file=sys.stderr)
            subprocess.run(
                [sys.executable, "-m", "bench.captures", "--build", name],
                check=True,
                cwd=ROOT,
                env=child_env(),
            )
        found[name] = run_dir
    return found


def child_env() -> dict[str, str]:
    """The environment of a bench's child interpreter: this project importable, torch_xla
    on the CPU unless told otherwise, XLA's logs quiet."""
    env = dict(os.environ)
    # Bytecode written (``__pycache__``, ignored by git) as an installed package has it, and
    # as the site-packages of numpy, protobuf and XProf have it: without it every fresh
    # process compiles this package's modules again (about 0.2 s of CPU).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PJRT_DEVICE", "CPU")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


_CHILD = """
import json, resource, sys, time
route, path = sys.argv[1], sys.argv[2]
SUMMARY_PROCESS_ENV = json.loads(sys.argv[3])
t, cpu = time.perf_counter(), time.process_time()
import os
warm, route = route.endswith("_warm"), route.removesuffix("_warm")
if route.startswith("summary"):
    # As the magic's summary process has it (cache.summarize_in_subprocess): one BLAS
    # thread, so the process has one thread and may fork its workers (timeline.forks).
    os.environ.update(SUMMARY_PROCESS_ENV)
if warm:
    # Imports done before the clock starts: the summary's process started ahead
    # (cache.Spare) has them, as XProf's running server has its converters.
    if route.startswith("summary"):
        from xprof_magic._analysis.__main__ import warm_up
        warm_up()
    else:
        import xprof.convert.raw_to_tool_data
    t, cpu = time.perf_counter(), time.process_time()
if route == "summary_serial":
    os.environ["XPROF_MAGIC_SUMMARY_WORKERS"] = "0"
if route == "summary_nodiag":
    # The summary as it was before the diagnosis: no breakdown spans, no compiled programs
    # kept for a compile's cause, no verdict.
    from xprof_magic._analysis import stages
    from xprof_magic._analysis.timeline import read, reader
    reader.Reader._spans = lambda self, *args: None
    reader.Reader._launches = lambda self, *args: None
    read.read_programs = lambda *args: []
    stages._diagnose = lambda *args: None
if route.startswith("summary"):
    from xprof_magic._analysis import summarize
    import pathlib
    s = summarize(pathlib.Path(path).parent, budget_s=None)
    assert all(gap.what == "other hosts" for gap in s.missing), s.missing
elif route == "overview_page":
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    data, _ = xspace_to_tool_data([path], "overview_page", {})
    assert data
elif route == "parse":
    from xprof_magic._analysis.timeline.xspace import XSpace
    with open(path, "rb") as f:
        raw = f.read()
    XSpace().ParseFromString(raw)
elif route == "parse_bare":
    # The same parse with the schema's module loaded on its own: none of this package's
    # other modules (which the "parse" route imports with xprof_magic._analysis).
    import importlib.util, pathlib
    schema = pathlib.Path("xprof_magic/_analysis/timeline/xspace.py").resolve()
    spec = importlib.util.spec_from_file_location("xspace_alone", schema)
    xspace = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xspace)
    with open(path, "rb") as f:
        raw = f.read()
    xspace.XSpace().ParseFromString(raw)
took, cpu = time.perf_counter() - t, time.process_time() - cpu
# VmHWM, not ru_maxrss: the latter survives exec and would report a big parent's peak.
hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
rss_mb = int(hwm) / 1024
# The summary's worker processes (xprof_magic._analysis.timeline.pool), all of them waited for:
# their CPU time together, and the biggest one's peak (started small, so ru_maxrss is theirs).
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "s": took, "cpu_s": cpu, "rss_mb": rss_mb,
    "workers_cpu_s": kids.ru_utime + kids.ru_stime, "workers_rss_mb": kids.ru_maxrss / 1024,
}))
"""


def _run_child(code: str, *args: str, tree: Path = ROOT) -> Any:
    """``python -c code args`` in a fresh process, in ``tree`` (a checkout of this project)
    with its code importable; the JSON of its last line of output."""
    env = child_env()
    if tree != ROOT:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


AGAINST = "summary_against"
"""The ``summary`` route run with another checkout's code (``--against DIR``)."""


def _child(route: str, xplane: Path, against: Path | None = None) -> dict[str, float]:
    if route == AGAINST:
        assert against is not None, "--against DIR names the other checkout"
        found: dict[str, float] = _run_child(
            _CHILD, "summary", str(xplane), _summary_env(), tree=against
        )
        return found
    result: dict[str, float] = _run_child(_CHILD, route, str(xplane), _summary_env())
    return result


def _summary_env() -> str:
    """The environment the magic starts its summary's process with, as JSON."""
    from xprof_magic._analysis.cache import SUMMARY_PROCESS_ENV

    return json.dumps(SUMMARY_PROCESS_ENV)


def _clean_caches(run_dir: Path) -> None:
    """Remove what XProf's converters write into a run, so every call starts cold."""
    keep = {"xprof_magic.json"}
    for p in run_dir.iterdir():
        if p.name in keep or p.name.endswith((".xplane.pb", ".trace.json.gz")):
            continue
        if p.is_file():
            p.unlink()


def measure(
    names: list[str], routes: list[str], reps: int = 3, against: Path | None = None
) -> list[dict[str, Any]]:
    """Each route on each capture, in fresh processes, the routes taking turns in each
    repetition: median time and median peak RSS. With ``against`` (another checkout: the
    code before a change), the ``summary`` route with its code too (:data:`AGAINST`), each
    checkout's bytecode written first."""
    if against is not None and AGAINST not in routes:
        routes = [*routes, AGAINST]
    rows = []
    for name, run_dir in ensure_captures(names).items():
        xplane = next(run_dir.glob("*.xplane.pb"))
        row: dict[str, Any] = {"capture": name, "mb": xplane.stat().st_size / 1e6}
        if against is not None:
            for warm in ("summary", AGAINST):
                _child(warm, xplane, against)
        runs: dict[str, list[dict[str, float]]] = {route: [] for route in routes}
        for _ in range(reps):
            for route in routes:
                _clean_caches(run_dir)
                runs[route].append(_child(route, xplane, against))
        for route in routes:
            row[route] = {
                key: statistics.median(r[key] for r in runs[route]) for key in runs[route][0]
            }
            print(f"{name} {route}: {row[route]}", file=sys.stderr)
        _clean_caches(run_dir)
        rows.append(row)
    return rows


_VIEWER_CHILD = """
import json, resource, sys, time
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
path, calls = sys.argv[1], json.loads(sys.argv[2])
out = []
for params in calls:
    t = time.perf_counter()
    data, _ = xspace_to_tool_data([path], "trace_viewer@", params)
    out.append({"params": params, "s": time.perf_counter() - t, "bytes": len(data or b"")})
print(json.dumps(out))
"""


def trace_viewer_costs(name: str = "30MB") -> list[dict[str, Any]]:
    """XProf's timeline conversion: a first call, then windowed / lower-resolution calls.

    The options are those the viewer route passes (``trace_viewer_options``). Two fresh
    processes, each starting without caches in the run: one whose first call asks for the
    whole timeline at the default resolution, then narrower calls; one whose first call
    is already a window.
    """
    run_dir = ensure_captures([name])[name]
    xplane = next(run_dir.glob("*.xplane.pb"))

    def opts(**options: Any) -> dict[str, Any]:
        return {"trace_viewer_options": options}

    sequences = [
        [
            opts(resolution=8000),
            opts(resolution=8000),
            opts(resolution=1000),
            opts(resolution=8000, start_time_ms=0, end_time_ms=1000),
            opts(resolution=8000, start_time_ms=20000, end_time_ms=20100),
            opts(resolution=8000, format="pb"),
        ],
        [opts(resolution=1000, start_time_ms=0, end_time_ms=1000)],
    ]
    rows: list[dict[str, Any]] = []
    for calls in sequences:
        _clean_caches(run_dir)
        found: list[dict[str, Any]] = _run_child(_VIEWER_CHILD, str(xplane), json.dumps(calls))
        found[0]["first"] = True
        rows.extend(found)
        print(f"trace_viewer@: {found}", file=sys.stderr)
    _clean_caches(run_dir)
    return rows


_WINDOW_CHILD = """
import json, sys, time
from pathlib import Path
import torch_xla.core.xla_model as xm
import xprof_magic
from bench.captures import make_step

logdir, window, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
step = make_step()
for i in range(3):  # compiled before either capture
    step(i)
xm.wait_device_ops()
started = time.perf_counter()
with xprof_magic.capture(logdir=logdir, name=window or "whole", server=False,
                         steps=window or True) as cap:
    for i in range(steps):
        step(i)
took = time.perf_counter() - started
meta = json.loads((cap.result.run_dir / "xprof_magic.json").read_text())
size = sum(p.stat().st_size for p in cap.result.run_dir.glob("*.xplane.pb"))
print(json.dumps({"window": window or "whole cell", "steps": steps, "cell_s": took,
                  "xplane_bytes": size, "steps_in_run": len(meta.get("steps") or [])}))
"""


def step_window(steps: int = 400, window: str = "100:103") -> list[dict[str, Any]]:
    """The same 400-step loop captured whole and with ``--steps 100:103``, each in a fresh
    process: the run's size, the steps it holds, and the cell's time."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as logdir:
        for which in ("", window):
            rows.append(_run_child(_WINDOW_CHILD, logdir, which, str(steps)))
            print(f"step window: {rows[-1]}", file=sys.stderr)
    return rows


def report(result: dict[str, Any]) -> str:
    """The figures as Markdown, for BENCHMARKS.md."""
    lines = [
        "| capture | xplane | summary (CPU here + workers) | summary peak RSS (a worker's) "
        "| one process: summary (CPU) | peak RSS | overview_page (CPU) "
        "| overview peak RSS | ParseFromString (CPU; peak RSS) | summary / overview "
        "| summary CPU / parse CPU | summary peak RSS / file |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["summary"]:
        cells = [row["capture"], f"{row['mb']:.1f} MB"]
        for route in ("summary", "summary_serial", "overview_page"):
            got = row.get(route)
            if not got:
                cells += ["", ""]
            elif got.get("workers_cpu_s") and route == "summary":
                cells += [
                    f"{got['s']:.2f} s ({got['cpu_s']:.2f} s + {got['workers_cpu_s']:.2f} s)",
                    f"{got['rss_mb']:.0f} MB ({got['workers_rss_mb']:.0f} MB)",
                ]
            else:
                cells += [f"{got['s']:.2f} s ({got['cpu_s']:.2f} s)", f"{got['rss_mb']:.0f} MB"]
        parse = row.get("parse")
        cells.append(
            f"{parse['s']:.2f} s ({parse['cpu_s']:.2f} s; {parse['rss_mb']:.0f} MB)"
            if parse
            else ""
        )
        summary = row.get("summary")
        if summary and "overview_page" in row:
            cells.append(f"{summary['s'] / row['overview_page']['s']:.2f}")
        else:
            cells.append("")
        if "summary_warm" in row and "overview_page_warm" in row:
            cells[-1] += (
                f" (imports done: {row['summary_warm']['s'] / row['overview_page_warm']['s']:.3f})"
            )
        if summary and parse:
            cpu = summary["cpu_s"] + summary.get("workers_cpu_s", 0.0)
            cells.append(f"{cpu / parse['cpu_s']:.2f}")
        else:
            cells.append("")
        cells.append(f"{summary['rss_mb'] / row['mb']:.1f}" if summary else "")
        lines.append("| " + " | ".join(cells) + " |")
    for row in result["summary"]:
        for route in ("summary_warm", "overview_page_warm"):
            got = row.get(route)
            if got:
                lines.append(
                    f"- {row['capture']}, {route} (its imports done before the clock, as the "
                    f"summary's process started ahead and XProf's server have them): "
                    f"{got['s']:.2f} s ({got['cpu_s']:.2f} s of CPU), {got['rss_mb']:.0f} MB"
                )
        other = row.get(AGAINST)
        if other:
            cpu = other["cpu_s"] + other.get("workers_cpu_s", 0.0)
            parse = row.get("parse")
            lines.append(
                f"- {row['capture']}, the summary with the other checkout's code (--against): "
                f"{other['s']:.2f} s ({cpu:.2f} s of CPU), {other['rss_mb']:.0f} MB"
                + (f"; CPU / parse CPU {cpu / parse['cpu_s']:.2f}" if parse else "")
            )
    windows = result.get("step_window", [])
    if windows:
        lines += [
            "",
            "| the same 400-step loop | run size | steps in the run | cell time |",
            "| --- | --- | --- | --- |",
        ]
        for row in windows:
            lines.append(
                f"| {'--steps ' + row['window'] if ':' in row['window'] else row['window']} "
                f"| {row['xplane_bytes'] / 1e6:.2f} MB | {row['steps_in_run']} "
                f"| {row['cell_s']:.2f} s |"
            )
    for call in result.get("trace_viewer", []):
        first = "first call, " if call.get("first") else ""
        lines.append(
            f"- trace_viewer@ {first}{json.dumps(call['params'])}: {call['s']:.2f} s, "
            f"{call['bytes'] / 1e6:.2f} MB reply"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench summary")
    parser.add_argument("--build", choices=sorted(SIZES), help="build one capture (child)")
    parser.add_argument(
        "--sizes", nargs="*", default=list(SIZES), choices=sorted([*SIZES, *REPEATED])
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--routes", nargs="*", default=["summary", "summary_serial", "overview_page", "parse"]
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (e.g. a git worktree of main): its summary beside this one's",
    )
    parser.add_argument("--viewer", action="store_true", help="also time trace_viewer@ calls")
    parser.add_argument(
        "--window", action="store_true", help="also capture a step window against the whole loop"
    )
    args = parser.parse_args(argv)
    if args.build:
        started = time.perf_counter()
        run_dir = build_capture(SIZES[args.build], CACHE, args.build)
        size = sum(p.stat().st_size for p in run_dir.glob("*.xplane.pb")) / 1e6
        print(f"{run_dir}: {size:.1f} MB in {time.perf_counter() - started:.0f} s")
        return 0
    against = args.against.resolve() if args.against else None
    result: dict[str, Any] = {"summary": measure(args.sizes, args.routes, args.reps, against)}
    if args.viewer:
        result["trace_viewer"] = trace_viewer_costs()
    if args.window:
        result["step_window"] = step_window()
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "results.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
