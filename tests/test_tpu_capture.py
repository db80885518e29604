"""The breakdown and verdict of TPU captures, from the chips' own timelines.

A real capture of 4 TPU v6e chips from XProf's test data (``tests/data/NOTICE.md``), whose
chips spend most of their busy time waiting for host-offload copies, and timelines written
here with the full schema (:data:`xprof_magic._analysis.timeline.xspace.XSpace`) for what it lacks:
infeed, outfeed and a chip bound by collectives. The expected figures are measured from
the file with the full schema, not through the reader under test.
"""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests._said import said, worded
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._analysis.timeline import xspace
from xprof_magic._analysis.timeline.facts import device_side
from xprof_magic._analysis.timeline.trace import read_planes
from xprof_magic._backends import NEUTRAL_FIXES

DATA = Path(__file__).resolve().parent / "data" / "tpu_inference_2.xplane.pb.gz"
MS = 1e6


def _run(tmp_path: Path, data: bytes, host: str = "host") -> Path:
    run_dir = tmp_path / "plugins" / "profile" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / f"{host}.xplane.pb").write_bytes(data)
    return run_dir


@pytest.fixture(scope="module")
def capture() -> Any:
    return xspace.XSpace.FromString(gzip.decompress(DATA.read_bytes()))


@pytest.fixture(scope="module")
def summary(capture: Any, tmp_path_factory: pytest.TempPathFactory) -> Summary:
    run_dir = _run(tmp_path_factory.mktemp("tpu"), capture.SerializeToString())
    return xprof_magic.summarize(run_dir)


def _ops(capture: Any, plane_name: str) -> list[tuple[int, int, str, dict[str, str]]]:
    """The ``XLA Ops`` events of one plane: start and end (ps), HLO text, metadata stats."""
    plane = next(p for p in capture.planes if p.name == plane_name)
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    meta = {
        key: (m.name, {stat_names[s.metadata_id]: xspace.stat_value(s) for s in m.stats})
        for key, m in plane.event_metadata.items()
    }
    line = next(line for line in plane.lines if line.name == "XLA Ops")
    return [(e.offset_ps, e.offset_ps + e.duration_ps, *meta[e.metadata_id]) for e in line.events]


def _union_s(spans: Sequence[tuple[int, int]]) -> float:
    total, reach = 0, None
    for lo, hi in sorted(spans):
        if reach is None or lo > reach:
            total += hi - lo
            reach = hi
        elif hi > reach:
            total += hi - reach
            reach = hi
    return total / 1e12


def test_the_real_capture_is_four_tpu_chips(summary: Summary) -> None:
    assert summary.device.kind == "TPU"
    assert [d.name for d in summary.device.devices] == [f"/device:TPU:{i}" for i in range(4)]


def test_collectives_are_the_first_chips_all_reduce_time(capture: Any, summary: Summary) -> None:
    all_reduce = _union_s(
        [
            (a, b)
            for a, b, _, stats in _ops(capture, "/device:TPU:0")
            if stats.get("hlo_category") == "all-reduce"
        ]
    )
    assert 0.3 < all_reduce < 0.4
    parts = summary.diagnosis.breakdown
    assert parts.seconds("collective", of_steps=False) == pytest.approx(all_reduce, rel=1e-6)


def test_host_offload_copies_are_transfer_and_the_verdict(capture: Any, summary: Summary) -> None:
    copies = [
        (a, b)
        for a, b, text, stats in _ops(capture, "/device:TPU:0")
        if stats.get("hlo_category", "").startswith("copy")
        and "S(5)" in text + stats.get("shape_with_layout", "")
    ]
    offload = _union_s(copies)
    assert offload > 70
    d = worded(summary)
    parts = d.breakdown
    assert parts.seconds("transfer", of_steps=False) >= offload * (1 - 1e-9)
    assert parts.offload_s == pytest.approx(offload, rel=1e-6)
    assert parts.share("device", of_steps=False) < 0.05
    assert (d.verdict, d.cause, d.level) == ("transfer", "host offload", "warning")
    assert "host-offload copies" in d.headline and d.fix == NEUTRAL_FIXES["host offload"]
    # The arrays and the ops, as the graph viewer names them: the longest in all, first.
    totals: dict[str, int] = {}
    for chip in range(4):
        for a, b, text, stats in _ops(capture, f"/device:TPU:{chip}"):
            if stats.get("hlo_category", "").startswith("copy") and "S(5)" in text:
                totals[text] = totals.get(text, 0) + b - a
    longest = max(totals, key=lambda text: totals[text])
    op, shape = longest.split(" = ")[0].lstrip("%"), longest.split(" = ")[1].split("{")[0]
    assert f"copies of {shape} (5.4 GB) in host memory (`{op}`" in d.headline, d.headline
    assert d.fix in d.headline


