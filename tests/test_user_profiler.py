"""PyTorch/XLA code as its authors write it, in real kernels: multi-process launches, the
user's own profiler calls and server, ``--sync``."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._kernel import Kernel, free_port, with_server
from tests.conftest import event_names
from xprof_magic._analysis.timeline.read import read_trace
from xprof_magic._backends.torch_xla_vocabulary import VOCABULARY as TORCH_XLA_WORDS
from xprof_magic._runs import store as _store

pytestmark = pytest.mark.kernel

WORKER = """
import torch, torch_xla
import torch_xla.debug.profiler as xp
import torch_xla.distributed.xla_multiprocessing as xmp

def worker(index):
    with xp.Trace(f"worker_block_{index}"):
        t = torch.ones(4, device=torch_xla.device()) * (index + 2)
    torch_xla.sync()
    assert float(t.sum()) == 4 * (index + 2)
"""


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel(with_server())
    content, _ = k.run("%load_ext xprof_magic\nimport xprof_magic, torch, torch_xla")
    assert content["status"] == "ok"
    yield k
    k.close()


def test_a_profiled_cell_leaves_the_runtime_to_spawn_later_and_inside(tmp_path: Path) -> None:
    k = Kernel(with_server())
    try:
        k.ok("%load_ext xprof_magic\nimport xprof_magic, torch_xla")
        k.ok(
            f"%%xprof --logdir {tmp_path} --port {free_port()} --no-display\n"
            "total = sum(range(10))",
        )
        assert k.value("torch_xla._XLAC._xla_runtime_is_initialized()") is False
        k.ok(
            f"%%xprof --logdir {tmp_path} --steps --sync --no-display\n"
            "for i in range(3):\n"
            "    total += i",
        )
        assert k.value("torch_xla._XLAC._xla_runtime_is_initialized()") is False
        assert k.value("xprof_magic.last().metadata.messages") == ()
        k.ok(WORKER)
        k.ok("xmp.spawn(worker, nprocs=None, start_method='fork')")
        # Two forked worker processes, one launch after the other, each traced as a host.
        shown = k.ok(
            f"%%xprof --logdir {tmp_path} --no-display\n"
            "torch_xla.launch(worker, start_method='fork')\n"
            "xmp.spawn(worker, start_method='fork')",
        )
        assert "the workers' timelines are in this run as hosts rank0, rank0-2" in shown, shown
        assert k.value("xprof_magic.last().status") == "ok"
        run_dir = Path(k.value("str(xprof_magic.last().run_dir)"))
        for host in ("rank0", "rank0-2"):
            facts = read_trace(run_dir / f"{host}.xplane.pb", runtime=TORCH_XLA_WORDS.timeline)
            assert "worker_block_0" in {b.name for b in facts.blocks}, host
            assert facts.compile_count >= 1
        assert "worker_block_0" not in {
            b.name for b in read_trace(host_file(run_dir), runtime=TORCH_XLA_WORDS.timeline).blocks
        }
        assert not list((run_dir.parent.parent.parent).rglob("workers"))
        saved = k.value("xprof_magic.last().metadata.to_json()['messages']")
        assert any("rank0, rank0-2" in m for m in saved), saved
    finally:
        k.close()
    assert len(_store.runs(tmp_path)) == 3


def test_a_busy_port_tells_the_users_own_server_from_a_foreign_one(
    kernel: Kernel, tmp_path: Path
) -> None:
    """The user's own server on the port: the magic starts none, and says where to capture;
    another process's: the magic's starts on the next free port, named."""
    own = free_port()
    kernel.ok(f"import torch_xla.debug.profiler as xp\nmy_server = xp.start_server({own})")
    shown = kernel.ok(f"%%xprof --logdir {tmp_path} --port {own} --no-display\nx = 2")
    assert f"this process already serves on-demand capture on port {own}" in shown, shown
    assert "is busy" not in shown
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as busy:
        busy.bind(("::", 0))
        busy.listen()
        foreign = busy.getsockname()[1]
        shown = kernel.ok(f"%%xprof --logdir {tmp_path} --port {foreign} --no-display\nx = 1")
    assert f"port {foreign} is busy" in shown and "listens on port" in shown, shown
    assert "--port" not in shown and "--no-server" not in shown


def test_sync_is_a_block_of_the_cell(kernel: Kernel, tmp_path: Path) -> None:
    kernel.ok(
        f"%%xprof --logdir {tmp_path} --sync --no-display\n"
        "x = torch.randn(96, 96, device=torch_xla.device())\n"
        "y = (x @ x + 3).tanh().sum()",
    )
    labels = kernel.value("[(s.path, s.total_s) for s in xprof_magic.last().labels]")
    synced = [total for path, total in labels if path == ("torch_xla.sync() (--sync)",)]
    assert synced, labels
    assert kernel.value("xprof_magic.last().wall_s") >= synced[0]
    saved = kernel.value("[l['path'] for l in xprof_magic.last().metadata.to_json()['labels']]")
    assert ["torch_xla.sync() (--sync)"] in saved
    run_dir = Path(kernel.value("str(xprof_magic.last().run_dir)"))
    assert "torch_xla.sync() (--sync)" in event_names(run_dir)


def test_the_users_own_start_trace_wins_even_inside_a_function(
    kernel: Kernel, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    shown = kernel.ok(
        f"%%xprof --logdir {tmp_path / 'logs'} --no-display\n"
        "import torch_xla.debug.profiler as xp\n"
        "def traced(folder):\n"
        "    xp.start_trace(folder)\n"
        "    value = sum(range(100))\n"
        "    xp.stop_trace()\n"
        "    return value\n"
        f"traced({str(mine)!r})",
    )
    assert "4950" in shown, shown
    assert list(mine.glob("plugins/profile/*/*.xplane.pb")), shown
    assert kernel.value("xprof_magic.last().status") == "partial"
    assert "this run is partial" in shown
    assert len(_store.runs(tmp_path / "logs")) == 1


def test_profiler_functions_imported_by_name_in_an_earlier_cell_are_guarded(
    kernel: Kernel, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    kernel.ok("from torch_xla.debug.profiler import start_trace, stop_trace")
    shown = kernel.ok(
        f"%%xprof --logdir {tmp_path / 'logs'} --no-display\n"
        f"start_trace({str(mine)!r})\n"
        "value = sum(range(100))\n"
        "stop_trace()\n"
        "value",
    )
    assert "4950" in shown and "already" not in shown, shown
    assert list(mine.glob("plugins/profile/*/*.xplane.pb")), shown
    assert kernel.value("xprof_magic.last().status") == "partial"
    # the user's names are given back: the originals, not the capture's guards
    assert kernel.value(
        "start_trace is __import__('torch_xla.debug.profiler', fromlist=['_']).start_trace"
    )


def test_the_users_trace_detached_captures(kernel: Kernel, tmp_path: Path) -> None:
    port = free_port()
    mine = tmp_path / "mine"
    kernel.ok(f"import torch_xla.debug.profiler as xp\ndetached_server = xp.start_server({port})")
    kernel.ok(
        f"%%xprof --logdir {tmp_path / 'logs'} --no-display\n"
        "import time\n"
        f"xp.trace_detached('localhost:{port}', {str(mine)!r}, duration_ms=1500)\n"
        "x = torch.randn(32, 32, device=torch_xla.device())\n"
        "for _ in range(8):\n"
        "    x = (x @ x).tanh()\n"
        "    torch_xla.sync()\n"
        "    time.sleep(0.1)\n"
        "deadline = time.monotonic() + 30\n"
        f"while not list(__import__('pathlib').Path({str(mine)!r}).rglob('*.xplane.pb')):\n"
        "    assert time.monotonic() < deadline, 'no capture'\n"
        "    time.sleep(0.2)",
    )
    assert list(mine.rglob("*.xplane.pb"))
    assert kernel.value("xprof_magic.last().status") == "partial"


def host_file(run_dir: Path) -> Path:
    host = socket.gethostname()
    return run_dir / f"{host}.xplane.pb"


def test_spawned_workers_are_said_to_be_missing(tmp_path: Path) -> None:
    """``start_method='spawn'`` workers start afresh: the run says they are not in it."""
    (tmp_path / "spawned_worker.py").write_text(WORKER)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    k = Kernel(with_server(), extra={"PYTHONPATH": path})
    try:
        k.ok("%load_ext xprof_magic\nimport xprof_magic, torch_xla, spawned_worker")
        shown = k.ok(
            # A port of its own: an earlier test's kernel may still hold the default one.
            f"%%xprof --logdir {tmp_path} --port {free_port()} --no-display\n"
            "torch_xla.launch(spawned_worker.worker)",
        )
        said = " ".join(shown.split())  # the note is wrapped to the output's width
        assert "start method 'spawn'); their own timelines are not in this run" in said, shown
        assert "xp.start_server(9500 + rank, only_on_master=False)" in said
        saved = k.value("xprof_magic.last().metadata.to_json()['messages']")
        assert any("timelines are not in this run" in m for m in saved), saved
        assert k.value("xprof_magic.last().status") == "ok"
    finally:
        k.close()


def test_tracing_another_process_leaves_the_capture_whole(kernel: Kernel, tmp_path: Path) -> None:
    """``xp.trace`` aimed at another process's server (a worker's) does not clash with the
    cell's trace, so the run stays whole."""
    import subprocess
    import sys

    port = free_port()
    serve = (
        "import time, torch_xla.debug.profiler as xp\n"
        "from torch_xla import _XLAC\n"
        f"server = xp.start_server({port}, only_on_master=False)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    with _XLAC.profiler.TraceMe('busy'):\n"
        "        time.sleep(0.005)"
    )
    other = subprocess.Popen([sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        theirs = tmp_path / "theirs"
        shown = kernel.ok(
            f"%%xprof --logdir {tmp_path / 'logs'} --no-display\n"
            "import torch_xla.debug.profiler as xp\n"
            f"xp.trace('localhost:{port}', {str(theirs)!r}, duration_ms=300, timeout_s=20)",
        )
        assert list(theirs.rglob("*.xplane.pb")), shown
        assert kernel.value("xprof_magic.last().status") == "ok"
        assert "partial" not in shown
    finally:
        other.kill()
        other.wait()
