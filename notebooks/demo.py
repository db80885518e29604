"""``make demo``: run a quickstart notebook headless and print what it captured.

A Jupyter notebook (``.ipynb``) runs in a kernel through nbclient, in the notebook's own
folder as JupyterLab runs it; a marimo notebook (``.py``) runs as marimo runs it as a script
(``app.run()``), and each run its cells end with is printed. The runs go where the
notebooks write theirs when opened in JupyterLab: ``xprof_logs`` beside them
(``$XPROF_MAGIC_LOGDIR`` if set), so their runs dropdown lists the demo's.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import xprof_magic
from xprof_magic._viewer.process import manager as _viewer


def main(notebook: str) -> int:
    folder = Path(notebook).resolve().parent
    logdir = Path(os.environ.setdefault("XPROF_MAGIC_LOGDIR", str(folder / "xprof_logs")))
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    if notebook.endswith(".py"):
        run_marimo(notebook)
    else:
        run_jupyter(notebook, folder)
    found = xprof_magic.runs(logdir)
    print(f"{len(found)} run(s) in {logdir}:")
    for run in found:
        print(f"  {run.name:32} {run.path}")
    return 0


def run_marimo(notebook: str) -> None:
    """The marimo notebook as a script; each :class:`xprof_magic.Run` a cell shows, printed as
    the magic prints a cell's capture, with its summary's headline."""
    started = time.time()
    print(f"Running {notebook} (marimo) on PJRT_DEVICE={os.environ['PJRT_DEVICE']} ...", flush=True)
    spec = importlib.util.spec_from_file_location(Path(notebook).stem, notebook)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outputs, _ = module.app.run()
    print(f"Ran in {time.time() - started:.1f} s. Captures its cells show:\n")
    for output in outputs:
        if isinstance(output, xprof_magic.Run):
            print(output.text())
            if output.summary is not None:
                print(xprof_magic.summary_text(output.summary).split("\n\n", 1)[0])
            print()


def run_jupyter(notebook: str, folder: Path) -> None:
    """The notebook in a kernel whose working directory is ``folder``, the notebook's."""
    nb = nbformat.read(notebook, as_version=4)
    started = time.time()
    print(f"Running {notebook} on PJRT_DEVICE={os.environ['PJRT_DEVICE']} ...", flush=True)
    # The notebook's viewer records itself in a private folder and is stopped at the end,
    # so the demo leaves no server behind.
    with tempfile.TemporaryDirectory(prefix="xprof-demo-") as viewers:
        os.environ["XPROF_MAGIC_VIEWER_DIR"] = viewers
        try:
            NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(folder)}}).execute()
        finally:
            for viewer in _viewer.list_viewers():
                _viewer.stop_viewer(viewer)
    print(f"Ran in {time.time() - started:.1f} s. Captures made by %%xprof cells:\n")
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.source.startswith("%%xprof"):
            continue
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            if "xprof: run " in text:
                print(text.rstrip())
            elif text.startswith("xprof summary"):  # the analysis: its headline and notes
                print(text.split("\n\n", 1)[0])
        print()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "notebooks/quickstart.ipynb"))
