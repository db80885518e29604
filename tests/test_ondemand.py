"""On-demand capture: ``%xprof capture`` of running profiler servers, on real torch_xla.

Workers are real processes (``tests/_worker.py``: a torch_xla loop with a label and
``xp.start_server``); the captures go through XProf's own client in a real kernel.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._kernel import Kernel, free_port, text, with_server
from tests._said import notes_of
from xprof_magic import _analysis
from xprof_magic._capture import ondemand as _ondemand
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store
from xprof_magic._viewer.app import guard as _guard
from xprof_magic._viewer.process import client as _client
from xprof_magic._viewer.process import launch as _launch
from xprof_magic._viewer.process.manager import Launched, ensure_viewer, stop_viewer

WORKER = Path(__file__).with_name("_worker.py")


def labels_of(xplane: Path, names: set[str]) -> set[str]:
    """Which of ``names`` occur as events on the host planes of one timeline file."""
    from xprof.profile_data import ProfileData

    data = ProfileData.from_file(str(xplane))
    found: set[str] = set()
    for plane in data.planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                found |= {event.name for event in line.events if event.name in names}
    return found


def start_worker(port: int, label: str, sleep_ms: int) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(port), label, str(sleep_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=with_server(),
    )
    return worker


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[str, int]]:
    """Two running workers, each with a profiler server: label -> port. worker_b waits
    20 ms in each step, so it is the slow host."""
    ports = {"worker_a": free_port(), "worker_b": free_port()}
    sleeps = {"worker_a": 0, "worker_b": 20}
    started = {label: start_worker(port, label, sleeps[label]) for label, port in ports.items()}
    try:
        for label, worker in started.items():
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line.strip() == "ready", f"{label} did not start: {line!r}"
        yield ports
    finally:
        for worker in started.values():
            worker.kill()
            worker.wait()


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel(with_server())
    content, _ = k.run("%load_ext xprof_magic\nimport sys")
    assert content["status"] == "ok"
    yield k
    k.close()


def refused(k: Kernel, code: str) -> str:
    content, _ = k.run(code, timeout=240)
    assert content["status"] == "error"
    assert content["ename"] == "UsageError", content
    return str(content["evalue"])


def test_addresses_are_parsed_and_named_apart() -> None:
    assert _ondemand.parse_addresses(
        " localhost:9012,grpc://10.0.0.2:9012 ,9013,localhost:9012"
    ) == [
        "localhost:9012",
        "10.0.0.2:9012",
        "localhost:9013",
    ]
    assert _ondemand.host_name("localhost:9012") == "localhost_9012"
    assert _ondemand.host_name("[::1]:9012") == "1_9012"
    for bad in ("localhost", "host:port", ":9012", "localhost:70000", ","):
        with pytest.raises(_ondemand.CaptureError, match="HOST:PORT"):
            _ondemand.parse_addresses(bad)


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"duration_ms": 0}, "--duration-ms"),
        ({"delay_ms": -1}, "--delay-ms"),
        ({"host_tracer_level": 4}, "--host-tracer-level"),
        ({"python_tracer_level": 2}, "--python-tracer-level"),
    ],
)
def test_impossible_options_are_refused(options: dict[str, Any], flag: str) -> None:
    with pytest.raises(_ondemand.CaptureError, match=flag):
        _ondemand.Options(**options)


def test_nothing_answering_leaves_no_run(tmp_path: Path) -> None:
    dead = free_port()
    with pytest.raises(_ondemand.CaptureError, match=f"localhost:{dead} does not answer"):
        _ondemand.capture([f"localhost:{dead}"], tmp_path, _ondemand.Options(duration_ms=200))
    assert _store.runs(tmp_path) == []
    assert not (tmp_path / _store.STAGING_DIR).exists()


@pytest.mark.slow
def test_two_workers_and_a_dead_address_make_one_run_without_torch_xla(
    kernel: Kernel, workers: dict[str, int], tmp_path: Path
) -> None:
    a, b = workers["worker_a"], workers["worker_b"]
    dead = free_port()
    shown = kernel.ok(
        f"%xprof capture localhost:{a},localhost:{b},localhost:{dead} --duration-ms 1500 "
        f"--logdir {tmp_path} --name pair --no-display",
    )
    dead_lines = [line for line in shown.splitlines() if f"localhost:{dead}" in line]
    assert len(dead_lines) == 1 and "does not answer" in dead_lines[0], shown
    assert kernel.value("'torch_xla' in sys.modules") is False
    (run,) = _store.runs(tmp_path)
    assert run.name == "pair"
    assert set(run.hosts) == {f"localhost_{a}", f"localhost_{b}"}
    both = {"worker_a", "worker_b"}
    assert labels_of(run.path / f"localhost_{a}.xplane.pb", both) == {"worker_a"}
    assert labels_of(run.path / f"localhost_{b}.xplane.pb", both) == {"worker_b"}
    meta = _metadata.read(run.path)
    assert meta is not None and meta.status == "partial"
    assert meta.options["addresses"] == [f"localhost:{a}", f"localhost:{b}", f"localhost:{dead}"]
    assert meta.options["duration_ms"] == 1500
    assert meta.options["hosts"] == {
        f"localhost_{a}": f"localhost:{a}",
        f"localhost_{b}": f"localhost:{b}",
    }
    assert "xprof summary — run pair" in shown
    allowed = _guard.capture_allowed(_launch.viewer_dir())
    assert {f"localhost:{a}", f"localhost:{b}"} <= allowed
    assert f"localhost:{dead}" not in allowed
    assert f"Hosts — 2 captured; slowest: localhost_{b}" in shown, shown

    summary = _analysis.summarize(run.path, budget_s=None)
    rows = {row.host: row for row in summary.hosts}
    fast, slow = rows[f"localhost_{a}"], rows[f"localhost_{b}"]
    assert (fast.step_name, slow.step_name) == ("worker_a", "worker_b")
    assert fast.step_s is not None and slow.step_s is not None
    assert slow.step_s > fast.step_s  # the figures: `python -m bench host-steps`
    assert fast.steps > slow.steps > 10
    assert fast.busy_s and slow.busy_s and fast.busy_s > slow.busy_s
    assert summary.slowest_host == f"localhost_{b}"
    # The dead address stays in the run's summary (``%xprof summary pair`` says it later).
    assert [n.level for n in notes_of(summary) if f"localhost:{dead}" in n.text] == ["warning"]
    assert "localhost_" in _analysis.render_html(summary).split("Hosts — 2 captured")[1]


@pytest.mark.slow
def test_mistakes_are_one_usage_line(kernel: Kernel, tmp_path: Path) -> None:
    assert "--duration-ms" in refused(kernel, "%xprof capture localhost:1 --duration-ms 0")
    assert "invalid int value" in refused(kernel, "%xprof capture --delay-ms soon")
    assert "HOST:PORT" in refused(kernel, "%xprof capture nowhere")
    dead = free_port()
    message = refused(kernel, f"%xprof capture localhost:{dead} --logdir {tmp_path}")
    assert f"localhost:{dead} does not answer" in message
    assert _store.runs(tmp_path) == []


TRAINING_THREAD = """
import threading
import torch, torch_xla
import torch_xla.debug.profiler as xp

