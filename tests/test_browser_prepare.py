"""Acceptance: the timeline said while it is being prepared, then drawn, in a real JupyterLab.

The viewer's converter is slowed on purpose (it waits 8 s after converting, before its caches
are committed), so the frame under the cell shows the "preparing" line, counting, until the
run is ready, and then XProf's trace viewer with the cell's label. With the preview's
threshold at 0 MB (every run counts as large), the frame first shows the run's first events
in XProf's trace viewer under a line that says which part it is, then the whole timeline.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._browser import LAB, NotebookPage, launch_chromium, offline, write_notebook
from tests._notebook_servers import JupyterLab, machine_environment, shut_down, start_jupyterlab
from tests._tool_checks import shown_text
from xprof_magic._viewer.prepare import convert, preview

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

DELAY_S = 8
PREVIEW_DELAY_S = 15
"""Long enough for a loaded machine to show the preview and press a key in it."""
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


def _lab(tmp_path_factory: pytest.TempPathFactory, name: str, **env: str) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp(name)
    server = start_jupyterlab(home, base_env={**machine_environment(), **env})
    try:
        yield server
    finally:
        shut_down(server, home)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    yield from _lab(tmp_path_factory, "jupyterlab-prepare", **{convert.DELAY_ENV: str(DELAY_S)})


@pytest.fixture(scope="module")
def preview_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    env = {
        convert.DELAY_ENV: str(PREVIEW_DELAY_S),
        preview.FROM_MB_ENV: "0",
        preview.EVENTS_ENV: "200",
    }
    yield from _lab(tmp_path_factory, "jupyterlab-preview", **env)


@contextlib.contextmanager
def _ran(
    lab: JupyterLab, home: Path, name: str, cells: list[str], runs: tuple[str, ...]
) -> Iterator[NotebookPage]:
    """Notebook ``name`` of ``cells`` run in Chromium, each of ``runs`` said ok; on a failure,
    a screenshot and what the page and server said."""
    write_notebook(lab.root / f"{name}.ipynb", cells)
    with launch_chromium(home) as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        offline(context)
        notebook = NotebookPage(context.new_page(), lab, f"{name}.ipynb", LAB)
        try:
            notebook.open(LOAD_TIMEOUT_S)
            notebook.run_all(count=len(cells), timeout=RUN_TIMEOUT_S)
            outputs = notebook.outputs()
            assert "Traceback" not in outputs, outputs
            for run in runs:
                assert f"xprof: run {run} (ok)" in outputs, outputs
            yield notebook
        except BaseException:
            with contextlib.suppress(Exception):
                notebook.screenshot(f"{name}-failure")
            notebook.report()
            raise
        finally:
            context.close()
            lab.shutdown_kernels()


def test_the_frame_says_preparing_then_shows_the_timeline(
    lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("chromium-prepare")
    with _ran(lab, home, "slowed", CELLS, ("slowed",)) as notebook:
        widget = notebook.widgets.first
        frame = notebook.wait_for_page(widget, "slowed", "trace_viewer_index.html", LOAD_TIMEOUT_S)
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


def test_a_frame_out_of_view_waits_to_be_looked_at(
    lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A frame scrolled away when its run is ready keeps its line ("drawn when this frame
    is in view") rather than load XProf's timeline beside the one on screen; scrolled back
    into view, it draws the timeline."""
    home = tmp_path_factory.mktemp("chromium-unseen")
    tall = "print('\\n'.join(f'line {i}' for i in range(300)))"
    cells = [CELLS[0], CELLS[1].replace("slowed", "unseen"), tall]
    with _ran(lab, home, "unseen", cells, ("unseen",)) as notebook:
        widget = notebook.widgets.first
        frame = notebook.wait_for_page(widget, "unseen", "trace_viewer_index.html", LOAD_TIMEOUT_S)
        line = frame.locator(".xprof-preparing")
        notebook.wait(
            lambda: "preparing the timeline" in (line.text_content() or ""),
            lambda: f"the preparing line; the frame says {line.text_content()!r}",
            LOAD_TIMEOUT_S,
        )
        notebook.page.get_by_text("line 299").scroll_into_view_if_needed()
        waiting = "xprof: the timeline is ready: it is drawn when this frame is in view"
        notebook.wait(
            lambda: (line.text_content() or "") == waiting,
            lambda: f"the line of a ready run out of view; it says {line.text_content()!r}",
            LOAD_TIMEOUT_S,
        )
        assert not notebook.data.find("unseen", "trace_viewer", frame, None)
        widget.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.wait_for_data(frame, "unseen", "trace_viewer", LOAD_TIMEOUT_S, label="forward")
        frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )


