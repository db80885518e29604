"""The diagnosis in a real JupyterLab and Chromium: the verdict and its per-step chart show
under a profiled cell (the summary's static HTML, no script)."""

from __future__ import annotations

import contextlib
import re

import pytest

from tests._browser import LAB, NotebookPage, launch_chromium, write_notebook
from tests._notebook_servers import JupyterLab

pytestmark = pytest.mark.browser

TIMEOUT_S = 300.0
CELLS = [
    "%load_ext xprof_magic\n"
    "import time, numpy as np, torch, torch_xla\n"
    "dev = torch_xla.device()\n"
    "def decoded(n):\n"
    "    for i in range(n):\n"
    "        time.sleep(0.03)\n"
    "        yield torch.from_numpy(np.ones((16, 32), np.float32))",
    "%%xprof --steps --name starved\n"
    "for x in decoded(6):\n"
    "    y = (x.to(dev) * 2).sum()\n"
    "    torch_xla.sync()",
]


def test_the_verdict_and_its_chart_show_under_the_cell(
    lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    write_notebook(lab.root / "diagnosis.ipynb", CELLS)
    with launch_chromium(tmp_path_factory.mktemp("chromium-home")) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        notebook = NotebookPage(page, lab, "diagnosis.ipynb", LAB)
        try:
            notebook.open(90.0)
            notebook.run_all(count=len(CELLS), timeout=TIMEOUT_S)
            chart = page.locator("svg.xprof-magic-breakdown").first
            chart.wait_for(state="attached", timeout=TIMEOUT_S * 1000)
            chart.scroll_into_view_if_needed()
            notebook.wait(chart.is_visible, "the breakdown chart to be visible", 30.0)
            legend = chart.locator("text").all_text_contents()
            caption = "where the time of 6 steps went (verdict: input; dashed: median of the rest"
            assert "input" in legend and any(t.startswith(caption) for t in legend), legend
            assert chart.locator("rect").count() >= 6
            text = page.locator(".jp-OutputArea-output").all_inner_texts()
            assert any(re.search(r"Input-bound \(highly, XProf's ≥ 20%\): \d+%", t) for t in text)
            notebook.screenshot("diagnosis-chart", chart)
        except BaseException:
            with contextlib.suppress(Exception):
                notebook.screenshot("diagnosis-failure")
            notebook.report()
            raise
        finally:
            lab.shutdown_kernels()