stop, ready = threading.Event(), threading.Event()

def train():
    device = torch_xla.device()
    weight = torch.randn(32, 32, device=device)
    while not stop.is_set():
        with xp.Trace("thread_step"):
            weight = (weight @ weight).tanh()
        torch_xla.sync()
        ready.set()

trainer = threading.Thread(target=train, daemon=True)
trainer.start()
assert ready.wait(120)
"""


def capture_own_thread(
    tmp_path: Path, thread: str, flags: str = "", probe: str = ""
) -> tuple[str, list[dict[str, Any]], int, str]:
    """In a kernel of its own, start ``thread`` (a training loop in a thread), take
    ``%xprof capture`` with no address, then run ``probe``: what the capture showed, its
    outputs, the port captured, and what the probe printed."""
    k = Kernel(with_server())
    try:
        k.ok("%load_ext xprof_magic")
        k.ok(thread)
        port = free_port()
        content, outputs = k.run(
            f"%xprof capture --duration-ms 1500 --port {port} --logdir {tmp_path} {flags}",
            timeout=240,
        )
        shown = text(outputs)
        assert content["status"] == "ok", shown
        probed = k.ok(probe) if probe else ""
        k.ok("stop.set(); trainer.join()")
    finally:
        k.close()
    return shown, outputs, port, probed


@pytest.mark.slow
def test_no_address_captures_a_training_thread_of_this_kernel(tmp_path: Path) -> None:
    shown, outputs, port, _ = capture_own_thread(tmp_path, TRAINING_THREAD)
    assert f"localhost_{port} (localhost:{port})" in shown, shown
    (run,) = _store.runs(tmp_path)
    assert run.hosts == (f"localhost_{port}",)
    assert labels_of(run.path / f"localhost_{port}.xplane.pb", {"thread_step"}) == {"thread_step"}
    pages = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(f"xprof summary — run {run.name}" in p or run.name in p for p in pages), shown


@pytest.mark.parametrize(
    ("query", "allowed"),
    [
        ([("service_addr", "localhost:9012")], True),
        ([("service_addr", "127.0.0.1:9012,[::1]:9013")], True),
        ([("service_addr", "grpc://localhost:9012")], True),
        ([("service_addr", "10.0.0.2:9012")], False),
        ([("service_addr", "10.0.0.9:9012")], True),
        ([("service_addr", "localhost:9012"), ("worker_list", "evil.example:1")], False),
        ([("service_addr", "localhost:9012"), ("is_tpu_name", "true")], False),
        ([], False),
    ],
)
def test_capture_targets(query: list[tuple[str, str]], allowed: bool) -> None:
    known = frozenset({"10.0.0.9:9012"})
    reason = _guard.refusal("/data/plugin/profile/capture_profile", query, "/tmp", known)
    assert (reason is None) == allowed, reason


@pytest.mark.slow
def test_the_viewers_capture_button_reaches_loopback_and_captured_addresses_only(
    workers: dict[str, int], tmp_path: Path
) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    outcome = ensure_viewer(logdir, timeout=60)
    assert isinstance(outcome, Launched), outcome
    viewer = outcome.viewer
    try:

        def capture(address: str) -> tuple[int, bytes]:
            path = viewer.data_path("capture_profile", service_addr=address, duration="500")
            return _client.http_get(viewer.port, path, timeout=60)

        status, body = capture("192.0.2.7:9012")
        assert status == 403, body
        assert b"192.0.2.7:9012 is refused" in body and b"%xprof capture" in body
        status, body = capture(f"localhost:{workers['worker_a']}")
        assert status == 200, body
        (run,) = _store.runs(logdir)
        assert run.hosts == (f"localhost_{workers['worker_a']}",)
        # Not loopback by address, yet on this machine: refused until the kernel captured it.
        elsewhere = f"0.0.0.0:{free_port()}"
        assert capture(elsewhere)[0] == 403
        _guard.allow_capture(_launch.viewer_dir(), [elsewhere])
        status, body = capture(elsewhere)
        assert status == 500 and b"refused" not in body, body  # XProf found no server there
    finally:
        stop_viewer(viewer)


JAX_TRAINING_THREAD = """
import threading
import jax, jax.numpy as jnp

