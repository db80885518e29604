"""What a person sees of each of XProf's tools under a cell: the data the pages fetch, and
every tool shown with content or with its one-line reason.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests._browser import BACKDROP, FRAME_LOOK_MS, MENU_PLACED, V2_KEY, DataFetch, DataFetches
from tests._wait import wait_until

__all__ = [
    "ToolView",
    "check_every_tool",
    "shown_text",
]


@dataclass
class ToolView:
    """How one stack shows the widget's page: for :func:`check_every_tool`."""

    widget: Any
    """The widget (its ``.xprof-tools select``)."""
    box: Any
    """The element that holds the XProf frame: its bounds are what the user sees."""
    frame: Callable[[str], Any]
    """The XProf page's frame once it shows a tool (by its value in the dropdown)."""
    data: DataFetches
    pause: Callable[[float], None]
    screenshot: Callable[[str], Any]
    reason: Callable[[], str]
    """The line the frame shows in place of a tool that has nothing for the run ("" while
    it shows none)."""
    place: Any = None
    """The element the page, or the line in its place, takes on the page: it shrinks to the
    line (None: not checked)."""
    charts_note: Callable[[], str] | None = None
    """The line under a page that draws charts where the chart library cannot load ("" while
    it shows none; None: not checked)."""
    under: Callable[[], str] | None = None
    """The line under the page about XProf's page itself ("" while none shows; None: not
    checked): on these CPU captures, the memory viewer's (``survey.CPU_MEMORY_VIEWER``)."""
    charts_box: Any = None
    """The charts note's element, and ``page_box`` the one XProf's page is drawn in: the
    note shows outside the page, which keeps the height it has without it (None: not
    checked)."""
    page_box: Any = None
    thread: str = "python"
    """The name of the row that holds the labels in the trace viewer (marimo's: ``marimo``)."""
    timeout_s: float = 90.0
    idle_s: float = 30.0
    """How long after a tool is chosen its page may still show a loading indicator."""


