"""The diagnosis in a real JupyterLab and Chromium: the verdict and its per-step chart show
under a profiled cell (the summary's static HTML, no script)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

import pytest

from tests._browser import (
    CHROMIUM_ARGS,
    JupyterLab,
    find_chromium,
    shut_down,
    start_jupyterlab,
    wait_until,
    write_notebook,
)
from tests.conftest import ARTIFACTS, missing

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


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp("jupyterlab")
    server = start_jupyterlab(home)
    try:
        yield server
    finally:
        shut_down(server, home)


def test_the_verdict_and_its_chart_show_under_the_cell(
    lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    chromium = find_chromium()
    if chromium is None:
        missing("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    write_notebook(lab.root / "diagnosis.ipynb", CELLS)
    with sync_playwright() as playwright:
        home = tmp_path_factory.mktemp("chromium-home")
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, env={**os.environ, "HOME": str(home)}
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(lab.notebook_url("diagnosis.ipynb", workspace="diagnosis"))
            page.locator(".jp-NotebookPanel .jp-CodeCell").first.wait_for(timeout=90_000)

            def pause(seconds: float) -> None:
                page.wait_for_timeout(seconds * 1000)

            def kernel_idle() -> bool:
                sessions = lab.api("GET", "/api/sessions")
                idle = all(x["kernel"]["execution_state"] == "idle" for x in sessions)
                return bool(sessions) and idle

            wait_until(kernel_idle, 90.0, "the kernel to start", pause)
            chooser = page.get_by_role("button", name="Select", exact=True)
            if chooser.count() and chooser.first.is_visible():
                chooser.first.click()
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            chart = page.locator("svg.xprof-magic-breakdown").first
            chart.wait_for(state="attached", timeout=TIMEOUT_S * 1000)
            chart.scroll_into_view_if_needed()
            wait_until(chart.is_visible, 30.0, "the breakdown chart to be visible", pause)
            legend = chart.locator("text").all_text_contents()
            assert "input" in legend and "where the time of 6 steps went (verdict: input)" in legend
            assert chart.locator("rect").count() >= 6
            text = page.locator(".jp-OutputArea-output").all_inner_texts()
            assert any(re.search(r"Input-bound \(highly, XProf's ≥ 20%\): \d+%", t) for t in text)
            ARTIFACTS.mkdir(exist_ok=True)
            chart.screenshot(path=str(ARTIFACTS / "browser-diagnosis-chart.png"))
        except BaseException:
            with contextlib.suppress(Exception):
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "browser-diagnosis-failure.png"))
            print(f"JupyterLab's log, last lines:\n{lab.log_tail()}")
            raise
        finally:
            browser.close()
            lab.shutdown_kernels()
