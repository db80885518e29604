"""The timeline converted ahead of the click, against real viewers and XProf's own converter.

Each test starts its own XProf viewer (the real server process, its preparer and the
converter child) on a log directory of its own, then commits a real torch_xla capture into
it the way the store does (one rename) and watches what lands in the run folder, what the
embedded trace viewer page says, and what XProf then serves. Waits are on conditions.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from tests._wait import wait_until
from xprof_magic._runs import store as _store
from xprof_magic._viewer.prepare import convert, preparing, preview
from xprof_magic._viewer.prepare import preparer as prepare
from xprof_magic._viewer.process.client import Viewer, fetch_json, http_get
from xprof_magic._viewer.process.manager import ensure_viewer, list_viewers, stop_viewer

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
LABEL = "my_label"
RUNS = ("first", "second", "third")
TIMEOUT_S = 180.0
"""A conversion of these small captures takes under a second on an idle machine; the
bound is for a 2-core machine under ``make stress-test``."""


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("captures")
    env = dict(os.environ, PJRT_DEVICE="CPU", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, str(HERE / "_viewer_capture.py"), str(out), *RUNS],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture
def start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, captures: Path
) -> Iterator[Callable[..., tuple[Viewer, Path]]]:
    """Start a viewer on a fresh log directory holding the ``old`` captures, with ``env``
    set for it (and its child)."""
    started: list[Viewer] = []

    def start_viewer(old: tuple[str, ...] = (), **env: str) -> tuple[Viewer, Path]:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        logdir = tmp_path / "logs"
        profile = _store.profile_dir(logdir)
        profile.mkdir(parents=True)
        for run in old:  # runs made an hour before the viewer started
            shutil.copytree(captures / run, profile / run)
            hour_ago = time.time() - 3600
            os.utime(profile / run, (hour_ago, hour_ago))
        outcome = ensure_viewer(logdir, timeout=120)
        viewer = getattr(outcome, "viewer", None)
        assert viewer is not None, outcome
        started.append(viewer)
        return viewer, logdir

    yield start_viewer
    for viewer in started:
        stop_viewer(viewer)
    assert not [v for v in list_viewers() if v.pid in {s.pid for s in started}]


def commit(captures: Path, logdir: Path, run: str) -> Path:
    """Put capture ``run`` into the log directory as the store does: whole, in one rename."""
    staged = logdir / f"staged-{run}"
    shutil.copytree(captures / run, staged)
    # The store writes the run's metadata into it just before the rename, so the folder's
    # mtime is the commit's time (copytree would keep the module's capture time: the
    # preparer would take a run committed minutes after the capture for an old one).
    os.utime(staged)
    target = _store.profile_dir(logdir) / run
    os.rename(staged, target)
    return target


def caches(run_dir: Path) -> dict[str, tuple[int, int, int]]:
    """The trace viewer's cache files in a folder: name → (inode, mtime ns, size)."""
    found = {}
    for path in run_dir.iterdir():
        if path.name.endswith(".SSTABLE") or path.name == convert.CACHE_VERSION_FILE:
            stat = path.stat()
            found[path.name] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return found


def page_path(viewer: Viewer, run: str, status: bool = False) -> str:
    path = viewer.trace_viewer_path(run, "vm")
    return path + ("&" + preparing.STATUS_QUERY if status else "")


def status(viewer: Viewer, run: str) -> dict[str, Any]:
    code, body = http_get(viewer.port, page_path(viewer, run, status=True), timeout=30)
    assert code == 200, body[:300]
    answer: dict[str, Any] = json.loads(body)
    return answer


def page(viewer: Viewer, run: str) -> str:
    code, body = http_get(viewer.port, page_path(viewer, run), timeout=30)
    assert code == 200, body[:300]
    return body.decode(errors="replace")


def log_lines(viewer: Viewer, text: str) -> list[str]:
    return [line for line in Path(viewer.log_path).read_text().splitlines() if text in line]