def check_every_tool(view: ToolView, run: str, label: str, name: str) -> list[str]:
    """Select each tool the dropdown offers, in turn, and check what the user sees.

    A tool named with a reason ("(no device ops in a CPU capture)") shows that reason in
    place of XProf's page, which is not loaded; any other must fetch its data (the graph
    viewer: its graph, after "Search Graph") and show no loading indicator of XProf's
    ``idle_s`` after it was chosen. No profile request answers 4xx/5xx, XProf's toolbar and
    menu are not there (the dropdown is the navigation) and no backdrop covers the tool, and
    in the trace viewer the ``python`` row (``label``'s thread) is inside the frame without
    scrolling. The options are read once the widget says they are final. A reason's frame
    shrinks to its line (:attr:`ToolView.place`), and the charts note shows under the pages
    that draw charts, offline, and under no other. Returns the tools seen.
    """
    from tests._page_checks import nav_shown
    from xprof_magic._notebook.widget import SURVEYED
    from xprof_magic._viewer.survey import CPU_MEMORY_VIEWER
    from xprof_magic._viewer.tools import TOOL_NAMES, uses_charts

    # Until XProf has said which tools have data, the options (their order, their names)
    # and a per-program tool's page can still change.
    final = view.widget.locator(f".xprof-tools.{SURVEYED}")
    _wait(view, lambda: final.count() == 1, f"the tools of {run} surveyed")
    select = view.widget.locator(".xprof-tools select")
    labels: list[str] = select.evaluate("s => Array.from(s.options).map(o => o.textContent)")
    tools = {name: tool for tool, name in reversed(TOOL_NAMES.items())}
    offered = []
    for label_text in labels:
        text = label_text.replace("\xa0", " ")
        offered.append((tools[text.split(" (")[0]], text))
    assert offered and offered[0][1] == "Trace viewer", offered
    with_data = [v for v, text in offered if not text.endswith(")")]
    assert offered[: len(with_data)] == [(v, t) for v, t in offered if v in with_data], offered
    current = select.evaluate("s => s.options[s.selectedIndex].textContent")
    page_height = 0.0
    for (value, text), label_text in zip(offered, labels, strict=True):
        if label_text != current:
            select.select_option(label=label_text)
            current = label_text
        chosen = time.monotonic()
        if text.endswith(")"):
            why = text.rsplit("(", 1)[1].rstrip(")")
            assert len(why) > 8, text
            shown = _wait(view, functools.partial(_says, view, why), f"{value}: its reason")
            assert shown and not view.data.failed, (value, view.data.failed)
            if view.place is not None:
                height = _wait(view, functools.partial(_height, view.place, 0, 100), "a line")
                assert height, f"{value}: its reason takes {_height(view.place)} px"
            view.screenshot(f"{name}-{value.rstrip('@')}")
            continue
        frame = view.frame(value)
        view.box.scroll_into_view_if_needed()
        if value.startswith("trace_viewer"):
            found = functools.partial(view.data.find, run, "trace_viewer", frame, label)
            _wait(view, found, f"{value} data of {run} with {label!r}")
            row = frame.get_by_text(view.thread, exact=True).filter(visible=True).first
            row.wait_for(timeout=view.timeout_s * 1000)
            _inside(row.bounding_box(), view.box.bounding_box(), f"the {view.thread} row")
        else:
            if value == "graph_viewer":
                search = frame.get_by_role("button", name="Search Graph")
                search.wait_for(timeout=view.timeout_s * 1000)
                _wait(view, search.is_enabled, "the graph viewer's op to search")
                search.click()
                # The graph comes into a frame of its own, by a //prefix//data/... URL.
                graph = _wait(view, functools.partial(_graph, view.data, run), "the graph")
                drawn = functools.partial(_has_graph, graph.frame)
                _wait(view, drawn, f"a graph at {graph.url}")
            else:
                found = functools.partial(view.data.find, run, value, frame)
                _wait(view, found, f"{value} data of {run}")
            menu = _wait(view, functools.partial(_menu, frame), f"{value}: XProf's menu")
            assert menu != "covering", f"{value}: XProf's menu covers the tool"
        idle = wait_until(
            functools.partial(_idle, frame),
            max(0.0, chosen + view.idle_s - time.monotonic()),
            f"{value}: still loading {view.idle_s:g} s after it was chosen",
            view.pause,
        )
        assert idle and view.reason() == "", value
        assert nav_shown(frame) == [], f"{value}: XProf's menu is open: {nav_shown(frame)}"
        if view.place is not None:
            assert _height(view.place, 300), f"{value}: the page in {_height(view.place)} px"
        if view.under is not None:
            line = CPU_MEMORY_VIEWER if value == "memory_viewer" else ""
            said = functools.partial(_under_says, view, line)
            assert _wait(view, said, f"{value}: the line under it"), view.under()
        if view.page_box is not None and not page_height:
            page_height = view.page_box.bounding_box()["height"]
        if view.charts_note is not None:
            if uses_charts(value):  # offline: Google's chart library cannot load
                noted = functools.partial(_charts_noted, view.charts_note)
                _wait(view, noted, f"{value}: the charts note")
                if view.page_box is not None and page_height:
                    _beside(view.charts_box.bounding_box(), view.page_box.bounding_box(), value)
                    height = view.page_box.bounding_box()["height"]
                    assert abs(height - page_height) <= 1, f"{value}: {height} of {page_height} px"
            else:
                said = view.charts_note()
                assert said == "", f"{value} draws no charts, yet the frame says: {said}"
        if not value.startswith("trace_viewer"):
            # A Trace Viewer v2 choice saved here (no WebGPU adapter headless) is dropped by
            # the next XProf page this origin loads.
            saved = in_frame(frame, f"() => localStorage.getItem('{V2_KEY}')")
            assert saved is None, f"{value}: a saved Trace Viewer v2 choice was kept"
            in_frame(frame, f"() => localStorage.setItem('{V2_KEY}', 'true')")
        view.screenshot(f"{name}-{value.rstrip('@')}")
        assert not view.data.failed, (value, view.data.failed)
    return [v for v, _ in offered]


