"""The summary of real GPU captures: JAX loops on one NVIDIA H200, each with its truth.

Eight runs as the magic stored them on the GPU (``tests/data/gpu-h200/``, ``NOTICE.md``):
each cell was built so that its bottleneck is known and timed itself without the
profiler (``gpu-h200/README.md``). Every run must get its README's verdict, advice that
fits it, and a device busy time within 10% of the union of the GPU plane's events, which
this test measures through XProf's own reader (``ProfileData``), not the one under test.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tests._oracle_trace import _union_ns
from tests._said import worded
from tests.conftest import GPU_RUNS
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._analysis.render.notes import device_statement

RUNS = GPU_RUNS


@pytest.fixture(scope="module")
def runs(gpu_runs: dict[str, tuple[Path, Summary]]) -> dict[str, Path]:
    return {run: folder for run, (folder, _) in gpu_runs.items()}


@pytest.fixture(scope="module")
def summaries(gpu_runs: dict[str, tuple[Path, Summary]]) -> dict[str, Summary]:
    return {run: summary for run, (_, summary) in gpu_runs.items()}


def _plane_union_s(folder: Path) -> float:
    """The union of every event on the GPU's plane, through XProf's own reader."""
    from xprof.profile_data import ProfileData

    profile = ProfileData.from_file(str(folder / "vm.xplane.pb"))
    spans = [
        (e.start_ns, e.start_ns + e.duration_ns)
        for plane in profile.planes
        if plane.name == "/device:GPU:0"
        for line in plane.lines
        for e in line.events
    ]
    return _union_ns(spans, None) / 1e9


def test_the_data_holds_every_kind_of_the_readme() -> None:
    assert RUNS == [
        "gpu_device",
        "gpu_eager",
        "gpu_eager_fixed",
        "gpu_input_fixed",
        "gpu_shapes",
        "gpu_shapes_fixed",
        "gpu_sync",
        "gpu_transfer_fixed",
    ]


@pytest.mark.parametrize("run", RUNS)
def test_the_device_is_busy_as_its_plane_says_and_named(
    run: str, runs: dict[str, Path], summaries: dict[str, Summary]
) -> None:
    device = summaries[run].device
    union = _plane_union_s(runs[run])
    assert device.kind == "GPU" and device.name == "NVIDIA H200"
    assert device_statement(summaries[run]).startswith("Ran on GPU (NVIDIA H200)")
    assert [d.name for d in device.devices] == ["/device:GPU:0"]
    assert device.busy_s == pytest.approx(union, rel=0.10), (device.busy_s, union)


def test_a_jitted_chain_of_matmuls_is_device_bound_at_the_gpus_pace(
    summaries: dict[str, Summary],
) -> None:
    s = summaries["gpu_device"]
    d = worded(s)
    assert (d.verdict, d.level) == ("device", "info"), d.headline
    assert d.share is not None and d.share > 0.9
    assert "jax.jit" not in d.headline
    # Each step is its launch's kernels (~13 ms on the GPU), not the host's 0.2 ms dispatch.
    assert s.steps is not None
    assert 12e-3 < statistics.median(s.steps.durations_s) < 15e-3
    assert d.program == "PjitFunction(heavy)" and d.line == 8


def test_eager_ops_are_host_bound_and_told_to_jit(summaries: dict[str, Summary]) -> None:
    d = worded(summaries["gpu_eager"])
    assert (d.verdict, d.cause) == ("host", "eager"), d.headline
    assert d.line == 4 and "jax.jit" in d.fix
    assert d.gain is not None and d.gain.speedup > 5


def test_a_new_shape_each_step_is_compile_bound(summaries: dict[str, Summary]) -> None:
    d = worded(summaries["gpu_shapes"])
    assert (d.verdict, d.cause) == ("compile", "changing shapes"), d.headline
    assert d.share is not None and d.share > 0.9
    assert not d.apart


def test_padding_eagerly_is_compile_bound_at_the_pad(summaries: dict[str, Summary]) -> None:
    d = worded(summaries["gpu_shapes_fixed"])
    assert (d.verdict, d.cause, d.program) == ("compile", "eager shapes", "jit(_pad)")
    assert d.line == 3 and "jnp.pad" in d.where[-1]
    assert "Pad the inputs" not in d.headline and "np.pad" in d.fix


def test_a_read_back_each_step_is_named_at_its_line(summaries: dict[str, Summary]) -> None:
    s = summaries["gpu_sync"]
    d = worded(s)
    assert d.verdict == "device", d.headline
    # The GPU's real busy share, not 0: 88 of the steps' 128 ms.
    assert d.share is not None and 0.55 < d.share < 0.8
    r = d.read_back
    assert r is not None and (r.steps, r.line) == (60, 5), r
    assert r.call.startswith("l = float(mid(")
    # Without the read, the host launches while the GPU works: about twice as fast.
    assert 1.5 < r.step_s / r.without_s < 2.5
    assert not r.shared and "this machine's CPU" not in d.headline, "a GPU's own estimate"
    assert "read a value back" in d.headline and "Speed now comes from the model" not in d.headline


def test_numpy_batches_copied_each_step_are_transfer_bound(
    summaries: dict[str, Summary],
) -> None:
    s = summaries["gpu_input_fixed"]
    d = worded(s)
    assert d.verdict == "transfer", d.headline
    assert d.share is not None and d.share > 0.8
    assert "jax.jit" not in d.headline and "device_put the next batch" in d.fix
    # Both sides of the copies: the copy stream's DMA and the host's staging.
    (gpu,) = s.device.devices
    assert gpu.copy_s == pytest.approx(6.4e-3, rel=0.05)
    assert d.breakdown.on_device and d.breakdown.seconds("transfer") > 10 * gpu.copy_s


@pytest.mark.parametrize("run", ["gpu_eager_fixed", "gpu_transfer_fixed"])
def test_a_cell_of_a_few_milliseconds_is_too_small_to_judge(
    run: str, summaries: dict[str, Summary]
) -> None:
    d = worded(summaries[run])
    assert (d.verdict, d.headline) == ("unknown", "")


@pytest.mark.parametrize("run", RUNS)
def test_the_two_step_charts_agree_and_threads_are_the_users(
    run: str, summaries: dict[str, Summary]
) -> None:
    s = summaries[run]
    assert s.steps is not None
    measured = s.diagnosis.breakdown.steps
    assert [round(st.total_s, 9) for st in measured] == [round(x, 9) for x in s.steps.durations_s]
    # The runtime's own threads (PjRt's copy workers, the tracer's) hold no labels.
    assert all(not row.thread for row in s.labels), [r.thread for r in s.labels]
