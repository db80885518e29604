"""Device memory under the cell: the peak and where, a leak, and an out-of-memory explained.

Three sources, each tested where it is real: the allocators' events of the real H200
captures (``tests/data/gpu-h200/``, measured here through XProf's own reader, not the one
under test); the backend's live figures, which XLA's CPU client does not keep, so a backend
that reports a chip's figures stands in (``fakeprof``'s, of ``tests/test_registry.py``,
traced by JAX's real profiler); XLA's out-of-memory messages, in the forms XLA prints them
on a TPU and a GPU, parsed, and raised by a real cell.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests._said import notes_of, worded
from tests.conftest import GPU_RUNS, only_run, run
from tests.test_registry import ENTRY, FakeBackend, install
from xprof_magic._analysis import render_html, render_text
from xprof_magic._analysis.diagnosis.oom import out_of_memory, size_bytes
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._analysis.render.memory_section import NO_FIGURES
from xprof_magic._analysis.render.notes import device_statement
from xprof_magic._backends import Backend

GIB = 2**30


def _allocator_events(folder: Path) -> list[tuple[float, float]]:
    """The device allocator's events within the cell's window: time (ns from the profile's
    start) and bytes in use after each, read with XProf's ``ProfileData``."""
    from xprof.profile_data import ProfileData

    meta = json.loads((folder / "xprof_magic.json").read_text())
    profile = ProfileData.from_file(str(folder / "vm.xplane.pb"))
    start = next(
        int(dict(p.stats)["profile_start_time"])
        for p in profile.planes
        if p.name == "Task Environment"
    )
    lo, hi = meta["start_ns"] - start, meta["end_ns"] - start
    by_allocator: dict[str, list[tuple[float, float]]] = {}
    for plane in profile.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for e in line.events:
                if e.name in ("MemoryAllocation", "MemoryDeallocation") and lo <= e.start_ns <= hi:
                    stats = dict(e.stats)
                    events = by_allocator.setdefault(str(stats["allocator_name"]), [])
                    events.append((e.start_ns, float(stats["bytes_allocated"])))
    # ``ProfileData`` gives the allocator's name as a reference: the device's holds the most.
    return max(by_allocator.values(), key=lambda events: max(b for _, b in events))


@pytest.mark.parametrize("name", [r for r in GPU_RUNS if r != "gpu_transfer_fixed"])
def test_the_peak_is_the_largest_in_use_the_device_allocator_reports_in_the_cell(
    name: str, gpu_runs: dict[str, tuple[Path, Summary]]
) -> None:
    folder, s = gpu_runs[name]
    events = _allocator_events(folder)
    m = s.memory
    assert m.source == "timeline" and m.device is not None
    assert m.device.allocator == "GPU_0_bfc"
    assert m.device.peak_bytes == pytest.approx(max(b for _, b in events), rel=0.01)
    # The allocator's own peak_bytes_in_use is the process's (gpu_sync: 6.8 GB from an
    # earlier cell); the cell's is far less.
    assert m.device.capacity_bytes is not None and m.device.capacity_bytes > 100e9
    assert m.device.peak_path, "the peak names its block"
    row = next(r for r in s.labels if r.path == m.device.peak_path)
    assert row.peak_bytes == m.device.peak_bytes


def test_the_read_back_loop_peaks_in_its_loop_and_says_pinned_memory_apart(
    gpu_runs: dict[str, tuple[Path, Summary]],
) -> None:
    _, s = gpu_runs["gpu_sync"]
    m = s.memory
    assert m.device is not None and m.host is not None
    assert m.device.peak_path == ("for i in range(60)",) and m.device.peak_line == 4
    assert 2.3e9 < m.device.peak_bytes < 2.4e9  # not the process's 6.8 GB
    assert m.host.allocator == "xla_gpu_host_bfc" and m.host.peak_bytes < 1e6
    assert m.growth_per_step is None
    text = render_text(s)
    assert "peak 2.4 GB (2.1% of 112.6 GB) in `for i in range(60)`, line 4" in text
    assert "pinned host memory (xla_gpu_host_bfc)" in text
    assert " peak mem " in text  # the labels' column
    html = render_html(s)
    assert "Device memory" in html and 'aria-label="device memory"' in html


def test_the_cpu_client_says_it_has_no_figures(ip: Any, logdir: Path) -> None:
    assert run(
        ip, logdir, "import jax.numpy as jnp\nx = jnp.ones(8).sum()", "--backend jax"
    ).success
    s = xprof_magic.summarize(only_run(logdir).path)
    assert s.memory.device is None and s.memory.source == ""
    text = render_text(s)
    assert f"Device memory:\n  {NO_FIGURES}" in text
    assert "peak mem" not in text and "device memory in use" not in render_html(s)