def _beside(note: Any, page: Any, tool: str) -> None:
    """The charts note's box lies above or below the page's, not over it."""
    apart = note["y"] >= page["y"] + page["height"] - 1 or note["y"] + note["height"] <= page["y"]
    assert apart, f"{tool}: the charts note {note} covers the page {page}"


def _under_says(view: ToolView, line: str) -> bool:
    return view.under is not None and view.under() == line


def _says(view: ToolView, why: str) -> bool:
    return why in view.reason()


def _charts_noted(note: Callable[[], str]) -> bool:
    return "Google's charts" in note()


def _height(place: Any, low: float = 0.0, high: float = float("inf")) -> float:
    """``place``'s height on the page, when it is from ``low`` to ``high`` px (else 0)."""
    box = place.bounding_box()
    height = float(box["height"]) if box else 0.0
    return height if low <= height <= high else 0.0


def shown_text(line: Any) -> str:
    """A locator's text while it is shown, else "" (for :attr:`ToolView.reason`)."""
    from playwright.sync_api import Error

    try:
        return str(line.inner_text()) if line.count() and line.first.is_visible() else ""
    except Error:
        return ""


def _idle(frame: Any) -> bool:
    """No loading indicator of XProf's shows (:func:`tests._page_checks.busy`)."""
    from playwright.sync_api import Error

    from tests._page_checks import busy

    try:
        return not busy(frame)
    except Error:
        return False


def in_frame(frame: Any, script: str) -> Any:
    """``script`` (a function of the root element) evaluated in ``frame``'s document, within
    :data:`FRAME_LOOK_MS`. ``Locator.evaluate`` waits for the document with a timeout, where
    ``Frame.evaluate`` and ``Locator.count`` wait without one: a cross-origin frame whose
    document never came back once held a test until the job was killed."""
    return frame.locator(":root").evaluate(script, timeout=FRAME_LOOK_MS)


_MENU_JS = f"""root => {{
  if (!root.querySelector({json.dumps(MENU_PLACED)})) return null;
  if (document.body && document.body.innerText.includes('Navigating.')) return null;
  return root.querySelector({json.dumps(BACKDROP)}) ? 'covering' : 'placed';
}}"""


def _menu(frame: Any) -> str | None:
    """Where XProf's full UI has put its menu, once it has: "placed" (docked, or closed) or
    "covering" (over the tool, with a backdrop, which XProf shows in the same update); None
    while its drawer has no mode yet or XProf is still navigating to the tool ("Navigating."),
    the moment its classic menu would open over a narrow frame."""
    from playwright.sync_api import Error

    try:
        found: str | None = in_frame(frame, _MENU_JS)
    except Error:
        return None
    return found


_GRAPH_JS = """root => ({
  drawn: root.querySelector('#graph-container svg g.node') !== null,
  notice: root.querySelector('.xprof-magic-graph-notice')?.textContent ?? null,
})"""


def _has_graph(frame: Any) -> bool:
    """The graph drawn: graphviz's SVG with its nodes in XProf's graph page, offline (the
    viewer serves the renderer), and no notice that it could not be."""
    from playwright.sync_api import Error

    try:
        found = in_frame(frame, _GRAPH_JS)
    except Error:
        return False
    assert found["notice"] is None, found["notice"]
    return bool(found["drawn"])


def _graph(data: DataFetches, run: str) -> DataFetch | None:
    """The graph viewer's graph of ``run``, fetched into a frame of its own."""
    found = [f for f in data.all() if f.run == run and f.status == 200 and "type=graph" in f.url]
    return found[-1] if found else None


def _wait(view: ToolView, condition: Callable[[], Any], what: str) -> Any:
    return wait_until(
        condition, view.timeout_s, lambda: f"{what}\n{view.data.describe()}", view.pause
    )


def _inside(inner: Any, outer: Any, what: str) -> None:
    assert inner and outer, (what, inner, outer)
    assert (
        outer["y"] <= inner["y"] and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    ), f"{what} at {inner} is outside the frame at {outer}"
