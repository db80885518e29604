"""A capture's failure paths, driven with a fake backend: nothing lost, nothing half-written.

No profiler here (no torch, no JAX): :class:`FakeBackend` is a profiler that writes a
timeline when its trace stops and can be told to fail at any of its calls. Each test checks
what a user would see after the failure: no staging folder and no partial run left, the run
already on disk untouched, the trace stopped and every hook closed, and the user's own
exception, the one that propagates, exactly once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from xprof_magic._backends import Backend, MetricsSnapshot, ServerStatus, TraceAlreadyRunning
from xprof_magic._backends import registry as _registry
from xprof_magic._capture import capture as _capture
from xprof_magic._capture import ondemand as _ondemand
from xprof_magic._capture.plan import Plan
from xprof_magic._cell import labels as _labels
from xprof_magic._cell.step_window import parse_steps
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store

HOST = "fake-host"


class FakeBackend:
    """A profiler that fails where told (``fail[call] = exception``) and says what is open."""

    name = "fake"

    def __init__(self) -> None:
        self.fail: dict[str, BaseException] = {}
        self.tracing = False
        self.folder: Path | None = None
        self.open: set[str] = set()
        self.stops = 0
        self.server_message = ""

    def _call(self, what: str) -> None:
        error = self.fail.get(what)
        if error is not None:
            raise error

    def start_server(self, port: int) -> ServerStatus:
        self._call("start_server")
        return ServerStatus(port, True, self.server_message)

    def start_trace(self, log_dir: str) -> None:
        self._call("start_trace")
        if self.tracing:
            raise TraceAlreadyRunning("a trace is already running")
        self.tracing, self.folder = True, Path(log_dir)

    def stop_trace(self) -> None:
        # As torch_xla's and JAX's: the session is gone even when writing it failed.
        self.tracing = False
        self.stops += 1
        self._call("stop_trace")
        assert self.folder is not None
        session = _store.profile_dir(self.folder) / "session"
        session.mkdir(parents=True)
        (session / f"{HOST}.xplane.pb").write_bytes(b"\0" * 64)

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def wait_for_device(self) -> None:
        self._call("wait_for_device")

    def runtime_started(self) -> bool:
        return True

    @contextlib.contextmanager
    def _opened(self, what: str) -> Iterator[None]:
        self._call(what)
        self.open.add(what)
        try:
            yield
        finally:
            self.open.discard(what)

    def step_hooks(
        self, on_sync: Callable[[bool], None], on_user_step: Callable[[bool], None]
    ) -> AbstractContextManager[None]:
        return self._opened("step_hooks")

    def user_hooks(
        self,
        on_user_trace: Callable[[str], None],
        on_workers: Callable[[str, bool], str | None],
        namespace: dict[str, Any] | None,
    ) -> AbstractContextManager[None]:
        return self._opened("user_hooks")

    def sync(self) -> None:
        self._call("sync")

    def metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot()

    def device(self) -> str:
        return "CPU"

    def device_name(self) -> str:
        return ""

    def memory(self) -> tuple[float, float, float] | None:
        return None

    def ops_made(self) -> int:
        return -1

    def versions(self) -> dict[str, str]:
        return {}

    def watch(self) -> AbstractContextManager[None]:
        return self._opened("watch")


@pytest.fixture(autouse=True)
def no_profiler_imported() -> Iterator[None]:
    """The capture machinery itself imports no profiler."""
    before = set(sys.modules)
    yield
    new = {m.split(".")[0] for m in set(sys.modules) - before}
    assert not new & {"torch", "torch_xla", "jax", "jaxlib"}


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    fake = FakeBackend()
    typed: Backend = fake  # the fake offers exactly the protocol
    monkeypatch.setitem(_registry._loaded, "fake", typed)
    monkeypatch.setattr(_capture, "_server_said", {})
    return fake


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """A log directory that already holds one run, ``old``."""
    folder = tmp_path / "logs"
    staging = _store.begin(folder)
    session = _store.profile_dir(staging.path) / "session"
    session.mkdir(parents=True)
    (session / "old.xplane.pb").write_bytes(b"old timeline")
    _store.commit(staging, "old", {"status": "ok"})
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class Said(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)

    def text(self) -> str:
        return "\n".join(self)


def make(logdir: Path, said: Said | None = None, **plan: Any) -> _capture.Capture:
    steps, window = parse_steps(plan.pop("steps", False))
    return _capture.Capture(
        Plan(
            logdir=_logdir.Logdir.parse(logdir),
            name=plan.pop("name", "new"),
            steps=steps,
            step_window=window,
            backend="fake",
            server=plan.pop("server", False),
            **plan,
        ),
        notify=said if said is not None else Said(),
    )


def assert_clean(
    logdir: Path, backend: FakeBackend, old: dict[str, bytes], runs: list[str]
) -> None:
    """No staging left, the runs expected and whole, the old run as it was, all closed."""
    assert not (logdir / _store.STAGING_DIR).exists()
    found = _store.runs(logdir)
    assert sorted(r.name for r in found) == sorted(["old", *runs])
    for run in found:
        assert run.hosts and _store.read_metadata(run.path) is not None
    assert {k: v for k, v in snapshot(logdir).items() if k in old} == old
    assert not backend.tracing
    assert backend.open == set()
    assert _labels._active is None


@pytest.mark.parametrize("where", ["start_trace", "start_server", "user_hooks", "step_hooks"])
def test_a_start_that_fails_leaves_nothing(logdir: Path, backend: FakeBackend, where: str) -> None:
    old = snapshot(logdir)
    error = RuntimeError(f"{where} broke")
    backend.fail[where] = error
    capture = make(logdir, server=True, steps=True)
    with pytest.raises(RuntimeError) as caught:
        capture.start()
    assert caught.value is error
    assert backend.stops == (0 if where == "start_trace" else 1)
    assert_clean(logdir, backend, old, runs=[])


def test_a_trace_the_user_left_running_is_refused_and_left_running(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    backend.tracing = True
    with pytest.raises(TraceAlreadyRunning):
        make(logdir).start()
    assert backend.tracing and backend.stops == 0  # the user's trace is theirs
    backend.tracing = False
    assert_clean(logdir, backend, old, runs=[])


def test_an_interrupted_start_leaves_nothing(logdir: Path, backend: FakeBackend) -> None:
    old = snapshot(logdir)
    backend.fail["step_hooks"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        make(logdir, steps=True).start()
    assert_clean(logdir, backend, old, runs=[])


def test_the_cells_exception_propagates_once_and_its_run_is_stored(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    error = ValueError("the cell failed")
    with pytest.raises(ValueError) as caught, make(logdir, steps=True) as capture:
        raise error
    assert caught.value is error and error.__context__ is None
    assert capture.result is not None and capture.result.status == "error"
    assert capture.result.error == {"type": "ValueError", "message": "the cell failed"}
    assert_clean(logdir, backend, old, runs=["new"])


def test_long_lines_print_broken_between_words(
    logdir: Path, backend: FakeBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook's output area breaks a printed line that does not fit at any character
    (JupyterLab: ``word-break: break-all``), so the capture's report and its messages come
    in lines of at most ``TEXT_WIDTH`` characters, broken between words, the rest indented."""
    from xprof_magic._units import TEXT_WIDTH, wrapped

    words = " ".join(f"word{i}" for i in range(60))
    with make(logdir) as capture:
        pass
    assert capture.result is not None
    capture.result.messages.append(f"warning: {words}")
    lines = capture.result.text().splitlines()
    assert all(len(line) <= TEXT_WIDTH for line in lines), lines
    tail = [line for line in lines if "word" in line]
    assert len(tail) > 1 and all(line.startswith("    word") for line in tail[1:])
    assert " ".join(" ".join(tail).split()) == f"warning: {words}"
    _capture._to_stderr(f"xprof: {words}")
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) > 1 and all(len(line) <= TEXT_WIDTH for line in printed)
    assert printed[1].startswith("  word")
    path = "/" + "x" * 150
    assert wrapped(f"  stored in {path} now") == f"  stored in\n    {path}\n    now"
    assert wrapped("short line") == "short line"


