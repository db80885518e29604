"""Interrupts: a KeyboardInterrupt in the cell, while the capture stops, and a real kernel
interrupted while its cell runs or awaits. The cell's outcome is the interrupt, the capture
is kept whole, and the shell carries on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._kernel import Kernel, text
from tests.conftest import only_run, run
from xprof_magic._runs import store as _store


def test_keyboard_interrupt_is_the_cells_outcome(ip: Any, logdir: Path) -> None:
    result = run(ip, logdir, "raise KeyboardInterrupt")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert (only_run(logdir).metadata or {})["error"]["type"] == "KeyboardInterrupt"


def test_an_interrupt_while_stopping_still_stops_the_trace(
    ip: Any, logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xprof_magic._backends.registry import get_backend

    backend = get_backend()

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(backend, "wait_for_device", interrupted)
    # The capture waits only for a runtime the cell started (an earlier test's, run alone).
    monkeypatch.setattr(backend, "runtime_started", lambda: True)
    # The backend patched is the one the capture uses, whatever an earlier test left in the
    # shell's namespace (JAX's arrays would make ``--backend auto`` choose JAX).
    result = run(ip, logdir, "x = 5", "--name stopped --backend torch_xla")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    monkeypatch.undo()
    assert run(ip, logdir, "y = 6", "--name after").success
    meta = {r.name: r.metadata or {} for r in _store.runs(logdir)}
    assert meta["stopped"]["error"]["type"] == "KeyboardInterrupt"
    assert meta["after"]["status"] == "ok"
    assert not (logdir / _store.STAGING_DIR).exists()


@pytest.mark.kernel
def test_an_interrupt_stops_the_cell_and_keeps_the_capture(kernel: Kernel, tmp_path: Path) -> None:
    content, _ = kernel.run(
        f"%%xprof --logdir {tmp_path}\nimport time\nfor _ in range(600):\n    time.sleep(0.1)",
        interrupt_after=2.0,
    )
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt"
    (stored,) = _store.runs(tmp_path)
    assert (stored.metadata or {})["error"]["type"] == "KeyboardInterrupt"
    content, _ = kernel.run("1 + 1")
    assert content["status"] == "ok"


@pytest.mark.kernel
def test_interrupting_an_awaiting_cell_points_at_the_await(kernel: Kernel, tmp_path: Path) -> None:
    content, outputs = kernel.run(
        f"%%xprof --logdir {tmp_path} --no-display\nimport asyncio\nawait asyncio.sleep(30)",
        interrupt_after=2.0,
    )
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt"
    shown = text(outputs)
    assert "----> 3 await asyncio.sleep(30)" in shown
    assert "threading.py" not in shown
    (stored,) = _store.runs(tmp_path)
    assert (stored.metadata or {})["error"]["type"] == "KeyboardInterrupt"
