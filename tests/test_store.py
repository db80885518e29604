"""The capture store on its own: names, staging, atomic commit, listing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from xprof_magic._runs import store as _store


def stage_session(logdir: Path, host: str = "h") -> _store.Staging:
    """What the profiler leaves in a staging folder after ``stop_trace``."""
    staging = _store.begin(logdir)
    session = staging.path / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / f"{host}.xplane.pb").write_bytes(b"x")
    return staging


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("baseline", "baseline"),
        ("my run 1", "my_run_1"),
        ("../../etc/passwd", "etc_passwd"),
        ("/abs/path", "abs_path"),
        ("..", None),
        (".hidden", "hidden"),
        ("a\\b", "a_b"),
        ("x" * 300, "x" * 100),
        ("lr=3e-4,bs=8", "lr=3e-4_bs=8"),
    ],
)
def test_safe_run_name_stays_one_folder_inside(given: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="no usable characters"):
            _store.safe_run_name(given)
        return
    name = _store.safe_run_name(given)
    assert name == expected
    assert "/" not in name and not name.startswith(".")


def test_default_names_sort_by_time_and_name_the_cell() -> None:
    early = _store.default_run_name(datetime(2026, 1, 2, 3, 4, 5), 7)
    late = _store.default_run_name(datetime(2026, 1, 2, 3, 4, 6), 3)
    assert early == "20260102-030405-cell7" and early < late
    assert _store.default_run_name(datetime(2026, 1, 2), None).endswith("-capture")


def test_commit_moves_a_complete_run_into_place(tmp_path: Path) -> None:
    staging = stage_session(tmp_path)
    run = _store.commit(staging, "first", {"status": "ok"})
    assert run == tmp_path / "plugins" / "profile" / "first"
    assert (run / "h.xplane.pb").exists()
    assert _store.read_metadata(run) == {"status": "ok", "run": "first"}
    assert not staging.path.exists()
    assert not (tmp_path / _store.STAGING_DIR).exists()


def test_a_repeated_name_gets_a_suffix_and_nothing_is_overwritten(tmp_path: Path) -> None:
    runs = [_store.commit(stage_session(tmp_path), "same", {"i": i}) for i in range(3)]
    assert [r.name for r in runs] == ["same", "same-2", "same-3"]
    assert [(_store.read_metadata(r) or {})["i"] for r in runs] == [0, 1, 2]
    assert (_store.read_metadata(runs[1]) or {})["run"] == "same-2"


def test_concurrent_commits_of_one_name_stay_distinct(tmp_path: Path) -> None:
    stagings = [stage_session(tmp_path, host=f"h{i}") for i in range(8)]
    barrier = threading.Barrier(len(stagings))
    results: list[Path] = []

    def commit(s: _store.Staging) -> None:
        barrier.wait()
        results.append(_store.commit(s, "race", {}))

    threads = [threading.Thread(target=commit, args=(s,)) for s in stagings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.name for r in results}) == 8
    hosts = sorted(h for r in _store.runs(tmp_path) for h in r.hosts)
    assert hosts == sorted(f"h{i}" for i in range(8))


def test_runs_lists_newest_first_and_skips_incomplete_folders(tmp_path: Path) -> None:
    a = _store.commit(stage_session(tmp_path), "a", {"end_ns": 1_000_000_000})
    b = _store.commit(stage_session(tmp_path), "b", {"end_ns": 2_000_000_000})
    (tmp_path / "plugins" / "profile" / "empty").mkdir()
    listed = _store.runs(tmp_path)
    assert [r.name for r in listed] == ["b", "a"]
    assert listed[0].path == b and listed[1].path == a and listed[0].hosts == ("h",)
    assert _store.runs(tmp_path / "missing") == []


def test_begin_refuses_a_file_and_an_uncreatable_folder_without_writing(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(_store.LogdirError, match="is a file"):
        _store.begin(afile)
    with pytest.raises(_store.LogdirError, match="cannot create"):
        _store.begin(afile / "sub")
    assert list(tmp_path.iterdir()) == [afile]


def test_discard_leaves_other_stagings_alone(tmp_path: Path) -> None:
    one, two = _store.begin(tmp_path), _store.begin(tmp_path)
    _store.discard(one)
    assert not one.path.exists() and two.path.exists()
    _store.discard(two)
    assert not (tmp_path / _store.STAGING_DIR).exists()


def test_a_capture_or_its_summary_in_progress_is_seen_and_a_dead_ones_is_not(
    tmp_path: Path,
) -> None:
    """What the viewer's preparer waits for: a staging folder of a live process."""
    assert not _store.capturing(tmp_path)
    staging = _store.begin(tmp_path)
    assert staging.path.name.startswith(f"{os.getpid()}-")
    assert _store.capturing(tmp_path)
    _store.discard(staging)
    assert not _store.capturing(tmp_path)
    run_dir = _store.profile_dir(tmp_path) / "run"
    run_dir.mkdir(parents=True)
    with _store.working(run_dir):
        assert _store.capturing(tmp_path, summaries=True)
        assert not _store.capturing(tmp_path)
    assert not _store.capturing(tmp_path, summaries=True)
    assert not (tmp_path / _store.STAGING_DIR).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / _store.STAGING_DIR / f"{dead.pid}-{'a' * 32}").mkdir(parents=True)
    (tmp_path / _store.STAGING_DIR / "not-a-capture").mkdir()
    assert not _store.capturing(tmp_path)