def test_the_value_the_cell_kept_is_what_run_returns(logdir: Path, backend: FakeBackend) -> None:
    capture = make(logdir).start()
    assert capture.run(lambda: _labels.keep(42) and None) == 42
    capture.stop()
    assert capture.result is not None and capture.result.status == "ok"


@pytest.mark.parametrize("cell_fails", [False, True])
def test_a_stop_that_fails_keeps_the_cells_outcome(
    logdir: Path, backend: FakeBackend, cell_fails: bool
) -> None:
    old = snapshot(logdir)
    backend.fail["stop_trace"] = OSError(errno.ENOSPC, "No space left on device")
    said = Said()
    capture = make(logdir, said)
    capture.start()
    error = ValueError("the cell failed") if cell_fails else None
    assert capture.stop(error) is None  # never raises: the cell's outcome stands
    assert "could not be stored" in said.text() and "free space" in said.text()
    assert "unaffected" in said.text() and "\n" not in said[0]
    assert_clean(logdir, backend, old, runs=[])


def test_an_interrupted_device_wait_stops_the_trace_then_raises(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    interrupt = KeyboardInterrupt()
    backend.fail["wait_for_device"] = interrupt
    capture = make(logdir).start()
    capture.run(lambda: None)
    with pytest.raises(KeyboardInterrupt) as caught:
        capture.stop()
    assert caught.value is interrupt
    assert capture.result is not None and capture.result.status == "error"
    assert_clean(logdir, backend, old, runs=["new"])


def test_an_interrupted_wait_does_not_replace_the_cells_exception(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    backend.fail["wait_for_device"] = KeyboardInterrupt()
    capture = make(logdir).start()
    capture.stop(ValueError("the cell failed"))  # the caller raises the cell's own
    assert capture.result is not None and capture.result.error is not None
    assert capture.result.error["type"] == "ValueError"
    assert_clean(logdir, backend, old, runs=["new"])


def test_an_interrupted_sync_stops_the_trace_then_raises(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    backend.fail["sync"] = KeyboardInterrupt()
    capture = make(logdir, sync=True).start()
    with pytest.raises(KeyboardInterrupt):
        capture.stop()
    assert_clean(logdir, backend, old, runs=["new"])


def test_a_commit_on_a_full_disk_leaves_no_half_run(
    logdir: Path, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = snapshot(logdir)

    def full(path: Path, data: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(_store, "write_json", full)
    said = Said()
    with make(logdir, said):
        pass
    assert "could not be stored" in said.text() and "free space" in said.text()
    assert_clean(logdir, backend, old, runs=[])


def test_a_commit_into_an_unwritable_log_directory_leaves_no_half_run(
    logdir: Path, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = snapshot(logdir)
    rename = os.rename
    profile = _store.profile_dir(logdir.absolute())

    def refused(source: Any, target: Any) -> None:
        if Path(target).parent == profile:  # as a read-only folder would (even for root)
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        rename(source, target)

    monkeypatch.setattr(os, "rename", refused)
    said = Said()
    with make(logdir, said):
        pass
    assert "could not be stored" in said.text() and "--logdir" in said.text()
    assert_clean(logdir, backend, old, runs=[])


def test_an_on_demand_capture_fails_to_commit_with_the_same_error(
    logdir: Path, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%xprof capture`` stores through the same commit, so it fails the same way."""
    old = snapshot(logdir)

    def captured(addresses: list[str], staging: Path, options: Any) -> list[Any]:
        xplane = staging / "address0" / "x.xplane.pb"
        xplane.parent.mkdir()
        xplane.write_bytes(b"timeline")
        return [(xplane, "")]

    def full(path: Path, data: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(_ondemand, "_capture_all", captured)
    monkeypatch.setattr(_store, "write_json", full)
    with pytest.raises(_store.LogdirError) as caught:
        _ondemand.capture(["localhost:1"], _logdir.Logdir.parse(logdir))
    said = Said()
    with make(logdir, said):
        pass
    head, _, tail = str(caught.value).partition(": [Errno 28]")
    assert head in said.text() and tail.rpartition("'")[2] in said.text()  # paths aside
    assert tail.endswith("; free space or choose another --logdir")
    assert_clean(logdir, backend, old, runs=[])


def test_a_window_whose_trace_cannot_start_stores_nothing_and_says_why(
    logdir: Path, backend: FakeBackend
) -> None:
    old = snapshot(logdir)
    said = Said()
    capture = make(logdir, said, steps="0:2").start()
    backend.fail["start_trace"] = RuntimeError("no profiler")
    capture.run(lambda: None)  # step 0 starts with the cell: the window's first
    capture.stop()
    assert capture.result is None
    assert "the trace could not start: no profiler" in said.text()
    assert "the profiler's stop_trace()" in said.text()  # an unknown backend's words
    assert_clean(logdir, backend, old, runs=[])


def test_the_server_says_a_thing_once_and_keeps_no_state_in_the_backend(
    logdir: Path, backend: FakeBackend
) -> None:
    backend.server_message = "port 9012 is busy"
    said = Said()
    for name in ("one", "two"):
        with make(logdir, said, server=True, name=name):
            pass
    assert [m for m in said if "busy" in m] == ["xprof: port 9012 is busy"]
    assert set(vars(backend)) == set(vars(FakeBackend()))
    assert_clean(logdir, backend, {}, runs=["one", "two"])


_SPIN = (
    "import sys, time\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.3:\n"
    "    pass\n"
    "print('spun', flush=True)\n"
    "sys.stdin.read()\n"
)
"""A child that computes for 0.3 s of CPU, says so, then waits for its stdin to close."""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="children's CPU from /proc")
def test_a_capture_keeps_the_cpu_its_child_processes_used(
    logdir: Path, backend: FakeBackend
) -> None:
    """A loader's workers are the cell's child processes: their CPU while it ran, whether they
    were waited for before it ended (a DataLoader's iterator done) or still live (persistent
    workers), is the run's ``children_cpu_s``, beside none of a child that ran before it."""
    import subprocess

    def spin() -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", _SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        return child

    children = [spin()]  # its CPU is spent before the capture: not the run's
    try:
        with make(logdir) as capture:
            spin().communicate("")  # waited for before the cell ends
            children.append(spin())  # still live when it ends
        assert capture.result is not None
        meta = _store.read_metadata(_store.run_path(logdir, "new"))
        assert meta is not None
        used = meta["children_cpu_s"]
        assert 0.55 <= used <= 0.3 * 2 + 0.5, used  # two spins, and two interpreters' start-up
    finally:
        for child in children:
            child.communicate("")
