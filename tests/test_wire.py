"""The column decoder (:mod:`xprof_magic._analysis.timeline.wire`) against the protobuf runtime.

Every stored capture (a TPU's, the H200 runs in ``tests/data/gpu-h200`` and, where this machine
has them, ``../shared/captures/gpu-h200``) and a torch_xla CPU capture made here: each line
decoded by the numpy decoder and parsed by the real runtime with XSpace's schema
(:data:`~xprof_magic._analysis.timeline.xspace.XSpace`) must agree field for field (every
event's metadata id, offset, duration; every stat, by its metadata id and as the runtime parses
it), and the reader's facts must be the same whichever of the two read the lines.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xprof_magic._analysis.timeline import framing, varint, wire, xspace
from xprof_magic._analysis.timeline.read import read_trace
from xprof_magic._backends import NEUTRAL
from xprof_magic._backends.jax_vocabulary import VOCABULARY as JAX_WORDS
from xprof_magic._backends.torch_xla_vocabulary import VOCABULARY as TORCH_XLA_WORDS

DATA = Path(__file__).resolve().parent / "data"
# shared/ lies beside the project's folder (a clone or CI's copy alike).
SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures" / "gpu-h200"


def _stored() -> list[tuple[str, Path]]:
    found = [("tpu_inference_2", DATA / "tpu_inference_2.xplane.pb.gz")]
    for root, tag in ((DATA / "gpu-h200", "gpu"), (SHARED, "shared")):
        if root.is_dir():
            found += [(f"{tag}/{p.parent.name}", p) for p in sorted(root.glob("*/*.xplane.pb.gz"))]
    return found


STORED = _stored()


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torch_xla training loop on the CPU, captured here (labels, steps, XLA ops)."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    from bench.captures import build_capture

    run_dir = build_capture(30, tmp_path_factory.mktemp("wire"), "mlp")
    (path,) = run_dir.glob("*.xplane.pb")
    return path


def _bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _same_as_the_runtime(data: bytes) -> int:
    """Every line of the capture, decoded and parsed: equal field for field. The events."""
    lazy = xspace.LazyXSpace.FromString(data)
    events = 0
    for plane in lazy.planes:
        for raw in plane.lines:
            parsed = xspace.XLine.FromString(raw)
            columns = wire.decode_line(raw)  # raises WireError: this line would not be decoded
            assert (columns.name, columns.timestamp_ns) == (parsed.name, parsed.timestamp_ns)
            got = np.stack([columns.metadata_id, columns.offset_ps, columns.duration_ps], 1)
            want = [(e.metadata_id, e.offset_ps, e.duration_ps) for e in parsed.events]
            assert got.tolist() == [list(e) for e in want], (plane.name, parsed.name)
            every = columns.stats.every()  # the stats are decoded when asked for: all here
            assert np.diff(every.ptr).tolist() == [len(e.stats) for e in parsed.events]
            stats = [s for e in parsed.events for s in e.stats]
            assert every.id.tolist() == [s.metadata_id for s in stats]
            for j, stat in enumerate(stats):
                assert xspace.parse_stat(every.serialized(j)) == stat
            for i, event in enumerate(parsed.events):  # one event's, as a stat is read
                one = columns.stats.of(i)
                assert [k for k, _ in one] == [s.metadata_id for s in event.stats]
                assert [xspace.parse_stat(b) for _, b in one] == list(event.stats)
            events += len(parsed.events)
    return events


@pytest.mark.parametrize("walked", [False, True], ids=["as-sized", "every-line-walked"])
@pytest.mark.parametrize("name", [name for name, _ in STORED])
def test_every_stored_capture_decodes_as_the_runtime_parses_it(
    name: str, walked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines under :data:`wire.WALK_FROM` are framed by the runtime, longer ones by numpy
    (:mod:`~xprof_magic._analysis.timeline.framing`); ``every-line-walked``: all by numpy."""
    if walked:
        monkeypatch.setattr(wire, "WALK_FROM", 0)
    path = dict(STORED)[name]
    assert _same_as_the_runtime(_bytes(path)) > 0


