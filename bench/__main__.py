"""``python -m bench [--quick]``: measure xprof_magic against the raw torch_xla API.

``python -m bench summary`` runs the timeline reader's benchmark alone (see
:mod:`bench.captures`): real training captures of 5, 30 and 100 MB.
``python -m bench first-paint``: from ``%xprof view`` on the 30 MB capture to the first
paint of its timeline in JupyterLab and Chromium (see :mod:`bench.first_paint`).
``python -m bench load-ext`` and ``python -m bench host-steps``: the load time against
TensorBoard's, and the step time of a slow host in an on-demand capture (see
:mod:`bench.timings`).
``python -m bench tiny-steps``: what ``%%xprof --steps`` adds to a loop of 10,000 tiny steps,
against ``start_trace``/``stop_trace`` by hand (see :mod:`bench.tiny_steps`).
``python -m bench sync-steps``: what a step marker costs a tiny torch_xla step that ends at a
sync (see :mod:`bench.sync_steps`).
``python -m bench device-truth [--kinds a,b] [--logdir DIR] [--write]``: the summary's verdict
against JAX loops whose bottleneck is known, each timed without the profiler (see
:mod:`bench.device_truth`).

Every number in one run, written to BENCHMARKS.md with the machine and the command:

- overhead: one training cell, plain / hand-written start_trace+labels / ``%%xprof`` with a
  warm viewer, interleaved in one real kernel; medians and ratios;
- the first capture of a kernel (which starts the viewer), apart;
- time from a finished capture to a viewer that serves its tools and trace data, warm and cold;
- ``%load_ext`` time, against TensorBoard's extension, and their ratio;
- the step time the summary gives each host of an on-demand capture of a fast and a slow
  worker;
- summary cost against capture size (time and peak memory);
- kernel memory growth over 100 captures;
- the verdicts against the truth of loops whose bottleneck is known (device-truth).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cells import MANUAL, SETUP, TRAIN
from tests._kernel import Kernel
from xprof_magic._runs import store as _store

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "BENCHMARKS.md"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch
    import torch_xla

    return (
        f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"torch_xla {torch_xla.__version__}, PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}"
    )


def median(values: list[float]) -> float:
    return statistics.median(values)


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def bench_overhead(reps: int, logdir: Path) -> dict[str, Any]:
    """Plain vs hand-written profiling vs ``%%xprof``, interleaved in one kernel."""
    kernel = Kernel(extra={"XPROF_MAGIC_NO_SERVER": "1"})
    try:
        kernel.timed(SETUP)
        kernel.timed("STEPS = 3\n" + TRAIN)
        _, _, one = kernel.timed("STEPS = 10\n" + TRAIN)
        steps = max(10, int(10 * 3.0 / max(one, 1e-3)))
        kernel.timed(f"STEPS = {steps}\n%load_ext xprof_magic")
        manual_dir = tempfile.mkdtemp(prefix="bench-manual-")
        kernel.timed(f"MANUAL_DIR = {manual_dir!r}")
        magic = f"%%xprof --logdir {logdir} --name overhead\n{TRAIN}"
        _, _, first = kernel.timed(magic)  # the kernel's first capture starts the viewer
        variants: dict[str, Callable[[], float]] = {
            "plain": lambda: kernel.timed(TRAIN)[2],
            "manual": lambda: kernel.timed(MANUAL)[2],
            "xprof": lambda: kernel.timed(magic)[2],
        }
        for run in variants.values():  # warm every variant's graphs once
            run()
        times: dict[str, list[float]] = {name: [] for name in variants}
        order = list(variants)
        for rep in range(reps):
            for name in order[rep % 3 :] + order[: rep % 3]:
                times[name].append(variants[name]())
        return {"steps": steps, "first_capture_s": first, "times": times}
    finally:
        kernel.close()


def busy_cell(seconds: float) -> None:
    """A cell that keeps torch_xla busy for ``seconds``: small steps, each synced."""
    import torch
    import torch_xla

    x = torch.ones(64, 64, device=torch_xla.device())
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x = (x @ x) / 64
        torch_xla.sync()
    x.sum().item()


def bench_time_to_view(reps: int, logdir: Path) -> dict[str, Any]:
    """From a finished capture to a viewer that lists its tools and serves its trace data.

    The run is visible the moment it is renamed into place; what follows is XProf's own
    conversion of the timeline, which grows with the capture, so sizes are reported too.
    """
    import xprof_magic
    from xprof_magic import _viewer

    def capture(name: str, seconds: float) -> Any:
        with xprof_magic.capture(logdir=logdir, name=name, server=False) as cap:
            busy_cell(seconds)
        assert cap.result is not None
        return cap.result

    def served(viewer: _viewer.Viewer, result: Any) -> tuple[float, float]:
        started = time.perf_counter()
        while not _viewer.fetch_json(viewer, "run_tools", run=result.run, timeout=30):
            time.sleep(0.002)
        listed = time.perf_counter() - started
        data = _viewer.fetch_json(
            viewer, "data", run=result.run, tag="trace_viewer@", host=result.hosts[0]
        )
        assert data
        return listed, time.perf_counter() - started

    # cold: the viewer starts while a 3-second cell runs, as the magic does
    start = _viewer.begin_viewer(logdir)
    result = capture("cold", 3.0)
    cell_end = time.perf_counter()
    outcome = start.wait(60)
    assert not isinstance(outcome, _viewer.Failed), outcome.message
    viewer = outcome.viewer
    ready_after_cell = time.perf_counter() - cell_end
    cold_listed, cold_served = served(viewer, result)
    by_size: list[dict[str, float]] = []
    for seconds in (0.0, 0.05, 0.3, 1.0):
        listed_s, served_s, sizes = [], [], []
        for i in range(reps):
            result = capture(f"warm-{seconds}-{i}", seconds)
            listed, total = served(viewer, result)
            listed_s.append(listed)
            served_s.append(total)
            sizes.append(_store.xplane_bytes(result.run_dir))
        by_size.append(
            {
                "cell_s": seconds,
                "xplane_kb": median(sizes) / 1e3,
                "listed_s": median(listed_s),
                "served_s": median(served_s),
            }
        )
    _viewer.stop_viewer(viewer)
    return {
        "cold_ready_after_cell_s": ready_after_cell,
        "cold_listed_s": cold_listed,
        "cold_served_s": cold_served,
        "warm": by_size,
    }


def bench_stop(reps: int, logdir: Path) -> list[dict[str, float]]:
    """Stopping a capture: stop_trace's export, the metadata, the move into place."""
    import xprof_magic

    rows = []
    for seconds in (0.0, 0.3, 1.0):
        took, sizes = [], []
        for i in range(reps):
            cap = xprof_magic.capture(logdir=logdir, name=f"stop-{seconds}-{i}", server=False)
            cap.start()
            cap.run(lambda seconds=seconds: busy_cell(seconds))
            started = time.perf_counter()
            result = cap.stop()
            took.append(time.perf_counter() - started)
            assert result is not None
            sizes.append(_store.xplane_bytes(result.run_dir))
        rows.append({"cell_s": seconds, "xplane_kb": median(sizes) / 1e3, "stop_s": median(took)})
    return rows


