"""A notebook run headless, as nbclient, nbconvert and papermill run it: the saved notebook
ends with the full summary, even when the last cell is profiled and its summary is too slow
for the cell's time budget."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from xprof_magic._runs import store as _store
from xprof_magic._viewer.process import manager

pytestmark = pytest.mark.kernel

TRAIN = """\
%%xprof --steps --name train
model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(500):
    inputs = torch.randn(32, 64, device=device)
    targets = torch.randint(0, 10, (32,), device=device)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    torch_xla.sync()
print(f"loss {loss.item():.3f}")
"""


def _texts(cell: nbformat.NotebookNode) -> list[str]:
    found = []
    for out in cell.outputs:
        if out.output_type == "stream":
            found.append(out.text)
        for mime in ("text/plain", "text/html"):
            if mime in out.get("data", {}):
                found.append(out.data[mime])
    return found


def test_a_headless_run_saves_the_full_summary_of_its_last_cell(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext xprof_magic\n"
            "import torch, torch_xla\n"
            "import xprof_magic._notebook.show as shown\n"
            "shown.SUMMARY_BUDGET_S = 0.0  # every summary is too slow for the cell\n"
            "device = torch_xla.device()"
        ),
        nbformat.v4.new_code_cell(TRAIN),
    ]
    env = {"XPROF_MAGIC_LOGDIR": str(tmp_path), "XPROF_MAGIC_NO_SERVER": "1"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        viewer = manager.find_viewer(tmp_path)
        if viewer is not None:
            manager.stop_viewer(viewer)
    run = tmp_path / "plugins" / "profile" / "train"
    assert [r.name for r in _store.runs(tmp_path)] == ["train"]
    assert sum(p.stat().st_size for p in run.glob("*.xplane.pb")) > 2_000_000
    texts = _texts(nb.cells[-1])
    summaries = [t for t in texts if "xprof summary — run train" in t]
    assert summaries, texts
    assert not any("pending" in t.lower() for t in texts), texts
    assert any("500 × 'step'" in t for t in summaries), summaries
    assert (run / "xprof_magic_summary.json").exists()