def _tricky_line(events: int) -> bytes:
    """A line whose events' bytes hold many ``0x22`` (stats' values of them, lengths of 34)
    and vary in size (one to three hundred bytes: one- and two-byte lengths), and with
    fields after its events (``duration_ps``, ``display_name``: field numbers 9 and 11):
    guesses of where an event starts land on stats and values."""
    rng = np.random.default_rng(7)
    line = xspace.XLine(name="python", timestamp_ns=11)
    for i in range(events):
        event = line.events.add(metadata_id=1 + i % 40, offset_ps=i * 1000, duration_ps=i % 7)
        for k in range(int(rng.integers(0, 6))):
            value = bytes(rng.choice([0x22, 0x08, 0x80, 0x41], int(rng.integers(0, 300))))
            event.stats.add(metadata_id=k + 1, bytes_value=value)
            event.stats.add(metadata_id=34, uint64_value=int(rng.integers(0, 2**40)))
    return line.SerializeToString() + b"\x48\x05\x5a\x01t"


@pytest.mark.parametrize("block", [96, 1])
def test_a_tricky_line_is_walked_as_the_runtime_frames_it(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Walkers that start on stats, inside values or on events alike (blocks of one event:
    a walker for each) find the events the runtime finds; a cut line is refused."""
    monkeypatch.setattr(wire, "WALK_FROM", 0)
    monkeypatch.setattr(framing, "_EVENTS_A_BLOCK", block)
    data = _tricky_line(3000)
    columns = wire.decode_line(data)
    parsed = xspace.XLine.FromString(data)
    assert (columns.name, columns.timestamp_ns) == ("python", 11)
    want = [(e.metadata_id, e.offset_ps, e.duration_ps) for e in parsed.events]
    got = np.stack([columns.metadata_id, columns.offset_ps, columns.duration_ps], 1)
    assert got.tolist() == [list(e) for e in want]
    assert np.diff(columns.stats.every().ptr).tolist() == [len(e.stats) for e in parsed.events]
    for cut in (len(data) - 1, len(data) // 2 + 1):
        with pytest.raises(wire.WireError):
            wire.decode_line(data[:cut])


def test_a_cpu_capture_decodes_as_the_runtime_parses_it(cpu_capture: Path) -> None:
    assert _same_as_the_runtime(cpu_capture.read_bytes()) > 10_000


def _equal(new: Any, old: Any, where: str = "facts") -> None:
    """Equal field by field, exactly (arrays too)."""
    if dataclasses.is_dataclass(new) and not isinstance(new, type):
        assert type(new) is type(old), where
        for f in dataclasses.fields(new):
            _equal(getattr(new, f.name), getattr(old, f.name), f"{where}.{f.name}")
    elif isinstance(new, dict):
        assert isinstance(old, dict) and list(new) == list(old), where
        for key in new:
            _equal(new[key], old[key], f"{where}[{key!r}]")
    elif isinstance(new, (list, tuple)):
        assert isinstance(old, type(new)) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            _equal(a, b, f"{where}[{i}]")
    elif isinstance(new, np.ndarray):
        assert isinstance(old, np.ndarray) and new.dtype == old.dtype, where
        assert np.array_equal(new, old, equal_nan=new.dtype.kind == "f"), where
    else:
        assert new == old, f"{where}: {new!r} != {old!r}"


def _through_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: bytes, release: Any = None) -> Any:
        raise wire.WireError("read through the runtime")

    monkeypatch.setattr(wire, "decode_line", refuse)


@pytest.mark.parametrize("name", [name for name, _ in STORED])
def test_the_facts_are_the_runtimes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_bytes(dict(STORED)[name]))
    words = (JAX_WORDS if name.startswith(("gpu", "shared")) else NEUTRAL).timeline
    decoded = read_trace(path, runtime=words)
    _through_the_runtime(monkeypatch)
    _equal(read_trace(path, runtime=words), decoded)
    assert decoded.events and decoded.devices


def test_the_facts_of_a_cpu_capture_are_the_runtimes(
    cpu_capture: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPROF_MAGIC_SUMMARY_WORKERS", "0")
    words = TORCH_XLA_WORDS.timeline
    decoded = read_trace(cpu_capture, runtime=words, label_names=frozenset({"forward"}))
    _through_the_runtime(monkeypatch)
    runtime = read_trace(cpu_capture, runtime=words, label_names=frozenset({"forward"}))
    _equal(runtime, decoded)
    assert decoded.blocks and decoded.device_ops and decoded.compile_count


@pytest.mark.parametrize("name", [name for name, _ in STORED])
def test_whole_numbers_read_at_once_are_each_events(name: str) -> None:
    """:meth:`Line.ints` from the columns (varints decoded in bulk) against each event's
    stat text, for every stat name any event of a line has."""
    from xprof_magic._analysis.timeline.line_arrays import as_int
    from xprof_magic._analysis.timeline.space import split_space
    from xprof_magic._analysis.timeline.thread_lines import xspace_planes

    checked = 0
    for plane in xspace_planes(split_space(_bytes(dict(STORED)[name]))):
        assert plane.serialized is not None
        keys = list(plane.serialized.stat_ids)
        for line in plane.lines():
            every = np.arange(len(line.start))
            for key in keys:
                if not line.has(every, key).any():
                    continue
                want = [as_int(line.stat(i, key)) for i in every.tolist()]
                assert line.ints(every, key) == want, (plane.name, line.name, key)
                checked += sum(v is not None for v in want)
    assert checked


def test_varints_of_every_size() -> None:
    values = [0, 1, 127, 128, 300, 2**21, 2**35 + 7, 2**56 - 1, 2**56, 2**63, 2**64 - 1]
    data, at = bytearray(), []
    for value in values:
        at.append(len(data))
        while True:
            byte, value = value & 0x7F, value >> 7
            data.append(byte | (0x80 if value else 0))
            if not value:
                break
    data += b"\x05"  # a last one-byte varint, in the last 8 bytes
    at.append(len(data) - 1)
    found, size = varint.varints(np.frombuffer(bytes(data), np.uint8), np.array(at))
    assert found.tolist() == [*values, 5]
    assert size.tolist() == np.diff([*at, len(data)]).tolist()


def test_a_layout_the_decoder_does_not_know_is_refused() -> None:
    line = xspace.XLine(name="python", timestamp_ns=5)
    event = line.events.add(metadata_id=3, offset_ps=10, duration_ps=20)
    event.stats.add(metadata_id=1, int64_value=4)
    data = line.SerializeToString()
    assert wire.decode_line(data).offset_ps.tolist() == [10]
    # The event's fields in another order (duration before offset): the runtime's to read.
    swapped = data.replace(b"\x10\x0a\x18\x14", b"\x18\x14\x10\x0a")
    assert swapped != data and xspace.XLine.FromString(swapped) == line
    with pytest.raises(wire.WireError):
        wire.decode_line(swapped)


@pytest.mark.parametrize("name", [name for name, _ in STORED])
def test_the_passes_made_a_chunk_at_a_time_read_the_same_facts(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big line's passes go a chunk of events at a time (its memory): the facts are those
    of one chunk for the whole line, with chunks of a few events, and with the heap trimmed
    after every line."""
    from xprof_magic._analysis.timeline import line_arrays, nesting, read

    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_bytes(dict(STORED)[name]))
    words = (JAX_WORDS if name.startswith(("gpu", "shared")) else NEUTRAL).timeline
    whole = read_trace(path, runtime=words)
    for module, constant in (
        (wire, "_ASKED"),
        (wire, "_SPAN"),
        (nesting, "_CHECK_CHUNK"),
        (line_arrays, "_FIRST_CHUNK"),
    ):
        monkeypatch.setattr(module, constant, 3)
    trims: list[int] = []
    trimmer = read.heap_trimmer()
    monkeypatch.setattr(read, "TRIM_FILES_FROM", 0)
    monkeypatch.setattr(read, "TRIM_FROM", 1)
    monkeypatch.setattr(read, "TRIM_BEFORE", 1)
    monkeypatch.setattr(read, "heap_trimmer", lambda: lambda: trims.append(trimmer and 1))
    _equal(read_trace(path, runtime=words), whole)
    assert trims, "the heap was trimmed before the lines after one with events"