class ChipMemory(FakeBackend):
    """``fakeprof`` on a chip that counts its memory: each figure 100 MB more than the last
    (a loop that keeps every step's output), over a 16 GB limit."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def memory(self) -> tuple[float, float, float] | None:
        self.asked += 1
        used = 1e9 + 1e8 * self.asked
        return used, used, 16e9


@pytest.fixture
def chip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def create() -> Backend:
        return ChipMemory()

    install(tmp_path, monkeypatch, dataclasses.replace(ENTRY, create=create))


def test_live_figures_at_block_ends_give_the_peak_and_a_leak(
    ip: Any, logdir: Path, chip: None
) -> None:
    cell = (
        "import fakeprof\n"
        "kept = []\n"
        "for i in range(6):\n"
        "    # xprof: step work\n"
        "    fakeprof.build()\n"
        "    kept.append(i)\n"
    )
    assert run(ip, logdir, cell, "--backend fake --steps").success
    info = only_run(logdir)
    meta = json.loads((info.path / "xprof_magic.json").read_text())
    assert len(meta["memory"]) >= 8  # the cell's start and end, and each block's end
    s = xprof_magic.summarize(info.path)
    m = s.memory
    assert m.source == "runtime" and m.device is not None
    assert m.device.peak_bytes == max(f[2] for f in meta["memory"])
    assert m.device.capacity_bytes == 16e9
    assert m.growth_per_step is not None and m.growth_steps == 6
    assert m.growth_per_step == pytest.approx(1e8, rel=0.01)  # a figure at the block's end
    leak = "Device memory grows step after step: +100.0 MB a step on average over 6 steps"
    assert any(leak in n.text for n in notes_of(s)), [n.text for n in notes_of(s)]
    assert {r.path: r.peak_bytes for r in s.labels}[("for i in range(6)", "step work")]


def test_the_figures_cost_nothing_where_the_runtime_keeps_none() -> None:
    from xprof_magic._cell.label_times import Recorder

    recorder = Recorder(lambda name, **stats: None)  # type: ignore[arg-type,return-value]
    asked: list[int] = []

    def none() -> None:
        asked.append(1)

    recorder.sampler = none
    for _ in range(100):
        recorder.sample(("block",))
    assert asked == [1] and recorder.samples == [] and recorder.sampler is None


def test_a_runtime_not_started_yet_is_asked_again() -> None:
    """A first cell starts the runtime inside it: at the cell's start the backend has no
    figures yet (LookupError), at its blocks' ends it has them."""
    from xprof_magic._cell.label_times import Recorder

    recorder = Recorder(lambda name, **stats: None)  # type: ignore[arg-type,return-value]
    started: list[bool] = []

    def figures() -> tuple[float, float, float]:
        if not started:
            started.append(True)
            raise LookupError("not started")
        return 1e9, 2e9, 16e9

    recorder.sampler = figures
    recorder.sample(())
    recorder.sample(("block",))
    assert [s[1:] for s in recorder.samples] == [(("block",), 1e9, 2e9, 16e9)]
    assert recorder.sampler is not None


# XLA's messages, in the forms it prints them (numbers and names of our own).
TPU_COMPILE = """RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in \
memory space hbm. Used 20.73G of 15.48G hbm. Exceeded hbm capacity by 5.25G.

Total hbm usage >= 21.25G:
    reserved        530.00M
    program          20.73G
    arguments            0B

Output size 0B; shares 0B with arguments.

Program hbm requirement 20.73G:
    global            660.0K
    scoped             3.10M
    HLO temp          20.73G (100.0% utilization: Unpadded (20.70G) Padded (20.70G), 0.0% \
fragmentation (0B))

  Largest program allocations in hbm:

  1. Size: 8.00G
     Operator: op_name="jit(step)/jit(main)/dot_general" source_file="{cell}" source_line=5
     Shape: f32[32768,65536]{{1,0:T(8,128)}}
     Unpadded size: 8.00G
     XLA label: fusion.1 = fusion(param.1, param.2), kind=kOutput, calls=fused_computation.1
     Allocation type: HLO temp
     ==========================

  2. Size: 12.00G
     Operator: op_name="jit(step)/jit(main)/tanh" source_file="/usr/lib/model.py" source_line=77
     Shape: f32[49152,65536]{{1,0:T(8,128)}}
     Unpadded size: 12.00G
     XLA label: tanh.3 = tanh(fusion.1)
     Allocation type: HLO temp
     ==========================
"""
GPU_RUN = """RESOURCE_EXHAUSTED: Out of memory while trying to allocate 34359738368 bytes.
BufferAssignment OOM Debugging.
BufferAssignment stats:
             parameter allocation:    1.00GiB
              constant allocation:         0B
        maybe_live_out allocation:   32.00GiB
     preallocated temp allocation:   32.00GiB
                 total allocation:   65.00GiB
              total fragmentation:         0B (0.00%)
"""
TPU_RUN = """RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 8.00G. \
That was not possible. There are 3.94G free.; (0x0x0_HBM0)"""
TPU_RESERVE = """Resource exhausted: Attempting to reserve 3.95G at the bottom of memory. That \
was not possible. There are 1.92G free, 0B reserved, and 1.92G reservable.;
HBM capacity 8.00G:"""
BFC = (
    "RESOURCE_EXHAUSTED: Failed to allocate request for 16.00GiB (17179869184B) on device ordinal 0"
)
COULD_NOT = "RESOURCE_EXHAUSTED: Could not allocate 2147483648 bytes in memory space 0"


