"""``%%xprof`` where no widget renders, or none can: a terminal IPython, and a kernel, each
without ipywidgets (a finder on ``sys.meta_path`` refuses it, as a missing module is refused).

Capturing, storing, the text summary and the ``%xprof`` commands need no widget library: a
terminal gets the text and the viewer's URL; a notebook gets the static summary and one line
saying how to have the viewer under the cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._kernel import Kernel

BLOCK_IPYWIDGETS = '''
import sys


class NoWidgets:
    """ipywidgets is not installed, as far as imports can tell."""

    def find_spec(self, name, path=None, target=None):
        if name == "ipywidgets" or name.startswith("ipywidgets."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoWidgets())
'''

TERMINAL = (
    BLOCK_IPYWIDGETS
    + """
from IPython.terminal.interactiveshell import TerminalInteractiveShell

shell = TerminalInteractiveShell.instance()
for cell in CELLS:
    print(f"----- {cell.splitlines()[0]}", flush=True)
    shell.run_cell(cell, store_history=True)
print("ipywidgets imported:", "ipywidgets" in sys.modules)
"""
)


def cells(logdir: Path) -> list[str]:
    return [
        "%load_ext xprof_magic",
        f"%%xprof --logdir {logdir} --name quiet --no-display --backend jax\nx = 1",
        f"%%xprof --logdir {logdir} --name shown --backend jax\ny = 2",
        "%xprof runs",
        "%xprof summary quiet",
        "%xprof view quiet",
        "%xprof compare quiet shown",
        "%xprof viewer stop",
    ]


def said(out: str, cell: str) -> str:
    """What one cell printed, from the terminal's whole output."""
    return out.split(f"----- {cell}\n", 1)[1].split("\n----- ", 1)[0]


@pytest.mark.slow
def test_a_terminal_without_ipywidgets_gets_the_text_and_the_viewers_url(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    script = f"CELLS = {cells(logdir)!r}\n{TERMINAL}"
    env = {
        **os.environ,
        "XPROF_MAGIC_NO_SERVER": "1",
        "XPROF_MAGIC_VIEWER_DIR": str(tmp_path / "viewers"),
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "Error" not in out and "Traceback" not in out and "failed" not in out, out
    assert "ipywidgets imported: False" in out, out
    quiet = said(out, f"%%xprof --logdir {logdir} --name quiet --no-display --backend jax")
    assert quiet.startswith("xprof: run quiet (ok)") and "XProf:" not in quiet, quiet
    shown = said(out, f"%%xprof --logdir {logdir} --name shown --backend jax")
    assert "xprof summary — run shown" in shown, shown
    assert "XProf: http://127.0.0.1:" in shown and "trace_viewer_index.html" in shown, shown
    assert "shown  [ok]" in said(out, "%xprof runs") and "quiet  [ok]" in out
    assert "xprof summary — run quiet" in said(out, "%xprof summary quiet")
    view = said(out, "%xprof view quiet")
    assert "xprof summary — run quiet" in view and "XProf: http://127.0.0.1:" in view, view
    assert "xprof compare — A: quiet   B: shown" in said(out, "%xprof compare quiet shown")
    assert ") stopped" in said(out, "%xprof viewer stop")


@pytest.mark.kernel
def test_a_notebook_without_ipywidgets_shows_the_summary_and_says_how_to_have_the_viewer(
    tmp_path: Path,
) -> None:
    k = Kernel(extra={"XPROF_MAGIC_VIEWER_DIR": str(tmp_path / "viewers")})
    try:
        k.ok(BLOCK_IPYWIDGETS + "\nget_ipython().run_line_magic('load_ext', 'xprof_magic')")
        cell = f"%%xprof --logdir {tmp_path} --name nowidgets --backend jax\ny = 2"
        content, outputs = k.run(cell)
        assert content["status"] == "ok", outputs
        streams = "".join(o["text"] for o in outputs if o["type"] == "stream")
        assert "showing it failed" not in streams and "Error" not in streams, streams
        assert "not shown under the cell without ipywidgets (pip install ipywidgets)" in streams
        pages = [o["data"] for o in outputs if o["type"] == "display_data"]
        assert any("xprof summary — run nowidgets" in p.get("text/html", "") for p in pages)
        assert not any("application/vnd.jupyter.widget-view+json" in p for p in pages)
        again = k.ok(f"%%xprof --logdir {tmp_path} --name again --backend jax\ny = 3")
        assert "without ipywidgets" not in again, again  # said once
        assert "Error" not in k.ok("%xprof viewer stop")
        assert k.value("'ipywidgets' in __import__('sys').modules") is False
    finally:
        k.close()