def test_a_lines_stats_once_let_go_are_read_no_more() -> None:
    """The pass lets a line's stat columns go before its tables (a big line's 20 MB): a
    stat reader called after that raises, not answers from nothing."""
    from xprof_magic._analysis.timeline.space import split_space
    from xprof_magic._analysis.timeline.thread_lines import xspace_planes

    planes = xspace_planes(split_space(_bytes(dict(STORED)["tpu_inference_2"])))
    line = next(line for plane in planes for line in plane.lines() if len(line.start))
    every = np.arange(len(line.start))
    key = "hlo_op"
    before = line.has(every, key)
    assert before.dtype == bool and len(before) == len(every)
    line.release()
    with pytest.raises(RuntimeError, match="let go"):
        line.has(every, key)
    with pytest.raises(RuntimeError, match="let go"):
        line.values(every[:1], (key,))


def test_ends_computed_where_read_are_the_sums_kept_before() -> None:
    from xprof_magic._analysis.timeline.line_arrays import Ends

    rng = np.random.default_rng(0)
    start = np.cumsum(rng.random(1000) * 1e3) + 1.7e12 / 3
    dur = rng.random(1000) * 1e4 / 7
    end = start + dur
    ends = Ends(start, dur)
    assert len(ends) == len(end)
    mask = rng.random(1000) > 0.5
    index = rng.integers(0, 1000, 300)
    for at in (mask, index, slice(None), slice(10, 20), 5):
        assert np.array_equal(ends[at], end[at]), at  # bit for bit: one addition each