def labels(viewer: Viewer, run: str) -> set[str]:
    trace = fetch_json(viewer, "data", run=run, tag="trace_viewer@", host="vm", timeout=TIMEOUT_S)
    return {str(event.get("name")) for event in trace["traceEvents"]}


def converter_pids(logdir: Path) -> list[int]:
    """The converter children working in this log directory (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"xprof_magic._viewer.prepare.convert" in cmdline and str(logdir).encode() in cmdline:
            found.append(int(entry.name))
    return found


def process_state(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split() or ["?"])[0]
    except OSError:
        return "gone"


def test_a_committed_run_is_prepared_once_and_xprof_serves_that_cache(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    viewer, logdir = start()
    run_dir = commit(captures, logdir, "first")
    hosts = _store.hosts(run_dir)
    version = convert.xprof_version()
    wait_until(
        lambda: convert.is_prepared(run_dir, hosts, version),
        TIMEOUT_S,
        lambda: f"the run's caches, before any request: {sorted(os.listdir(run_dir))}",
    )
    written = caches(run_dir)
    assert set(written) == {
        "vm.SSTABLE",
        "vm.metadata.SSTABLE",
        "vm.trie.SSTABLE",
        convert.CACHE_VERSION_FILE,
    }
    assert (run_dir / convert.CACHE_VERSION_FILE).read_text() == version
    assert "preparing the timeline" not in page(viewer, "first")
    assert status(viewer, "first")["state"] == "ready"
    assert LABEL in labels(viewer, "first")
    assert LABEL in labels(viewer, "first")
    # XProf read our caches: had it found them stale, it would have converted again and
    # rewritten them (new inodes or times).
    assert caches(run_dir) == written
    assert len(log_lines(viewer, "prepared the timeline of run first")) == 1
    assert not (logdir / "plugins" / "profile" / ".xprof_magic_prepare").exists()
    assert not (logdir / ".xprof_magic_prepare").exists()


def test_the_page_says_preparing_then_xprof_serves_the_run(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    """A slowed conversion: the page says so; the run folder holds no cache until the
    whole of it is moved in; a data request waits for it rather than converting beside it."""
    viewer, logdir = start(**{convert.DELAY_ENV: "4"})
    run_dir = commit(captures, logdir, "second")
    said = page(viewer, "second")
    assert "xprof: preparing the timeline" in said, said[:500]
    assert 'data-state="converting"' in said or 'data-state="queued"' in said, said[:500]

    def converted_in_scratch() -> bool:
        return any((logdir / ".xprof_magic_prepare").glob("*/vm.SSTABLE"))

    wait_until(converted_in_scratch, TIMEOUT_S, "XProf's converter writing in the scratch folder")
    assert caches(run_dir) == {}, "a cache in the run before the conversion was committed"
    state = status(viewer, "second")
    assert state["state"] == "converting" and state["seconds"] >= 0, state
    # Another tool's data (the widget's survey) waits for the timeline, shown first.
    fetch_json(viewer, "data", run="second", tag="overview_page", host="vm", timeout=TIMEOUT_S)
    assert status(viewer, "second")["state"] == "ready"
    commit(captures, logdir, "third")
    wait_until(lambda: converter_pids(logdir), TIMEOUT_S, "the next run's conversion")
    asked = time.monotonic()
    assert LABEL in labels(viewer, "third")
    assert status(viewer, "third")["state"] == "ready"
    assert time.monotonic() - asked > 0.5, "the data request did not wait for the conversion"
    assert "preparing the timeline" not in page(viewer, "second")
    for run in ("second", "third"):
        assert len(log_lines(viewer, f"prepared the timeline of run {run}")) == 1
    assert set(caches(run_dir)) >= {"vm.SSTABLE", convert.CACHE_VERSION_FILE}


def test_a_killed_conversion_leaves_no_cache_and_the_next_request_tries_again(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    viewer, logdir = start(**{convert.DELAY_ENV: "3"})
    run_dir = commit(captures, logdir, "third")
    wait_until(
        lambda: any((logdir / ".xprof_magic_prepare").glob("*/vm.SSTABLE")),
        TIMEOUT_S,
        "a whole cache in the scratch folder",
    )
    (pid,) = converter_pids(logdir)
    os.kill(pid, signal.SIGKILL)
    failed = wait_until(
        lambda: (lambda s: s if s["state"] == "failed" else None)(status(viewer, "third")),
        TIMEOUT_S,
        "the run failed after its conversion was killed",
    )
    assert "SIGKILL" in failed["reason"], failed
    assert caches(run_dir) == {}, "the killed conversion left a cache in the run"
    assert not (logdir / ".xprof_magic_prepare").exists()
    assert log_lines(viewer, "could not prepare the timeline of run third")
    # The next request for the page tries again, and this one is left to finish.
    assert "preparing the timeline" in page(viewer, "third")
    assert LABEL in labels(viewer, "third")
    assert len(log_lines(viewer, "prepared the timeline of run third")) == 1


def test_xprof_ignores_caches_written_without_their_version_file(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    """The order :func:`convert.commit` relies on: caches in a run without
    ``cache_version.txt`` (a viewer killed between the renames) are not read but replaced."""
    viewer, logdir = start(**{preparing.PREPARE_ENV: "0"})
    run_dir = commit(captures, logdir, "first")
    for name in ("vm.SSTABLE", "vm.metadata.SSTABLE", "vm.trie.SSTABLE"):
        (run_dir / name).write_bytes(b"half a cache")
    assert LABEL in labels(viewer, "first")
    assert (run_dir / "vm.SSTABLE").read_bytes() != b"half a cache"
    assert (run_dir / convert.CACHE_VERSION_FILE).is_file()
    # With the preparer off, nothing is converted ahead: no scratch, no status page.
    assert not (logdir / ".xprof_magic_prepare").exists()
    assert not log_lines(viewer, "prepared the timeline")


def test_a_capture_in_progress_pauses_the_conversion(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    viewer, logdir = start(**{convert.DELAY_ENV: "3"})
    staging = logdir / _store.STAGING_DIR / f"{os.getpid()}-{'0' * 32}"
    stale = logdir / _store.STAGING_DIR / f"{2**22 + 7}-{'1' * 32}"  # above pid_max: gone
    stale.mkdir(parents=True)
    assert not _store.capturing(logdir), "a staging folder of a dead process counts"
    staging.mkdir()
    assert _store.capturing(logdir)
    run_dir = commit(captures, logdir, "first")
    state = wait_until(
        lambda: (lambda s: s if s["paused"] else None)(status(viewer, "first")),
        TIMEOUT_S,
        "the run queued and paused while a capture is in progress",
    )
    assert state["state"] == "queued", state
    assert converter_pids(logdir) == [], "a conversion started during a capture"
    staging.rmdir()
    (pid,) = wait_until(lambda: converter_pids(logdir), TIMEOUT_S, "the conversion to start")
    staging.mkdir()
    wait_until(lambda: process_state(pid) == "T", TIMEOUT_S, "the converter stopped (SIGSTOP)")
    assert status(viewer, "first")["paused"]
    staging.rmdir()
    wait_until(
        lambda: process_state(pid) != "T", TIMEOUT_S, "the converter running again (SIGCONT)"
    )
    assert LABEL in labels(viewer, "first")
    assert convert.is_prepared(run_dir, ("vm",), convert.xprof_version())
    assert len(log_lines(viewer, "prepared the timeline of run first")) == 1


def test_a_conversion_past_its_memory_bound_is_killed_and_said(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    # The preparer looks at its child each tick: a conversion this small can end between
    # two looks, so the child stays alive (the delay is after converting, before exiting).
    viewer, logdir = start(**{convert.MAX_MB_ENV: "1", convert.DELAY_ENV: "60"})
    run_dir = commit(captures, logdir, "first")
    failed = wait_until(
        lambda: (lambda s: s if s["state"] == "failed" else None)(status(viewer, "first")),
        TIMEOUT_S,
        "the conversion killed at its memory bound",
    )
    assert "more than 1 MB of memory" in failed["reason"], failed
    assert convert.MAX_MB_ENV in failed["reason"]
    assert caches(run_dir) == {}
    # The page, polling, turns the failure into one line with a way to try again.
    assert "Try again" in preparing.PREPARING_PAGE and "could not be prepared" in (
        preparing.PREPARING_PAGE
    )


def test_older_runs_wait_to_be_asked_for_and_the_last_asked_goes_first(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    viewer, logdir = start(old=("first", "second", "third"))
    assert status(viewer, "first")["state"] == "idle"
    staging = logdir / _store.STAGING_DIR / f"{os.getpid()}-{'0' * 32}"
    staging.mkdir(parents=True)  # a capture: nothing starts while the runs are asked for
    fetch_json(viewer, "run_tools", run="first")  # the widget showing it
    fetch_json(viewer, "hosts", run="second")
    assert status(viewer, "first")["state"] == status(viewer, "second")["state"] == "queued"
    staging.rmdir()
    profile = _store.profile_dir(logdir)
    version = convert.xprof_version()
    wait_until(
        lambda: all(
            convert.is_prepared(profile / r, ("vm",), version) for r in ("first", "second")
        ),
        TIMEOUT_S,
        "both runs asked for prepared",
    )
    order = [line.rpartition("of run ")[2].split()[0] for line in log_lines(viewer, "prepared")]
    assert order == ["second", "first"], order
    assert status(viewer, "third")["state"] == "idle", "a run nobody asked for was converted"
    assert not convert.is_prepared(profile / "third", ("vm",), version)


@pytest.fixture
def preparer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[prepare.Preparer, Path]]]:
    """A :class:`prepare.Preparer` in this process, on a fresh log directory, with ``env``
    set for its children; stopped (its child killed) at the end."""
    made: list[prepare.Preparer] = []

    def make(**env: str) -> tuple[prepare.Preparer, Path]:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        logdir = tmp_path / "logs"
        _store.profile_dir(logdir).mkdir(parents=True)
        made.append(prepare.Preparer(str(logdir), str(HERE.parent)).start())
        return made[-1], logdir

    yield make
    for one in made:
        one.stop()


def state_of(preparer: prepare.Preparer, run: str, state: str) -> Callable[[], Any]:
    return lambda: (lambda s: s if s["state"] == state else None)(preparer.status(run))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_conversion_that_cannot_start_is_said_and_leaves_nothing_open(
    preparer: Callable[..., tuple[prepare.Preparer, Path]],
    captures: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No process to be had (fork refused): the run fails with the reason, once; no log
    file, scratch folder or retry is left behind; the next ask for its timeline converts it."""
    refusals: list[Path] = []

    def refused(root: str, scratch: Path, *args: Any) -> Any:
        refusals.append(scratch)
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    real_start = convert.start
    monkeypatch.setattr(convert, "start", refused)
    before = open_fds()
    one, logdir = preparer()
    commit(captures, logdir, "first")
    failed = wait_until(state_of(one, "first", "failed"), TIMEOUT_S, "the refused conversion")
    assert failed["reason"] == f"cannot start the conversion: {os.strerror(errno.EAGAIN)}"
    assert not refusals[0].exists() and not (logdir / prepare.SCRATCH_DIR).exists()
    assert open_fds() == before, "the refused child's log file was left open"
    monkeypatch.setattr(convert, "start", real_start)
    commit(captures, logdir, "second")  # its conversion: ticks pass
    wait_until(state_of(one, "second", "ready"), TIMEOUT_S, "the next run converted")
    assert len(refusals) == 1, "a failed run was tried again unasked"
    assert one.status("first")["state"] == "failed"
    one.want("first")  # another tool's request (the survey's): not tried again for it
    commit(captures, logdir, "third")  # ticks pass
    wait_until(state_of(one, "third", "ready"), TIMEOUT_S, "a later run converted")
    assert one.status("first")["state"] == "failed"
    one.want("first", retry=True)  # its timeline opened again
    wait_until(state_of(one, "first", "ready"), TIMEOUT_S, "the run converted when asked again")