PREVIEW_LINE = re.compile(
    r"xprof: showing the events of the first [\d.]+ m?s of [\d.]+ m?s while the whole "
    r"timeline is prepared: \d+ s so far"
)


def _previewing(notebook: NotebookPage, widget: Any, run: str) -> tuple[Any, Any]:
    """``widget``'s frame once it shows ``run``'s preview line and, in the preview's frame,
    XProf's timeline; the frame and its line."""
    frame = notebook.wait_for_page(widget, run, "trace_viewer_index.html", LOAD_TIMEOUT_S)
    widget.locator("iframe.xprof-outer").scroll_into_view_if_needed()
    line = frame.locator(".xprof-preparing")
    notebook.wait(
        lambda: PREVIEW_LINE.match(shown_text(line) or ""),
        lambda: f"the preview's line of run {run}; the frame says {shown_text(line)!r}",
        LOAD_TIMEOUT_S,
    )
    inner = frame.frame_locator("iframe.xprof-preview")
    inner.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
        timeout=LOAD_TIMEOUT_S * 1000
    )
    return frame, line


def test_a_large_runs_frame_shows_its_first_events_then_the_whole_timeline(
    preview_lab: JupyterLab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    big, touched = (CELLS[1].replace("slowed", name) for name in ("big", "touched"))
    home = tmp_path_factory.mktemp("chromium-preview")
    cells = [CELLS[0], big, touched]
    with _ran(preview_lab, home, "previewed", cells, ("big", "touched")) as notebook:
        widget = notebook.widgets.first
        frame, line = _previewing(notebook, widget, "big")
        previews = [f for f in frame.child_frames if preview_query() in f.url]
        assert previews, [f.url for f in frame.child_frames]
        assert PREVIEW_LINE.match(shown_text(line) or ""), "the run was ready before its preview"
        notebook.screenshot("prepare-preview", widget.locator("iframe.xprof-outer"))
        # Untouched, the frame goes on to the whole timeline once it is ready.
        notebook.wait_for_data(frame, "big", "trace_viewer", LOAD_TIMEOUT_S, label="forward")
        frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        assert not shown_text(frame.locator(".xprof-preparing"))
        assert not frame.locator("iframe.xprof-preview").count()
        notebook.screenshot("prepare-whole", widget.locator("iframe.xprof-outer"))
        # Touched (a click in the preview), the frame keeps the preview when the whole
        # timeline is ready and says so, with a link to it.
        frame, line = _previewing(notebook, notebook.widgets.nth(1), "touched")
        frame.locator("iframe.xprof-preview").click(position={"x": 600, "y": 300})
        assert PREVIEW_LINE.match(shown_text(line) or ""), "ready before the click"
        ready = re.compile(r"xprof: the whole timeline is ready \([\d.]+ m?s\)\. Show it")
        notebook.wait(
            lambda: ready.match(shown_text(line) or ""),
            lambda: f"the ready line; the frame says {shown_text(line)!r}",
            LOAD_TIMEOUT_S,
        )
        assert frame.locator("iframe.xprof-preview").count() == 1, "the preview was taken away"
        frame.get_by_text("Show it").click()
        notebook.wait_for_data(frame, "touched", "trace_viewer", LOAD_TIMEOUT_S, label="forward")
        assert not frame.locator("iframe.xprof-preview").count()


def preview_query() -> str:
    """How the preview's frame URL carries the preview's marker (inside ``trace_data_url``)."""
    from urllib.parse import quote

    from xprof_magic._viewer.prepare.preparing import PREVIEW_QUERY

    return quote(PREVIEW_QUERY, safe="")
