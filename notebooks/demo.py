"""``make demo``: run the quickstart notebook headless and print what it captured."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import xprof_magic
from xprof_magic._viewer import manager as _viewer


def main(notebook: str) -> int:
    root = Path.cwd()
    logdir = Path(os.environ.setdefault("XPROF_MAGIC_LOGDIR", str(root / "xprof_logs")))
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    nb = nbformat.read(notebook, as_version=4)
    started = time.time()
    print(f"Running {notebook} on PJRT_DEVICE={os.environ['PJRT_DEVICE']} ...", flush=True)
    # The notebook's viewer records itself in a private folder and is stopped at the end,
    # so the demo leaves no server behind.
    with tempfile.TemporaryDirectory(prefix="xprof-demo-") as viewers:
        os.environ["XPROF_MAGIC_VIEWER_DIR"] = viewers
        try:
            NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(root)}}).execute()
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
    found = xprof_magic.runs(logdir)
    print(f"{len(found)} run(s) in {logdir}:")
    for run in found:
        print(f"  {run.name:32} {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "notebooks/quickstart.ipynb"))