@pytest.mark.parametrize("chunk", [1 << 18, 3])
def test_which_events_have_a_stat_is_each_events(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:attr:`Line.has` (the stats of the events asked about decoded then, a chunk of events
    and a few bytes of the line at a time) against the events their stats belong to, for
    every stat name of every line of three stored captures, the events asked in line order
    and shuffled."""
    from xprof_magic._analysis.timeline import columns
    from xprof_magic._analysis.timeline.space import split_space

    monkeypatch.setattr(wire, "_ASKED", chunk)
    monkeypatch.setattr(wire, "_SPAN", 1 << 22 if chunk > 3 else 64)
    rng = np.random.default_rng(3)
    hits = 0
    for name, path in STORED[:3]:
        for split in split_space(_bytes(path)):
            stat_ids: dict[str, set[int]] = {}
            for key, meta in split.plane.stat_metadata.items():
                stat_ids.setdefault(meta.name, set()).add(key)
            for raw in split.lines:
                decoded = wire.decode_line(raw)
                line = columns.line_of(decoded, {}, stat_ids, lambda i, k: None)
                stats = decoded.stats.every()
                every = np.arange(len(line.start))
                owner = np.repeat(every, np.diff(stats.ptr))  # each stat's event
                # Chunks of three events: some of them (as the pass asks), not all.
                asked = every if chunk > 3 else every[:: max(1, len(every) // 100)]
                shuffled = rng.permutation(asked)
                for key, wanted in stat_ids.items():
                    want = np.zeros(len(every), bool)
                    want[owner[np.isin(stats.id, list(wanted))]] = True
                    assert np.array_equal(line.has(asked, key), want[asked]), (name, key)
                    assert np.array_equal(line.has(shuffled, key), want[shuffled]), (name, key)
                    hits += int(want[asked].sum())
    assert hits, "no event had a stat of any name"


def test_a_stat_the_decoder_does_not_read_is_answered_by_the_runtime() -> None:
    """A stat whose id is over 31 bits: the line decodes (its layout is the one the decoder
    knows; its stats are read when asked for), and once such a stat is read the line's stats
    are answered from the runtime's parse of it, as for a line the decoder refuses."""
    from xprof_magic._analysis.timeline.thread_lines import SerializedLines

    line = xspace.XLine(name="python", timestamp_ns=5)
    for i in range(4):
        event = line.events.add(metadata_id=1, offset_ps=10 * i, duration_ps=5)
        event.stats.add(metadata_id=7, int64_value=i + 1)
    line.events[2].stats.add(metadata_id=2**40, str_value="far")
    raw = line.SerializeToString()
    columns = wire.decode_line(raw)
    assert columns.offset_ps.tolist() == [0, 10, 20, 30]
    with pytest.raises(wire.WireError):
        columns.stats.every()
    stat_ids = {"step_num": {7}, "far": {2**40}}
    every = np.arange(4)
    for ask_first in ("ints", "has", "stat"):
        lines = SerializedLines([raw], {1: "step"}, stat_ids)
        decoded = lines.line(0)
        if ask_first == "has":
            assert decoded.has(every, "far").tolist() == [False, False, True, False]
        elif ask_first == "stat":
            assert decoded.stat(2, "far") == "far"
        assert decoded.ints(every, "step_num") == [1, 2, 3, 4]
        assert decoded.has(every, "far").tolist() == [False, False, True, False]
        assert decoded.stat(2, "far") == "far"
        assert decoded.values(every, ("far",)) == {"far": [None, None, "far", None]}
        assert decoded.stat(1, "step_num") == "2"
