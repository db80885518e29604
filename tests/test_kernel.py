"""%%xprof in real IPython kernels (ipykernel through jupyter_client and nbclient)."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import xprof_magic
from tests._agreement import figures_agree
from tests._kernel import Kernel, free_port, plain, text
from tests._said import worded
from xprof_magic._runs import store as _store

pytestmark = pytest.mark.kernel
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def cell_frames(shown: str) -> list[str]:
    """The line each frame of the cell's own code points at, outermost first.

    IPython 8+ heads a frame ``Cell In[n], line L``; IPython 7.34 (Colab's) heads it with
    the cell's file and function and marks the line with an arrow below.
    """
    found: list[str] = []
    lines = shown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Cell In["):
            found.append(line.split(", ")[1])
        elif re.match(r"^/\S+ in \S+", line):
            arrow = next((x for x in lines[i + 1 :] if x.startswith("---->")), "")
            found.append(f"line {arrow.split()[1]}" if arrow else "?")
    return found


def test_value_is_out_and_names_stay(kernel: Kernel, tmp_path: Path) -> None:
    content, outputs = kernel.run(
        f"%%xprof --logdir {tmp_path}\n"
        "t = torch.arange(4.0, device=torch_xla.device())\n"
        "%time s = t.sum().item()\n"
        "!echo shell-says-hi\n"
        "s * 2"
    )
    assert content["status"] == "ok"
    results = [o for o in outputs if o["type"] == "execute_result"]
    assert [r["data"]["text/plain"] for r in results] == ["12.0"]
    assert "shell-says-hi" in text(outputs)
    content, outputs = kernel.run("s, type(t).__name__")
    assert outputs[-1]["data"]["text/plain"] == "(6.0, 'Tensor')"


def test_a_cell_that_outlives_its_timeout_is_reported_with_the_kernels_stacks() -> None:
    """The test kernel's report of a hung cell names where the kernel is: its threads' stacks,
    asked of ``faulthandler`` (a kernel test once timed out in CI with no more than the cell's
    code). The kernel's namespace holds no name of the helper's."""
    hung = Kernel()
    try:
        assert hung.value("[n for n in ('faulthandler', 'signal') if n in dir()]") == []
        with pytest.raises(TimeoutError) as timed_out:
            hung.run("import threading\ndef stuck():\n    threading.Event().wait()\nstuck()", 3)
        said = str(timed_out.value)
        assert "--- the kernel's threads:" in said and "most recent call first" in said, said
        assert re.search(r'line 3 in stuck\n\s+File "[^"]+", line 4 in ', said), said
    finally:
        hung.close()


def test_top_level_await_runs_and_keeps_its_value(kernel: Kernel, tmp_path: Path) -> None:
    content, outputs = kernel.run(
        f"%%xprof --logdir {tmp_path}\n"
        "import asyncio, threading\n"
        "await asyncio.sleep(0.01)\n"
        "where = threading.current_thread().name\n"
        "async def twice(x):\n"
        "    await asyncio.sleep(0)\n"
        "    return 2 * x\n"
        "await twice(21)"
    )
    assert content["status"] == "ok", text(outputs)
    assert outputs[-1]["data"]["text/plain"] == "42"
    _, outputs = kernel.run("where")
    assert outputs[-1]["data"]["text/plain"] == "'xprof-async-cell'"
    (run,) = _store.runs(tmp_path)
    assert (run.metadata or {})["status"] == "ok"


def test_an_error_is_shown_once_at_the_users_line(kernel: Kernel, tmp_path: Path) -> None:
    content, outputs = kernel.run(f"%%xprof --logdir {tmp_path}\nx = 1\ny = x / 0\nz = 3")
    assert content["status"] == "error" and content["ename"] == "ZeroDivisionError"
    errors = [o for o in outputs if o["type"] == "error"]
    assert len(errors) == 1
    shown = plain("\n".join(errors[0]["traceback"]))
    print(shown)
    assert "----> 3 y = x / 0" in shown
    # The traceback starts at the user's line: no frame for the %%xprof line or the magic.
    assert "run_cell_magic" not in shown and "----> 1 %%xprof" not in shown
    frames = cell_frames(shown)
    assert frames == ["line 3"], shown
    content, outputs = kernel.run(
        f"%%xprof --logdir {tmp_path / 'nested'} --no-display\ndef f():\n    return 1 / 0\nf()"
    )
    shown = plain("\n".join(next(o for o in outputs if o["type"] == "error")["traceback"]))
    assert cell_frames(shown) == ["line 4", "line 3"], shown
    assert "run_cell_magic" not in shown
    assert "xprof: run" in text(outputs)  # the capture is kept and summarised
    (run,) = _store.runs(tmp_path)
    assert (run.metadata or {})["status"] == "error"


def test_run_all_stops_at_a_failing_profiled_cell(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext xprof_magic"),
        nbformat.v4.new_code_cell(
            f"%%xprof --logdir {tmp_path} --no-server\nraise ValueError('bad')"
        ),
        nbformat.v4.new_code_cell(f"open({str(tmp_path / 'reached')!r}, 'w').close()"),
    ]
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError, match="ValueError"):
        client.execute()
    assert not (tmp_path / "reached").exists()
    assert len(_store.runs(tmp_path)) == 1


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports that nothing listens on now."""
    from xprof_magic._backends.ports import port_is_free

    for _ in range(50):
        port = free_port()
        if port + count < 65536 and all(port_is_free(port + i) for i in range(count)):
            return port
    raise AssertionError(f"no {count} consecutive free ports")


def test_profiler_server_starts_once_and_a_busy_port_is_said_once(tmp_path: Path) -> None:
    """A port another process holds: the server starts on the next free one, said once; a
    later ``--port`` is told once that the process's server runs already."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "XPROF_MAGIC_NO_SERVER"}
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as busy:
        busy_port = free_ports(2)
        busy.bind(("::", busy_port))
        busy.listen()
        k = Kernel(env)
        try:
            k.run("%load_ext xprof_magic")
            cell = f"%%xprof --logdir {tmp_path} --port {busy_port}\nran = 1"
            first = text(k.run(cell)[1])
            second = text(k.run(cell)[1])
            assert f"port {busy_port} is busy" in first, first
            assert f"listens on port {busy_port + 1}" in first and "--no-server" not in first
            assert "is busy" not in second and "listens on" not in second, second
            assert k.run("ran")[1][-1]["data"]["text/plain"] == "1"
            with socket.create_connection(("127.0.0.1", busy_port + 1), timeout=5):
                pass  # torch_xla's profiler server answers on the port it took
            content, outputs = k.run(f"%%xprof --logdir {tmp_path} --port {free_port()}\nx = 1")
            assert content["status"] == "ok", text(outputs)
            assert f"already runs on port {busy_port + 1}" in text(outputs)
        finally:
            k.close()
    assert len(_store.runs(tmp_path)) == 3


SPINNING = """
import threading, torch, torch_xla
stop = threading.Event()

def spin():
    w = torch.randn(16, 16, device=torch_xla.device())
    while not stop.is_set():
        w = (w @ w).tanh()
        torch_xla.sync()

spinner = threading.Thread(target=spin, daemon=True)
spinner.start()
"""
"""Work in a thread of the kernel, for an on-demand capture of it to hold."""


def test_a_second_kernel_starts_its_server_on_the_next_free_port_and_says_which(
    tmp_path: Path,
) -> None:
    """Two notebooks open at once: the first kernel's profiler server holds the port, so the
    second kernel's first ``%%xprof`` starts its own on the next one and says so, once, with
    no flag to pass; ``%xprof capture`` of its own server reaches it there."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "XPROF_MAGIC_NO_SERVER"}
    port = free_ports(2)
    first, second = Kernel(env), Kernel(env)
    try:
        first.ok("%load_ext xprof_magic")
        said = first.ok(f"%%xprof --logdir {tmp_path} --port {port} --no-display\nx = 1")
        assert "is busy" not in said and "listens on" not in said, said
        second.ok("%load_ext xprof_magic")
        said = second.ok(f"%%xprof --logdir {tmp_path} --port {port} --no-display\nx = 1")
        assert said.count(f"port {port} is busy") == 1, said
        assert f"listens on port {port + 1}" in said, said
        assert "--port" not in said and "--no-server" not in said, said
        again = second.ok(f"%%xprof --logdir {tmp_path} --port {port} --no-display\nx = 2")
        assert "is busy" not in again and "listens on" not in again, again
        for each in (port, port + 1):
            with socket.create_connection(("127.0.0.1", each), timeout=5):
                pass
        second.ok(SPINNING)
        captured = second.ok(
            f"%xprof capture --logdir {tmp_path} --port {port} --duration-ms 1000 "
            "--name second-own --no-display"
        )
        second.ok("stop.set()\nspinner.join()")
        assert f"localhost:{port + 1}" in captured, captured
    finally:
        first.close()
        second.close()
    assert _store.hosts(tmp_path / "plugins" / "profile" / "second-own") == (
        f"localhost_{port + 1}",
    )


def test_quickstart_notebook_executes(tmp_path: Path) -> None:
    import os

    nb = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    os.environ["XPROF_MAGIC_LOGDIR"] = str(tmp_path)
    try:
        NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        del os.environ["XPROF_MAGIC_LOGDIR"]
    names = sorted(r.name for r in _store.runs(tmp_path))
    assert names == ["quickstart-eval", "quickstart-train"]
    train = _store.read_metadata(tmp_path / "plugins" / "profile" / "quickstart-train") or {}
    assert len(train["steps"]) == 16
    paths = {tuple(label["path"]) for label in train["labels"]}
    assert ("for inputs, targets in batches", "forward") in paths
    json.dumps(nb)  # outputs are plain JSON
    # The verdict describes the steady steps: the first compiles and runs its new graph
    # first (that execution is its own, launched by its sync), the others are the same
    # short steps, mostly tracing on the host.
    s = xprof_magic.summarize(tmp_path / "plugins" / "profile" / "quickstart-train")
    d = worded(s)
    assert s.steps is not None and d.warm_up == 1 and d.scope == "steps"
    steady = [s.steps.durations_s[i] for i in d.steady()]
    assert len(steady) >= 4 and max(steady) < s.steps.durations_s[0] / 20
    assert d.verdict == "host", d.headline
    assert d.headline.startswith("Host-bound: ") and "after the first (compiling)" in d.headline
    # A notebook's cell has no final newline, and then IPython's frame that runs the magic has
    # the cell's file too: the sampler looks at the cell's own lines, never at its %%xprof line,
    # and the step's tracing is the framework's, not the user's own Python.
    looked = {line for _, line, _, _ in train["lines"]} - {0}  # 0: outside the cell's code
    assert looked and looked <= set(range(2, 14)), looked
    assert d.cause != "own code" and "your own Python" not in d.headline, d.headline
    assert d.line is not None and 2 < d.line < 14 and "<empty>" not in d.headline, d.headline
    shown = "".join(
        output.get("text", "") or output.get("data", {}).get("text/plain", "")
        for cell in nb.cells
        for output in cell.get("outputs", [])
    )
    figures_agree(s, shown)


def test_the_demo_stores_its_runs_where_the_notebook_opened_in_jupyterlab_does(
    tmp_path: Path,
) -> None:
    """``make demo`` runs a notebook as JupyterLab does, in the notebook's folder, and stores
    its runs in the log directory the notebook uses there (``xprof_logs`` beside it), so the
    notebook opened after the demo lists the demo's runs."""
    import os
    import subprocess
    import sys

    folder, elsewhere = tmp_path / "notebooks", tmp_path / "repo"
    folder.mkdir()
    elsewhere.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext xprof_magic"),
        nbformat.v4.new_code_cell("%%xprof --name demo-cell --backend jax --no-display\nx = 1"),
    ]
    nbformat.write(nb, folder / "tiny.ipynb")
    env = {k: v for k, v in os.environ.items() if k != "XPROF_MAGIC_LOGDIR"}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOKS / "demo.py"), str(folder / "tiny.ipynb")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=elsewhere,
        env={**env, "XPROF_MAGIC_NO_SERVER": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert [r.name for r in _store.runs(folder / "xprof_logs")] == ["demo-cell"], done.stdout
    assert f"1 run(s) in {folder / 'xprof_logs'}" in done.stdout, done.stdout
    assert not (elsewhere / "xprof_logs").exists()


def test_the_viewer_shows_under_the_cell_restarts_when_killed_and_stops(
    kernel: Kernel, tmp_path: Path
) -> None:
    import os
    import signal

    from xprof_magic import _viewer

    cell = f"%%xprof --logdir {tmp_path} --name first\nx = 1"
    content, outputs = kernel.run(cell)
    assert content["status"] == "ok", text(outputs)
    # Two displays: the summary (its panel, static HTML, text), then the viewer widget.
    shown = [o for o in outputs if o["type"] == "display_data"]
    assert len(shown) == 2
    bundle, viewer_bundle = shown[0]["data"], shown[1]["data"]
    widget = "application/vnd.jupyter.widget-view+json"
    assert widget in bundle and widget in viewer_bundle
    assert bundle[widget]["model_id"] != viewer_bundle[widget]["model_id"]
    assert bundle["text/plain"].startswith("xprof summary — run first · ok")
    assert viewer_bundle["text/plain"].startswith("XProf viewer on 127.0.0.1:")
    assert 'class="xprof-magic-summary"' in bundle["text/html"]
    assert "Started the XProf viewer" in text(outputs)
    viewer = _viewer.find_viewer(tmp_path)
    assert viewer is not None
    assert _viewer.fetch_json(viewer, "runs") == ["first"]
    assert viewer.secret not in json.dumps(outputs)  # saved outputs do not publish it

    _, outputs = kernel.run("%xprof viewer")
    assert f"pid {viewer.pid}" in text(outputs) and f"127.0.0.1:{viewer.port}" in text(outputs)

    os.kill(viewer.pid, signal.SIGKILL)
    content, outputs = kernel.run(cell.replace("first", "second"))
    assert content["status"] == "ok"
    assert "started a new one" in text(outputs)
    fresh = _viewer.find_viewer(tmp_path)
    assert fresh is not None and fresh.pid != viewer.pid

    _, outputs = kernel.run("%xprof view first")
    summary, again = [o for o in outputs if o["type"] == "display_data"]
    assert "run first" in summary["data"]["text/plain"]
    assert "first" in again["data"]["text/plain"]
    _, outputs = kernel.run("%xprof view missing")
    assert "no run 'missing'" in text(outputs)

    _, outputs = kernel.run("%xprof viewer stop")
    assert "stopped" in text(outputs)
    assert _viewer.find_viewer(tmp_path) is None


def test_summary_pending_then_replaced_and_summary_compare_commands(
    kernel: Kernel, tmp_path: Path
) -> None:
    kernel.run("import xprof_magic._notebook.show as shown\nshown.SUMMARY_BUDGET_S = 0.0")
    loop = (
        "x = torch.ones(8, device=torch_xla.device())\n"
        "for i in range(20):\n"
        "    # xprof: work\n"
        "    x = x * 2\n"
        "    torch_xla.sync()"
    )
    msg_id = kernel.client.execute(f"%%xprof --logdir {tmp_path} --name big\n{loop}")
    pending: dict[str, Any] = {}
    updated: dict[str, Any] = {}
    viewers: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while not updated and time.monotonic() < deadline:
        try:
            msg = kernel.client.get_iopub_msg(timeout=1)
        except Exception:
            continue
        content = msg["content"]
        if (
            msg["msg_type"] == "display_data"
            and msg["parent_header"].get("msg_id") == msg_id
            and "summary pending" in content["data"].get("text/plain", "")
        ):
            pending = content
        elif (
            msg["msg_type"] == "display_data"
            and msg["parent_header"].get("msg_id") == msg_id
            and "XProf viewer on" in content["data"].get("text/plain", "")
        ):
            viewers.append(content)
        elif msg["msg_type"] == "update_display_data":
            updated = content
    kernel.client.get_shell_msg(timeout=60)
    # The viewer (with its iframe) is a display of its own, never updated: only the summary
    # panel is rendered again, so XProf loads once.
    widget = "application/vnd.jupyter.widget-view+json"
    assert len(viewers) == 1 and widget in viewers[0]["data"], viewers
    assert "transient" not in viewers[0] or not viewers[0]["transient"].get("display_id")
    assert updated["data"][widget]["model_id"] != viewers[0]["data"][widget]["model_id"]
    assert "summary pending" in pending["data"]["text/plain"]
    display_id = pending["transient"]["display_id"]
    assert updated["transient"]["display_id"] == display_id
    assert "summary pending" not in updated["data"]["text/plain"]
    assert "work" in updated["data"]["text/plain"]
    assert (tmp_path / "plugins" / "profile" / "big" / "xprof_magic_summary.json").exists()
    kernel.run("shown.SUMMARY_BUDGET_S = 0.15")

    kernel.run(f"%%xprof --logdir {tmp_path} --name small --no-display\ny = 1")
    _, outputs = kernel.run("%xprof summary small")
    assert outputs[-1]["data"]["text/plain"].startswith("xprof summary — run small")
    assert "text/html" in outputs[-1]["data"]
    _, outputs = kernel.run("%xprof compare big small")
    compared = outputs[-1]["data"]["text/plain"]
    assert "big" in compared and "small" in compared
    _, outputs = kernel.run("%xprof summary nothere")
    assert "no run 'nothere'" in text(outputs)
    kernel.run("%xprof viewer stop")


def test_a_restarted_kernel_reuses_the_live_viewer(tmp_path: Path) -> None:
    import os

    from xprof_magic._viewer.process import manager as _viewer

    k = Kernel({**os.environ, "XPROF_MAGIC_NO_SERVER": "1"})
    try:
        cell = f"%%xprof --logdir {tmp_path}\nx = 1"
        k.run("%load_ext xprof_magic")
        _, outputs = k.run(cell)
        assert "Started the XProf viewer" in text(outputs)
        before = _viewer.find_viewer(tmp_path)
        assert before is not None
        k.manager.restart_kernel(now=True)
        k.client.wait_for_ready(timeout=60)
        k.run("%load_ext xprof_magic")
        content, outputs = k.run(cell)
        assert content["status"] == "ok"
        assert "Started" not in text(outputs) and "new one" not in text(outputs)
        after = _viewer.find_viewer(tmp_path)
        assert after is not None and after.pid == before.pid
        assert len(_store.runs(tmp_path)) == 2
        _viewer.stop_viewer(after)
    finally:
        k.close()