def test_the_headline_gives_the_chips_busy_time(capture: Any, summary: Summary) -> None:
    plane = next(p for p in capture.planes if p.name == "/device:TPU:0")
    modules = next(line for line in plane.lines if line.name == "XLA Modules")
    busy = _union_s([(e.offset_ps, e.offset_ps + e.duration_ps) for e in modules.events])
    parts = summary.diagnosis.breakdown
    share = busy / parts.total_s(of_steps=False)
    assert 0.85 < share < 0.95
    assert f"the device is busy {share:.0%}, computing" in said(summary).headline


def test_a_summary_saved_before_the_chips_waits_were_split_loads(summary: Summary) -> None:
    data = summary.to_json()
    assert Summary.from_json(data) == summary
    del data["diagnosis"]["breakdown"]["on_device"], data["diagnosis"]["breakdown"]["offload_s"]
    old = Summary.from_json(data).diagnosis.breakdown
    assert (old.on_device, old.offload_s) == ((), 0.0)
    assert old.cell == summary.diagnosis.breakdown.cell


# A timeline written here: a Python thread runs one 100 ms trace; a chip runs one module
# in it, whose XLA ops are (name, HLO text, hlo_category, start ms, length ms).
_Op = tuple[str, str, str, float, float]


def _space(module_ms: tuple[float, float], ops: Sequence[_Op], ref: bool = False) -> bytes:
    """The timeline as bytes; ``ref``: each category a reference to a stat metadata's name,
    as XProf writes repeated strings."""
    space = xspace.XSpace()
    env = space.planes.add(name="Task Environment")
    env.stat_metadata[1].name = "profile_start_time"
    env.stat_metadata[2].name = "profile_stop_time"
    env.stats.add(metadata_id=1, str_value="1000")
    env.stats.add(metadata_id=2, str_value=str(int(1000 + 100 * MS)))
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = "train"
    python = host.lines.add(name="main", timestamp_ns=0)
    python.events.add(metadata_id=1, offset_ps=0, duration_ps=int(100 * MS * 1000))
    chip = space.planes.add(name="/device:TPU:0")
    chip.stat_metadata[1].name = "hlo_category"
    chip.event_metadata[1].name = "jit_step(1)"
    lo, length = module_ms
    modules = chip.lines.add(name="XLA Modules", timestamp_ns=0)
    modules.events.add(metadata_id=1, offset_ps=int(lo * 1e9), duration_ps=int(length * 1e9))
    line = chip.lines.add(name="XLA Ops", timestamp_ns=0)
    for i, (_, text, category, start, dur) in enumerate(ops, 2):
        chip.event_metadata[i].name = text
        if ref:
            chip.stat_metadata[100 + i].name = category
            chip.event_metadata[i].stats.add(metadata_id=1, ref_value=100 + i)
        else:
            chip.event_metadata[i].stats.add(metadata_id=1, str_value=category)
        line.events.add(metadata_id=i, offset_ps=int(start * 1e9), duration_ps=int(dur * 1e9))
    data: bytes = space.SerializeToString()
    return data


_FEEDS: list[_Op] = [
    ("infeed", "%infeed = (f32[8]) infeed(token[] %t)", "infeed", 10, 30),
    ("fusion", "%fusion = f32[8] fusion(f32[8] %a), kind=kLoop", "loop fusion", 40, 20),
    ("outfeed", "%outfeed = token[] outfeed(f32[8] %b, token[] %t)", "outfeed", 60, 20),
    ("all-gather", "%all-gather-done = f32[32] all-gather-done(f32[32] %s)", "all-gather", 80, 5),
    ("copy", "%copy-done = f32[8]{0} copy-done((f32[8]{0}, f32[8]{0}) %c)", "copy-done", 85, 3),
]