def test_xlas_messages_say_what_was_asked_and_what_there_was() -> None:
    cell_file = "/tmp/ipykernel_42/3141.py"
    oom = out_of_memory(TPU_COMPILE.format(cell=cell_file), cell_file)
    assert oom is not None and (oom.at, oom.space) == ("compile", "hbm")
    assert (oom.asked_bytes, oom.available_bytes) == (20.73 * GIB, 15.48 * GIB)
    big, small = oom.allocations
    assert (big.size_bytes, big.shape, big.cell_line) == (12 * GIB, "f32[49152,65536]", 0)
    assert (big.source_file, big.source_line) == ("/usr/lib/model.py", 77)
    assert (small.shape, small.operator, small.cell_line) == (
        "f32[32768,65536]",
        "jit(step)/jit(main)/dot_general",
        5,
    )
    gpu = out_of_memory(GPU_RUN)
    assert gpu is not None and (gpu.at, gpu.asked_bytes, gpu.available_bytes) == (
        "run",
        34359738368,
        None,
    )
    tpu = out_of_memory(TPU_RUN)
    assert tpu is not None and (tpu.asked_bytes, tpu.available_bytes) == (8 * GIB, 3.94 * GIB)
    reserve = out_of_memory(TPU_RESERVE)
    assert reserve is not None and reserve.space == "hbm"
    assert (reserve.asked_bytes, reserve.available_bytes) == (3.95 * GIB, 1.92 * GIB)
    bfc = out_of_memory(BFC)
    assert bfc is not None and bfc.asked_bytes == 17179869184
    could = out_of_memory(COULD_NOT)
    assert could is not None and could.asked_bytes == 2147483648
    assert out_of_memory("ValueError: shapes (3,) and (4,) not aligned") is None
    assert size_bytes("660.0", "K") == 660 * 1024 and size_bytes("1,024") == 1024


def test_a_cell_that_runs_out_of_memory_fails_once_and_is_explained(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message is XLA's, raised where the cell's jitted step would raise it; its
    ``source_file`` is the cell's own file, as XLA names it."""
    cell = (
        "import inspect, jax.numpy as jnp\n"
        "here = inspect.currentframe().f_code.co_filename\n"
        "x = jnp.ones((4, 4))\n"
        "y = x @ x  # the step XLA could not fit\n"
        "raise RuntimeError(MESSAGE.format(cell=here))\n"
    )
    ip.user_ns["MESSAGE"] = TPU_COMPILE
    result = run(ip, logdir, cell, "--backend jax")
    assert not result.success and isinstance(result.error_in_exec, RuntimeError)
    shown = capsys.readouterr()
    assert (shown.out + shown.err).count("Traceback (most recent call last)") == 1
    info = only_run(logdir)
    s = xprof_magic.summarize(info.path)
    d = worded(s)
    assert s.status == "error" and d.verdict == "memory" and d.level == "error"
    assert (d.where, d.line) == (("y = x @ x",), 5)
    assert d.headline.startswith(
        "Out of memory while compiling the program: it needed 22.3 GB of HBM, 16.6 GB fit "
        "(over by 5.6 GB)"
    ), d.headline
    assert (
        "Largest allocations: 12.9 GB f32[49152,65536] (`tanh`, model.py:77); 8.6 GB " in d.headline
    )
    assert "(`dot_general`, line 5)" in d.headline and "jax.checkpoint" in d.fix
    texts = [n.text for n in notes_of(s)]
    assert texts.index(d.headline) == texts.index(device_statement(s)) + 1
    assert "out of memory (compile): asked 22.3 GB, 16.6 GB available" in render_text(s)


def test_compare_shows_the_peak_beside_time(gpu_runs: dict[str, tuple[Path, Summary]]) -> None:
    from xprof_magic._analysis.diagnosis.compare import compare

    (_, a), (_, b) = gpu_runs["gpu_sync"], gpu_runs["gpu_device"]
    c = compare(a, b)
    (row,) = [r for r in c.rows if r.name == "device memory peak"]
    assert (row.a, row.b, row.unit) == (
        a.memory.device.peak_bytes,
        b.memory.device.peak_bytes,
        "bytes",
    )  # type: ignore[union-attr]
    text = str(c)
    assert "device memory peak" in text and "2.4 GB" in text and "1.1 GB" in text
    assert "-1.3 GB (0.45×)" in text


def test_the_memory_chart_draws_the_curve_with_the_steps_and_the_peak(
    gpu_runs: dict[str, tuple[Path, Summary]],
) -> None:
    from xprof_magic._analysis.render.memory_section import memory_svg

    _, s = gpu_runs["gpu_sync"]
    picture = memory_svg(s)
    assert picture.count("<polyline") == 1 and picture.count("<circle") == 1
    assert s.steps is not None
    ticks = picture.count('stroke-opacity="0.5"')
    assert 0 < ticks <= len(s.steps.starts_s)  # the steps, every n-th when many
    assert "peak 2.4 GB in for i in range(60)" in picture
    assert "device memory in use over" in picture and "capacity 112.6 GB" in picture
