"""Acceptance: the timeline said while it is being prepared, then drawn, in a real JupyterLab.

The viewer's converter is slowed on purpose (it waits 8 s after converting, before its caches
are committed), so the frame under the cell shows the "preparing" line, counting, until the
run is ready, and then XProf's trace viewer with the cell's label.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest

from tests._browser import (
    LAB,
    JupyterLab,
    NotebookPage,
    launch_chromium,
    machine_environment,
    offline,
    shown_text,
    shut_down,
    start_jupyterlab,
    write_notebook,
)
from xprof_magic._viewer import convert

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

DELAY_S = 8
RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 120.0
CELLS = [
    "%load_ext xprof_magic\nimport torch, torch_xla\ndevice = torch_xla.device()",
    "%%xprof --name slowed\n"
    "x = torch.randn(64, 64, device=device)\n"
    "# xprof: forward\n"
    "y = (x @ x).relu().sum()\n"
    "torch_xla.sync()\n"
    "y.item()",
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp("jupyterlab-prepare")
    server = start_jupyterlab(
        home, base_env={**machine_environment(), convert.DELAY_ENV: str(DELAY_S)}
    )
    try:
        yield server
    finally:
        shut_down(server, home)


def test_the_frame_says_preparing_then_shows_the_timeline(
    lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    write_notebook(lab.root / "slowed.ipynb", CELLS)
    with launch_chromium(tmp_path_factory.mktemp("chromium-prepare")) as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        offline(context)
        notebook = NotebookPage(context.new_page(), lab, "slowed.ipynb", LAB)
        try:
            notebook.open(LOAD_TIMEOUT_S)
            notebook.run_all(count=2, timeout=RUN_TIMEOUT_S)
            outputs = notebook.outputs()
            assert "Traceback" not in outputs and "xprof: run slowed (ok)" in outputs, outputs
            widget = notebook.widgets.first
            frame = notebook.wait_for_page(
                widget, "slowed", "trace_viewer_index.html", LOAD_TIMEOUT_S
            )
            widget.locator("iframe.xprof-outer").scroll_into_view_if_needed()
            line = frame.locator(".xprof-preparing")
            said: list[str] = []

            def counting() -> bool:
                text = shown_text(line)
                if text and (not said or said[-1] != text):
                    said.append(text)
                return len(said) >= 2

            notebook.wait(
                counting,
                lambda: f"the preparing line, counting; seen {said}",
                LOAD_TIMEOUT_S,
            )
            pattern = r"xprof: preparing the timeline: \d+ s so far"
            assert all(re.match(pattern, text) for text in said), said
            notebook.screenshot("prepare-preparing", widget.locator("iframe.xprof-outer"))
            notebook.wait_for_data(frame, "slowed", "trace_viewer", LOAD_TIMEOUT_S, label="forward")
            frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
                timeout=LOAD_TIMEOUT_S * 1000
            )
            assert not shown_text(frame.locator(".xprof-preparing"))
            notebook.screenshot("prepare-timeline", widget.locator("iframe.xprof-outer"))
        except BaseException:
            with contextlib.suppress(Exception):
                notebook.screenshot("prepare-failure")
            notebook.report()
            raise
        finally:
            context.close()
            lab.shutdown_kernels()