def _seconds(parts: Any) -> dict[str, float]:
    return {c: round(parts.seconds(c, of_steps=False) * 1e3, 6) for c in parts.categories}


def test_infeed_is_input_outfeed_transfer_and_a_copy_in_hbm_compute(tmp_path: Path) -> None:
    s = xprof_magic.summarize(_run(tmp_path, _space((10, 80), _FEEDS)))
    parts = s.diagnosis.breakdown
    ms = _seconds(parts)
    assert (ms["input"], ms["transfer"], ms["collective"]) == (30, 20, 5)
    assert (ms["device"], ms["host"], parts.offload_s) == (25, 20, 0.0)
    assert dict(zip(parts.categories, parts.on_device, strict=True))["input"] == 0.03
    assert s.diagnosis.verdict == "input" and s.diagnosis.cause == ""


def test_a_chip_bound_by_collectives_says_so(tmp_path: Path) -> None:
    ops: list[_Op] = [
        ("ag", "%all-gather-start = f32[32] all-gather-start(f32[8] %a)", "all-gather", 0, 1),
        # Only its metadata's category says what a fusion does.
        ("ag", "%fusion.7 = f32[32] fusion(f32[8] %a), kind=kCustom", "all-gather fusion", 1, 69),
        ("fusion", "%fusion = f32[8] fusion(f32[8] %a), kind=kLoop", "loop fusion", 70, 30),
    ]
    d = worded(xprof_magic.summarize(_run(tmp_path, _space((0, 100), ops, ref=True))))
    assert d.verdict == "collective" and d.share == pytest.approx(0.70)
    assert d.headline.startswith("Collective-bound: 70% of the cell's time waits on collectives")
    assert "the device is busy 100%, computing 30%" in d.headline
    assert d.fix == NEUTRAL_FIXES["collective"]


def test_host_offload_needs_the_host_memory_space() -> None:
    result = "%copy-done.5 = f32[5,1024]{1,0:T(8,128)S(5)} copy-done((f32[5,1024]{1,0}) %c)"
    operand = "%copy-start.1 = (f32[4]{0}, f32[4]{0:S(5)}) copy-start(f32[4]{0} %p)"
    assert device_side("copy-done", result) == "device:offload"
    assert device_side("copy-start", operand) == "device:offload"
    assert device_side("copy-done", "%copy-done = f32[4]{0} copy-done(%c)") == ""
    assert device_side(None, result) == "device:offload"
    for category in (
        "all-reduce",
        "all-reduce fusion",
        "reduce-scatter",
        "collective-permute-done",
    ):
        assert device_side(category, "") == "collective"
    assert device_side("host send", "") == "device:transfer"
    assert device_side("infeed", "") == "device:input"
    assert device_side("convolution", "") == ""


def test_planes_built_as_objects_take_the_category_from_their_events() -> None:
    @dataclasses.dataclass
    class Event:
        name: str
        start_ns: float
        duration_ns: float
        stats: tuple[tuple[str, str], ...] = ()

    @dataclasses.dataclass
    class Line:
        name: str
        events: list[Event]

    @dataclasses.dataclass
    class Plane:
        name: str
        lines: list[Line]
        stats: tuple[tuple[str, str], ...] = ()

    fused = "%fusion.2 = f32[4] fusion(f32[4] %x), kind=kCustom"
    ops = [Event(fused, 10, 5, (("hlo_category", "all-reduce fusion"),))]
    ops.append(Event("%f = f32[4] fusion(f32[4] %x)", 15, 5, (("hlo_category", "loop fusion"),)))
    chip = Plane(
        "/device:TPU:0", [Line("XLA Modules", [Event("jit", 10, 10)]), Line("XLA Ops", ops)]
    )
    facts = read_planes([chip])
    assert facts.spans["collective"] == [([10.0], [15.0])]
    assert set(facts.spans) == {"device", "execution:jit", "collective"}