stop, ready = threading.Event(), threading.Event()

def train():
    weight = jnp.ones((32, 32))
    step = jax.jit(lambda w: jnp.tanh(w @ w))
    while not stop.is_set():
        with jax.profiler.TraceAnnotation("jax_thread_step"):
            weight = step(weight).block_until_ready()
        ready.set()

trainer = threading.Thread(target=train, daemon=True)
trainer.start()
assert ready.wait(120)
"""


@pytest.mark.slow
def test_no_address_in_a_jax_kernel_uses_jaxs_server_without_torch_xla(tmp_path: Path) -> None:
    _, _, port, imported = capture_own_thread(
        tmp_path,
        JAX_TRAINING_THREAD,
        flags="--no-display",
        probe="import sys; print('torch_xla' in sys.modules)",
    )
    assert imported.strip() == "False", "capturing a JAX kernel imported torch_xla"
    (run,) = _store.runs(tmp_path)
    assert run.hosts == (f"localhost_{port}",)
    xplane = run.path / f"localhost_{port}.xplane.pb"
    assert labels_of(xplane, {"jax_thread_step"}) == {"jax_thread_step"}


def test_kernels_adding_capture_targets_at_once_lose_none(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from xprof_magic._viewer.app import guard\n"
        "for i in range(25):\n"
        "    guard.allow_capture(sys.argv[1], [f'10.0.{sys.argv[2]}.{i}:9012'])\n"
    )
    kernels = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(k)]) for k in range(4)
    ]
    assert [k.wait(timeout=120) for k in kernels] == [0, 0, 0, 0]
    allowed = _guard.capture_allowed(tmp_path)
    assert allowed == {f"10.0.{k}.{i}:9012" for k in range(4) for i in range(25)}