def test_a_conversion_stopped_by_an_unnamed_signal_is_said_and_the_preparer_goes_on(
    preparer: Callable[..., tuple[prepare.Preparer, Path]],
    captures: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real-time signal has no name in :mod:`signal`: the reason still says which, and
    the preparer's thread lives on to convert the next run."""
    one, logdir = preparer(**{convert.DELAY_ENV: "60"})
    commit(captures, logdir, "first")
    (pid,) = wait_until(lambda: converter_pids(logdir), TIMEOUT_S, "the conversion to start")
    monkeypatch.delenv(convert.DELAY_ENV)
    number = signal.SIGRTMIN + 1
    with pytest.raises(ValueError):
        signal.Signals(number)
    os.kill(pid, number)
    failed = wait_until(state_of(one, "first", "failed"), TIMEOUT_S, "the stopped conversion")
    assert failed["reason"] == f"the conversion was stopped by signal {number}", failed
    commit(captures, logdir, "second")
    wait_until(state_of(one, "second", "ready"), TIMEOUT_S, "the next run converted")


def test_xprof_serving_a_run_after_its_wait_stops_ours_and_none_starts_meanwhile(
    preparer: Callable[..., tuple[prepare.Preparer, Path]],
    captures: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trace data request that waited past its bound has XProf convert the run: ours
    is stopped in the same hold of the lock, none starts while XProf serves it, and the
    run is queued again afterwards."""
    one, logdir = preparer(**{convert.DELAY_ENV: "60"})
    commit(captures, logdir, "first")
    wait_until(lambda: converter_pids(logdir), TIMEOUT_S, "the conversion to start")
    monkeypatch.delenv(convert.DELAY_ENV)
    with one.xprof_converts("first", timeout=0.5):
        assert converter_pids(logdir) == [], "ours still converts beside XProf"
        for run in ("second", "third"):  # converted one after the other: ticks pass
            commit(captures, logdir, run)
        for run in ("second", "third"):
            wait_until(state_of(one, run, "ready"), TIMEOUT_S, f"run {run} converted")
        assert one.status("first")["state"] == "queued", "ours converted beside XProf"
    wait_until(state_of(one, "first", "ready"), TIMEOUT_S, "the run converted again after")


def test_another_tools_request_waits_until_the_timeline_is_served_or_its_grace_passed(
    preparer: Callable[..., tuple[prepare.Preparer, Path]], captures: Path
) -> None:
    """The widget's survey has XProf convert the run for other tools at normal priority:
    its requests wait for the frame's first paint (XProf has served the trace data), or,
    with no request for that data, for a grace after the run was ready."""
    one, logdir = preparer()
    for run in ("first", "second"):
        commit(captures, logdir, run)
    for run in ("first", "second"):
        wait_until(state_of(one, run, "ready"), TIMEOUT_S, f"run {run} converted")
    survey = threading.Thread(target=one.wait, args=("first", TIMEOUT_S), kwargs={"shown": 600})
    survey.start()
    survey.join(1.0)
    assert survey.is_alive(), "another tool's request went ahead of the timeline's paint"
    with one.xprof_converts("first"):  # the frame's trace data request, served
        pass
    survey.join(TIMEOUT_S)
    assert not survey.is_alive(), "another tool's request still waits after the paint"
    asked = time.monotonic()
    one.wait("second", TIMEOUT_S, shown=1.0)  # ready, and nobody asks for its trace data
    assert time.monotonic() - asked < TIMEOUT_S - 1


def test_a_starved_conversion_is_raised_to_normal_priority_in_place() -> None:
    """Each thread of a child at the lowest priority (``SCHED_IDLE``, nice 19) goes to
    ``SCHED_OTHER`` at nice 0, alive and with its work, where the user may raise a priority
    (root here; elsewhere :func:`convert.hurry` says False and the child is started again)."""
    code = (
        "import os, threading, time\n"
        "os.nice(19)\n"
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
        "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        tasks = Path(f"/proc/{child.pid}/task")

        def policies() -> set[tuple[int, int]]:  # (nice, policy) of each thread
            found = set()
            for task in tasks.iterdir():
                fields = (task / "stat").read_text().rpartition(")")[2].split()
                found.add((int(fields[16]), int(fields[38])))
            return found

        assert policies() == {(19, os.SCHED_IDLE)} and len(list(tasks.iterdir())) == 2
        if os.geteuid() != 0:  # no right to lower a nice value: said, and started again
            assert not convert.hurry(child.pid)
            return
        assert convert.hurry(child.pid)
        assert policies() == {(0, os.SCHED_OTHER)}
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_the_surveys_requests_are_answered_below_the_users_work(tmp_path: Path) -> None:
    """A request marked :data:`preparing.BACKGROUND` (the widget's tools survey, which has
    XProf convert the run for each tool) is answered in a thread of its own at nice
    :data:`preparing.BACKGROUND_NICE`, its errors raised in the request's; others as they
    come, in the request's thread."""
    logdir = tmp_path / "logs"
    _store.profile_dir(logdir).mkdir(parents=True)
    one = prepare.Preparer(str(logdir), str(HERE.parent)).start()
    seen: list[tuple[int, int]] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        tid = threading.get_native_id()
        seen.append((tid, os.getpriority(os.PRIO_PROCESS, tid)))
        if "fail" in environ["QUERY_STRING"]:
            raise LookupError("XProf failed")
        start_response("200 OK", [])
        return [b"ok"]

    serve = preparing.prepared(app, one)

    def get(query: str) -> bytes:
        environ = {"PATH_INFO": "/data/plugin/profile/data", "QUERY_STRING": query}
        return b"".join(serve(environ, lambda *args: None))

    me = threading.get_native_id()
    base = os.getpriority(os.PRIO_PROCESS, me)
    marked = "run=r&tag=op_profile&host=vm&" + urlencode(preparing.BACKGROUND)
    try:
        assert get(marked) == b"ok"
        assert get("run=r&tag=op_profile&host=vm") == b"ok"
        with pytest.raises(LookupError, match="XProf failed"):
            get(marked + "&fail=1")
    finally:
        one.stop()
    (background, background_nice), (foreground, foreground_nice), (failed, _) = seen
    lowered = preparing.BACKGROUND_NICE if os.geteuid() == 0 else max(base, 10)
    assert background != me and failed != me and background_nice == lowered
    assert foreground == me and foreground_nice == base
    assert os.getpriority(os.PRIO_PROCESS, me) == base, "the request's own thread was lowered"


def lines_of(space: Any) -> list[Any]:
    return [line for plane in space.planes for line in plane.lines]


def starts(line: Any) -> list[int]:
    return [line.timestamp_ns * 1000 + event.offset_ps for event in line.events]


def test_the_preview_keeps_each_lines_first_events_whole_and_cuts_at_one_time(
    captures: Path, tmp_path: Path
) -> None:
    """The cut of a real capture: every plane, metadata and line stays; each line keeps
    the events that start before one time, whole (stats and all) and in order; about the
    count asked for. A line written out of order is sorted first: the same preview."""
    from xprof_magic._analysis.timeline import xspace

    def parsed(path: Path) -> Any:
        space = xspace.XSpace()
        space.ParseFromString(path.read_bytes())
        return space

    source = captures / "first" / "vm.xplane.pb"
    whole = parsed(source)
    total = sum(len(line.events) for line in lines_of(whole))
    wanted = int(0.3 * total)
    span = preview.cut(source, tmp_path / "vm.xplane.pb", wanted)
    cut = parsed(tmp_path / "vm.xplane.pb")

    def outline(space: Any) -> list[Any]:
        return [(p.name, dict(p.event_metadata), [x.name for x in p.lines]) for p in space.planes]

    assert outline(cut) == outline(whole)
    kept: list[int] = []
    dropped: list[int] = []
    for line, line_cut in zip(lines_of(whole), lines_of(cut), strict=True):
        assert starts(line) == sorted(starts(line)), f"{line.name}: not as the profiler sorts"
        count = len(line_cut.events)
        assert list(line.events[:count]) == list(line_cut.events), line.name
        kept += starts(line)[:count]
        dropped += starts(line)[count:]
    assert kept and dropped and max(kept) < min(dropped)
    assert span["events"] == len(kept) and span["of"] == total, span
    assert wanted <= len(kept) < wanted + kept.count(max(kept)), (wanted, len(kept))
    first = min(kept)
    assert span["shown_s"] == round((max(kept) + 1 - first) / 1e12, 6), span
    assert span["shown_s"] < span["total_s"], span

    shuffled = parsed(source)
    longest = max(lines_of(shuffled), key=lambda line: len(line.events))
    events = [event.SerializeToString() for event in reversed(longest.events)]
    del longest.events[:]
    for data in events:
        longest.events.add().ParseFromString(data)
    (tmp_path / "shuffled.xplane.pb").write_bytes(shuffled.SerializeToString())
    again_span = preview.cut(tmp_path / "shuffled.xplane.pb", tmp_path / "again.xplane.pb", wanted)
    assert again_span == span
    again = parsed(tmp_path / "again.xplane.pb")
    assert [list(x.events) for x in lines_of(again)] == [list(x.events) for x in lines_of(cut)]


def preview_path(viewer: Viewer, run: str) -> str:
    """The trace viewer page of ``run`` as the preparing page embeds it for the preview."""
    path, _, query = viewer.trace_viewer_path(run, "vm").partition("?")
    args = parse_qsl(query)
    args = [(k, v + "&" + preparing.PREVIEW_QUERY if k == "trace_data_url" else v) for k, v in args]
    return path + "?" + urlencode(args)


def test_a_large_runs_first_events_are_shown_while_the_whole_converts(
    start: Callable[..., tuple[Viewer, Path]], captures: Path
) -> None:
    """A run over the preview's threshold: its first events are converted first and served
    for the page's preview while the whole run converts; the run then gets the whole."""
    viewer, logdir = start(
        **{
            preview.FROM_MB_ENV: "0",
            preview.EVENTS_ENV: "6",
            convert.DELAY_ENV: "5",
        }
    )
    run_dir = commit(captures, logdir, "second")
    state = wait_until(
        lambda: (lambda s: s if s.get("preview") else None)(status(viewer, "second")),
        TIMEOUT_S,
        "the run's preview",
    )
    assert state["state"] in ("queued", "converting"), state
    span = state["preview"]
    assert 0 < span["events"] < span["of"] and 0 < span["shown_s"] < span["total_s"], span
    # The page said meanwhile holds the preview from its first byte (no poll first).
    said = page(viewer, "second")
    assert 'data-preview="{&quot;shown_s&quot;' in said or "xprof-preparing" not in said, said
    # The page that shows the preview is XProf's own, for the same run; its data is the cut.
    code, body = http_get(viewer.port, preview_path(viewer, "second"), timeout=30)
    assert code == 200 and b"preparing the timeline" not in body, body[:300]
    asked = {"run": "second", "tag": "trace_viewer@", "host": "vm"}
    shown = fetch_json(viewer, "data", timeout=TIMEOUT_S, **asked, xprof_magic_preview="1")
    whole = fetch_json(viewer, "data", timeout=TIMEOUT_S, **asked)
    after = status(viewer, "second")
    assert after["state"] == "ready" and after["preview"] is None, after

    def times(trace: dict[str, Any]) -> list[float]:
        return [float(e["ts"]) for e in trace["traceEvents"] if e.get("ph") == "X"]

    assert 0 < len(times(shown)) < len(times(whole))
    assert max(times(shown)) < max(times(whole))
    assert min(times(shown)) == min(times(whole)), "the preview is not the capture's start"
    assert len(log_lines(viewer, "prepared the timeline of run second")) == 1
    assert set(caches(run_dir)) >= {"vm.SSTABLE", convert.CACHE_VERSION_FILE}
    assert list(logdir.glob(f"{prepare.SCRATCH_DIR}/*-preview-*/vm.SSTABLE")), "kept for the page"


def test_a_viewer_keeps_the_previews_of_its_newest_runs_and_removes_them_when_it_stops(
    tmp_path: Path,
) -> None:
    """A preview is adopted once its span file is written, moved out of the conversion's
    scratch; past :data:`preview.KEPT` runs the oldest is removed; ``clear`` removes all."""
    scratch = tmp_path / prepare.SCRATCH_DIR
    previews = preview.Previews(scratch)
    children = []
    for number in range(preview.KEPT + 1):
        child = scratch / f"child-{number}"
        (child / preview.FOLDER).mkdir(parents=True)
        (child / preview.FOLDER / "vm.SSTABLE").write_bytes(b"cache")
        children.append(child)
    assert not previews.take("run-0", children[0]), "adopted before its span file"
    assert previews.folder("run-0") is None and (children[0] / preview.FOLDER).is_dir()
    for number, child in enumerate(children):
        span = {"shown_s": 1.0, "total_s": 9.0, "events": number, "of": 10}
        (child / preview.FOLDER / preview.SPAN_FILE).write_text(json.dumps(span))
        assert previews.take(f"run-{number}", child)
        assert not (child / preview.FOLDER).exists()
        assert not previews.take(f"run-{number}", child), "adopted twice"
    assert previews.folder("run-0") is None, "more previews kept than KEPT"
    kept = [previews.folder(f"run-{n}") for n in range(1, preview.KEPT + 1)]
    assert all(folder is not None and (folder / "vm.SSTABLE").is_file() for folder in kept)
    assert previews.span(f"run-{preview.KEPT}") == {
        "shown_s": 1.0,
        "total_s": 9.0,
        "events": preview.KEPT,
        "of": 10,
    }
    assert len(list(scratch.glob(f"{os.getpid()}-preview-*"))) == preview.KEPT
    previews.clear()
    assert not list(scratch.glob("*-preview-*")) and previews.folder("run-1") is None


def test_a_conversion_never_makes_a_removed_log_directory_again(tmp_path: Path) -> None:
    """The scratch folder is made inside the log directory, never the log directory itself:
    one removed while the viewer runs stays removed, and the conversion fails."""
    logdir = tmp_path / "logs"
    run_dir = logdir / "plugins" / "profile" / "first"
    run_dir.mkdir(parents=True)
    (run_dir / "vm.xplane.pb").write_bytes(b"an XSpace")
    convert.scratch_for(run_dir, logdir / prepare.SCRATCH_DIR / "1-a", ("vm",))
    assert (logdir / prepare.SCRATCH_DIR / "1-a" / "vm.xplane.pb").read_bytes() == b"an XSpace"
    shutil.rmtree(logdir)
    with pytest.raises(FileNotFoundError):
        convert.scratch_for(run_dir, logdir / prepare.SCRATCH_DIR / "2-b", ("vm",))
    assert not logdir.exists()