def bench_memory(captures: int, logdir: Path) -> dict[str, Any]:
    """Kernel RSS over many small captures with the widget shown each time."""
    kernel = Kernel(extra={"XPROF_MAGIC_NO_SERVER": "1"})
    rss = "int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
    try:
        kernel.timed("%load_ext xprof_magic\nimport torch, torch_xla")
        cell = (
            f"%%xprof --logdir {logdir}\n"
            "(torch.ones(64, device=torch_xla.device()) * 2).sum().item()"
        )
        for _ in range(5):
            kernel.timed(cell)
        before = kernel.value(rss)
        samples = []
        for i in range(captures):
            kernel.timed(cell)
            if (i + 1) % 25 == 0:
                samples.append(kernel.value(rss))
        threads = kernel.value("__import__('threading').active_count()")
        fds = kernel.value("len(__import__('os').listdir('/proc/self/fd'))")
        return {"before_kb": before, "samples_kb": samples, "threads": threads, "fds": fds}
    finally:
        kernel.close()


def write_report(results: dict[str, Any], command: str) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} with `{command}` on: {results['machine']}.",
        "All numbers come from this one run; medians unless said otherwise.",
        "",
    ]
    over = results.get("overhead")
    if over:
        t = over["times"]
        plain, manual, xprof = (median(t[k]) for k in ("plain", "manual", "xprof"))
        lines += [
            "## Overhead of a profiled training cell",
            "",
            f"One training cell ({over['steps']} steps of a 3-layer MLP, batch 256), run in one",
            f"real kernel, the three variants interleaved, {len(t['plain'])} times each; time",
            "from the execute request to the kernel going idle.",
            "",
            "| variant | median | min | max |",
            "| --- | --- | --- | --- |",
        ]
        for name, label in (
            ("plain", "(a) plain cell"),
            ("manual", "(b) hand-written `start_trace`/`stop_trace` + `xp.Trace` labels"),
            ("xprof", "(c) `%%xprof`, auto-labels, warm viewer, widget shown"),
        ):
            v = t[name]
            lines.append(
                f"| {label} | {v and fmt_ms(median(v))} | {fmt_ms(min(v))} | {fmt_ms(max(v))} |"
            )
        lines += [
            "",
            f"- (c)/(b) = **{xprof / manual:.3f}** (target ≤ 1.02); (b)/(a) = {manual / plain:.3f};"
            f" (c)/(a) = {xprof / plain:.3f}.",
            f"- The kernel's first `%%xprof` cell, which also starts the viewer: "
            f"{fmt_ms(over['first_capture_s'])} (a later one: {fmt_ms(xprof)}).",
            "",
        ]
    view = results.get("time_to_view")
    if view:
        lines += [
            "## From a finished capture to a viewer serving it",
            "",
            "From the end of a capture (the run renamed into place) until the viewer lists the",
            "run's tools (`run_tools`), and until it has also served the run's trace data",
            "(`data?tag=trace_viewer@`: XProf converting the timeline, which grows with it).",
            "",
            "| cell length | xplane | tools listed | trace data served |",
            "| --- | --- | --- | --- |",
        ]
        for row in view["warm"]:
            lines.append(
                f"| {row['cell_s']:g} s | {row['xplane_kb']:.0f} KB | "
                f"{fmt_ms(row['listed_s'])} | {fmt_ms(row['served_s'])} |"
            )
        lines += [
            "",
            f"- Warm viewer: a new run is listed within **{fmt_ms(view['warm'][0]['listed_s'])}**"
            f" and a small cell's timeline served within "
            f"**{fmt_ms(view['warm'][0]['served_s'])}** (target ≤ 50 ms).",
            f"- Cold viewer, started when a 3 s cell began (as `%%xprof` does): ready "
            f"{fmt_ms(view['cold_ready_after_cell_s'])} after the cell ended; it then listed the"
            f" run in {fmt_ms(view['cold_listed_s'])} and served its timeline in "
            f"{fmt_ms(view['cold_served_s'])} (the first conversion in a fresh server).",
            "",
        ]
    stop = results.get("stop")
    if stop:
        lines += [
            "## Stopping a capture",
            "",
            "From the end of the cell to the run in place: waiting for the device, torch_xla's",
            "`stop_trace` export, the metadata and the rename.",
            "",
            "| cell length | xplane | stop and store |",
            "| --- | --- | --- |",
        ]
        for row in stop:
            lines.append(
                f"| {row['cell_s']:g} s | {row['xplane_kb']:.0f} KB | {fmt_ms(row['stop_s'])} |"
            )
        lines.append("")
    load = results.get("load_ext")
    if load:
        from bench import timings

        lines += ["## `%load_ext`", "", timings.load_ext_report(load), ""]
    hosts = results.get("host_steps")
    if hosts:
        from bench import timings

        lines += [
            "## Step time per host of an on-demand capture",
            "",
            "`%xprof capture` of two torch_xla workers at once for 1.5 s (tests/_worker.py), "
            "one of them waiting 20 ms in each step.",
            "",
            timings.host_steps_report(hosts),
            "",
        ]
    summary = results.get("summary")
    if summary:
        from bench import captures

        lines += [
            "## Summary cost against capture size",
            "",
            "Real training captures (3-layer MLP, batch 256, SGD with momentum, labels and "
            "`torch_xla.sync()` per step), each route in a fresh process, median of the "
            "repetitions; the time runs from before the route's imports to its end, the CPU "
            "time beside it is the process's own (+ its workers', for the summary that has "
            "them). Targets for 100 MB: ≤ 3 s, ≤ 0.7 GB, ≤ 0.35× `overview_page`.",
            "",
            captures.report(summary),
            "",
        ]
    paint = results.get("first_paint")
    if paint:
        from bench import first_paint

        lines += ["## First picture of the inline timeline, 30 MB capture", ""]
        lines += [first_paint.report(paint), ""]
    memory = results.get("memory")
    if memory:
        growth = (memory["samples_kb"][-1] - memory["before_kb"]) / 1024
        count = 25 * len(memory["samples_kb"])
        lines += [
            "## Kernel memory over many captures",
            "",
            f"- RSS after warm-up {memory['before_kb'] / 1024:.0f} MB; after {count} more "
            f"captures (widget shown each time) {memory['samples_kb'][-1] / 1024:.0f} MB: "
            f"**{growth:+.1f} MB** ({growth * 1024 / count:+.0f} KB per capture).",
            "- RSS every 25 captures: "
            + ", ".join(f"{kb / 1024:.0f} MB" for kb in memory["samples_kb"])
            + f"; threads at the end: {memory['threads']}, open files: {memory['fds']}.",
            "",
        ]
    truth = results.get("device_truth")
    if truth:
        from bench import device_truth

        lines += [device_truth.SECTION, "", device_truth.report(truth, command), ""]
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["summary"]:
        from bench import captures

        return captures.main(sys.argv[2:])
    if sys.argv[1:2] == ["first-paint"]:
        from bench import first_paint

        return first_paint.main(sys.argv[2:])
    if sys.argv[1:2] == ["memory-sampling"]:
        from bench import memory_sampling

        return memory_sampling.main(sys.argv[2:])
    if sys.argv[1:2] == ["sync-steps"]:
        from bench import sync_steps

        return sync_steps.main(sys.argv[2:])
    if sys.argv[1:2] == ["tiny-steps"]:
        from bench import tiny_steps

        return tiny_steps.main(sys.argv[2:])
    if sys.argv[1:2] == ["device-truth"]:
        from bench import device_truth

        return device_truth.main(sys.argv[2:])
    if sys.argv[1:2] in (["load-ext"], ["host-steps"]):
        from bench import timings

        return timings.main(sys.argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", nargs="*", default=None, help="run these parts only")
    args = parser.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    reps = 3 if args.quick else 9
    every = [
        "overhead",
        "time_to_view",
        "stop",
        "load_ext",
        "host_steps",
        "summary",
        "first_paint",
        "memory",
        "device_truth",
    ]
    wanted = set(args.only or every)
    with tempfile.TemporaryDirectory(prefix="xprof-bench-") as tmp:
        os.environ["XPROF_MAGIC_VIEWER_DIR"] = str(Path(tmp) / "viewers")
        results: dict[str, Any] = {"machine": machine()}
        parts: dict[str, Callable[[], Any]] = {
            "overhead": lambda: bench_overhead(reps, Path(tmp) / "overhead"),
            "time_to_view": lambda: bench_time_to_view(reps, Path(tmp) / "view"),
            "stop": lambda: bench_stop(reps, Path(tmp) / "stop"),
            "load_ext": lambda: bench_load_ext(reps + 6),
            "host_steps": bench_host_steps,
            "summary": lambda: bench_summary(quick=args.quick),
            "first_paint": lambda: bench_first_paint(quick=args.quick),
            "memory": lambda: bench_memory(25 if args.quick else 100, Path(tmp) / "memory"),
            "device_truth": bench_device_truth,
        }
        try:
            for name, part in parts.items():
                if name in wanted:
                    print(f"bench: {name} ...", flush=True)
                    started = time.perf_counter()
                    results[name] = part()
                    print(f"bench: {name} took {time.perf_counter() - started:.0f} s", flush=True)
        finally:
            from xprof_magic._viewer.process import manager as _viewer

            for viewer in _viewer.list_viewers():
                _viewer.stop_viewer(viewer)
    command = "make bench" if not args.quick else "python -m bench --quick"
    report = write_report(results, command)
    (ROOT / "bench" / "results.json").write_text(json.dumps(results, indent=1))
    if not args.only:
        OUT.write_text(report + "\n")
    print(report)
    return 0


def bench_summary(quick: bool) -> dict[str, Any]:
    """The summary on real training captures of about 5, 30 and 100 MB, against XProf's
    overview_page converter and a plain parse, each in fresh processes (see bench.captures);
    then XProf's own trace-viewer conversion of the 30 MB one."""
    from bench import captures

    sizes = ["5MB"] if quick else list(captures.SIZES)
    routes = ["summary", "summary_serial", "overview_page", "parse"]
    result: dict[str, Any] = {"summary": captures.measure(sizes, routes, 1 if quick else 3)}
    result["step_window"] = captures.step_window()
    if not quick:
        result["trace_viewer"] = captures.trace_viewer_costs()
    return result


def bench_load_ext(reps: int) -> dict[str, list[float]]:
    """``%load_ext xprof_magic`` against ``%load_ext tensorboard`` (see bench.timings)."""
    from bench import timings

    return timings.load_ext(reps)


def bench_host_steps() -> dict[str, Any]:
    """The step time of a fast and a slow host in one on-demand capture (see bench.timings)."""
    from bench import timings

    return timings.host_steps()


def bench_first_paint(quick: bool) -> dict[str, Any]:
    """From ``%xprof view`` of the 30 MB capture to its timeline painted in Chromium."""
    from bench import first_paint

    return first_paint.measure(1 if quick else 3)


def bench_device_truth() -> list[dict[str, Any]]:
    """Every loop kind of :mod:`bench.device_truth`: the verdict against the truth."""
    from bench import device_truth

    return device_truth.measure(list(device_truth.KINDS), device_truth.LOGDIR)


if __name__ == "__main__":
    sys.exit(main())
