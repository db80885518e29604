"""The one JSON codec of the files saved beside a run (:mod:`xprof_magic._codec`): a run's
metadata and a summary round-trip through it; the metadata is read leniently (a file from an
older version, another tool or a damaged disk), the summary strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xprof_magic._analysis.model.summary import Summary
from xprof_magic._codec import from_plain, read_plain
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs.metadata import (
    LabelTime,
    MemoryFigure,
    MetricTotal,
    RunError,
    RunMetadata,
    RunMetrics,
)

SAVED = Path(__file__).parent / "data" / "saved-2026-12-05"

FULL = RunMetadata(
    run="r",
    cell="x = 1",
    cell_number=3,
    cell_first_line=2,
    labels=(
        LabelTime(("for i in range(3)",), 1, 0.5),
        LabelTime(("for i in range(3)", "f"), 3, 0.2),
    ),
    steps=(0.1, 0.2),
    options={"line": "--steps", "steps": ""},
    start_ns=1,
    end_ns=9,
    wall_s=0.5,
    status="error",
    error=RunError("ValueError", "bad"),
    backend="torch_xla",
    versions={"torch": "2.9.0"},
    metrics=RunMetrics({"CompileTime": 2}, {"ExecuteTime": MetricTotal(3, 0.01)}, ("why",)),
    memory=(MemoryFigure(5, ("f",), 1.0, 2.0, 3.0),),
    lines=((1, 2, 3, 4),),
)


def test_a_runs_metadata_round_trips(tmp_path: Path) -> None:
    _metadata.write(tmp_path, FULL)
    assert _metadata.read(tmp_path) == FULL and _metadata.read(tmp_path).problems == ()
    saved = json.loads((tmp_path / "xprof_magic.json").read_text())
    assert saved["memory"] == [[5, ["f"], 1.0, 2.0, 3.0]], "a figure is saved as a row"
    assert "problems" not in saved and saved["labels"][1] == {
        "path": ["for i in range(3)", "f"],
        "count": 3,
        "total_s": 0.2,
    }


def test_metadata_saved_on_2026_12_05_reads_as_it_did() -> None:
    """The file as the version of that day wrote it by hand (memory figures as rows)."""
    data = json.loads((SAVED / "xprof_magic.json").read_text())
    meta = RunMetadata.from_json(data)
    assert meta.problems == () and meta.run == "xla_augment" and meta.backend == "torch_xla"
    assert len(meta.labels) == len(data["labels"]) and meta.lines and meta.cell_first_line == 2
    rows = [[5, ["f"], 1.0, 2.0, 3.0]]
    assert RunMetadata.from_json({**data, "memory": rows}).memory == FULL.memory
    again = RunMetadata.from_json(json.loads(json.dumps(meta.to_json())))
    assert again == meta


def test_metadata_is_read_leniently_field_by_field() -> None:
    data = json.loads(json.dumps(FULL.to_json()))
    data["labels"].append({"path": "x"})
    data["steps"] = [0.1, "a"]
    data["wall_s"] = "slow"
    data["error"] = "boom"
    data["metrics"]["counters"]["bad"] = 1.5
    meta = RunMetadata.from_json(data)
    assert meta.labels == FULL.labels and meta.steps == (0.1,) and meta.wall_s is None
    assert meta.error == RunError("Error", "") and meta.metrics.counters == {"CompileTime": 2}
    (problem,) = meta.problems
    assert problem == "xprof_magic.json has unusable fields: error, labels, metrics, steps, wall_s"
    assert RunMetadata.from_json([1]).problems == ("xprof_magic.json does not hold an object",)
    empty, bad = read_plain(RunMetadata, {"status": "", "cell": ""})
    assert bad == () and RunMetadata.from_json({}).status == "unknown"
    assert RunMetadata.from_json({"cell": ""}).cell is None and empty.cell == ""


def test_a_summary_is_read_strictly() -> None:
    s = Summary(run="r", run_dir="/r", wall_s=1.5)
    assert Summary.from_json(json.loads(json.dumps(s.to_json()))) == s
    with pytest.raises(ValueError, match=r"Summary.wall_s: 'slow' does not fit"):
        from_plain(Summary, {**s.to_json(), "wall_s": "slow"})
    with pytest.raises(ValueError, match="not a summary of schema 4, 3 or 2"):
        Summary.from_json({**s.to_json(), "schema": 1})
