"""A run's tools as a person picks them, and the page that shows each one.

XProf lists a run's tools by their internal names (``trace_viewer@``, ``overview_page``);
the fronts under a cell (the Jupyter widget, the marimo view) offer them in one order, by
the names XProf's own menu uses, and embed each in the page that shows it best: the
timeline alone for the trace viewer, opened on the verdict's steps, and XProf's full page
for the rest, in the form for under a cell (:mod:`xprof_magic._viewer.app.inline`), and
say the same lines about it: a tool's reason in place of its page, the trace viewer waiting
for its window (:data:`WAIT_NOTE`), a page still loading, a page whose charts cannot load
(only the tools that draw them: :data:`CHARTS_TOOLS`).
What is shared by both fronts lives here; nothing imports IPython.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from xprof_magic._viewer.process.client import NEW_NAV, TRACE_VIEWER_TOOL, Viewer, fetch_json
from xprof_magic._viewer.survey import PROGRAM_TOOLS, Survey

__all__ = [
    "BUSY_NOTE",
    "BUSY_S",
    "CHARTS_NOTE",
    "CHARTS_TOOLS",
    "CHARTS_URL",
    "EMPTY_NOTE",
    "NEW_NAV",
    "ROUTE_LINES",
    "TOOL_NAMES",
    "TOOL_ORDER",
    "WAIT_NOTE",
    "ToolLister",
    "ToolSurveyor",
    "Window",
    "list_tools",
    "notes",
    "order_tools",
    "page_urls",
    "uses_charts",
    "view_range",
    "wait_line",
]

TOOL_ORDER = (
    TRACE_VIEWER_TOOL,
    "trace_viewer",
    "overview_page",
    "op_profile",
    "memory_profile",
    "memory_viewer",
    "framework_op_stats",
    "input_pipeline_analyzer",
    "hlo_stats",
    "graph_viewer",
)
TOOL_NAMES = {
    TRACE_VIEWER_TOOL: "Trace viewer",
    "trace_viewer": "Trace viewer",
    "overview_page": "Overview",
    "op_profile": "Op profile",
    "memory_profile": "Memory profile",
    "memory_viewer": "Memory viewer",
    "framework_op_stats": "Framework op stats",
    "input_pipeline_analyzer": "Input pipeline",
    "hlo_stats": "HLO stats",
    "graph_viewer": "Graph viewer",
    "roofline_model": "Roofline",
    "pod_viewer": "Pod viewer",
    "megascale_stats": "Megascale stats",
    "inference_profile": "Inference profile",
}

CHARTS_TOOLS = frozenset(
    {
        "overview_page",
        "input_pipeline_analyzer",
        "memory_profile",
        "memory_viewer",
        "framework_op_stats",
        "hlo_stats",
        "roofline_model",
        "pod_viewer",
        "megascale_stats",
        "inference_profile",
        "kernel_stats",
        "utilization_viewer",
        "perf_counters",
    }
)
"""The tools whose pages draw with Google's chart library, loaded at run time from
:data:`CHARTS_URL` (XProf's front end: the components that call ``google.visualization``);
the trace viewer, the op profile and the graph viewer draw without it."""
CHARTS_URL = "https://www.gstatic.com/charts/loader.js"
CHARTS_NOTE = (
    "xprof: Google's charts (www.gstatic.com) do not load here: charts and some tables stay "
    "blank; get internet, or use the trace viewer."
)
"""The line under a page of :data:`CHARTS_TOOLS` where the browser cannot fetch the charts."""
BUSY_S = 45.0
"""How long one of XProf's loading indicators may show before the front says, in one line
under the page, that it has not finished (:data:`BUSY_NOTE`). XProf reads a 100 MB capture
for a tool's first page in about 15 s on two cores; a page still loading after three times
that has nothing to show, or is stuck."""
EMPTY_NOTE = "xprof: {name} has nothing to show for this run: {reason}. Pick another tool{tab}."
"""The line in place of a tool that has nothing for the run, whose page would only spin."""
BUSY_NOTE = (
    "xprof: {name} is still loading after {seconds} s: XProf may have nothing to show for "
    "this run, or is still reading a big capture. Pick another tool{tab}."
)
"""The line under a page whose loading indicator has shown :data:`BUSY_S`."""
WAIT_NOTE = (
    "xprof: the trace viewer opens on the steps the verdict is about once the summary has "
    "read the timeline, which it is still doing. Pick another tool meanwhile."
)
"""The line in place of the trace viewer while the summary that gives its window is still
being read (a pending one's), so that it does not open on the whole timeline first."""
NEW_TAB = ", or open it in a new tab"

Window = tuple[float, float]
"""Seconds on a run's timeline, from and to: where the trace viewer opens."""


def uses_charts(tool: str | None) -> bool:
    """Whether ``tool``'s page draws with Google's charts (:data:`CHARTS_TOOLS`)."""
    return tool in CHARTS_TOOLS


def wait_line(tool: str | None, coming: bool) -> str:
    """:data:`WAIT_NOTE` for the trace viewer while its window is still ``coming``; "" otherwise.

    ``tool`` None is the trace viewer (the default); the window comes with the run's summary.
    """
    return WAIT_NOTE if coming and (tool or TRACE_VIEWER_TOOL) == TRACE_VIEWER_TOOL else ""


def notes(new_tab: bool, busy_s: float = BUSY_S) -> dict[str, str]:
    """:data:`EMPTY_NOTE` and :data:`BUSY_NOTE` for one front's frame.

    ``new_tab``: it has the link. ``{name}`` and ``{reason}`` are left for the page's.
    """
    tab = NEW_TAB if new_tab else ""
    return {
        "empty": EMPTY_NOTE.replace("{tab}", tab),
        "busy": BUSY_NOTE.replace("{tab}", tab).replace("{seconds}", f"{busy_s:g}"),
    }


ToolLister = Callable[[Viewer, str], list[str]]
"""How a front asks the viewer for a run's tools (:func:`list_tools`; tests pass their own)."""
ToolSurveyor = Callable[[Viewer, str, Sequence[str], Path | None], Survey]
"""How a front asks which of a run's tools have data
(:func:`~xprof_magic._viewer.survey.survey_tools`)."""


def order_tools(tools: Sequence[str]) -> list[str]:
    """The trace viewer first, then overview, op profile, memory, then the rest by name."""
    rank = {tool: i for i, tool in enumerate(TOOL_ORDER)}
    unique = list(dict.fromkeys(t for t in tools if t))
    if TRACE_VIEWER_TOOL in unique and "trace_viewer" in unique:
        unique.remove("trace_viewer")
    return sorted(unique, key=lambda t: (rank.get(t, len(rank)), t))


def tool_label(tool: str, empty: str | None = None) -> str:
    """The dropdown's name for a tool; with ``empty``, why it shows nothing for this run."""
    name = TOOL_NAMES.get(tool, tool)
    return f"{name} ({empty})" if empty else name


def list_tools(viewer: Viewer, run: str) -> list[str]:
    """The tools XProf offers for a run, from the viewer's ``run_tools`` route."""
    found = fetch_json(viewer, "run_tools", run=run, timeout=10.0)
    return [str(t) for t in found] if isinstance(found, list) else []


def page_urls(
    viewer: Viewer,
    run: str,
    tool: str | None,
    host: str | None,
    location: tuple[str, str],
    survey: Survey | None = None,
    window: Window | None = None,
) -> tuple[str, str]:
    """The embedded page's URL and the full UI's URL for one selection, as the browser sees them.

    Args:
        location: ``(origin, prefix)`` (:func:`~xprof_magic._viewer.process.client.locate`).
        survey: What the run's tools hold (the program a per-program tool opens on).
        window: The seconds on the timeline that the trace viewer opens on (the verdict's steps,
            :meth:`~xprof_magic._analysis.Summary.verdict_window`), with a margin each side.
    """
    origin, prefix = location
    tool = tool or TRACE_VIEWER_TOOL
    full = origin + viewer.tool_path(run, tool, host, prefix=prefix)
    if viewer.kind != "xprof":
        return full, full
    if tool == TRACE_VIEWER_TOOL and host:
        start, end = view_range(window) if window else (None, None)
        path = viewer.trace_viewer_path(run, host, prefix=prefix, view_start=start, view_end=end)
        return origin + path, full
    found: dict[str, str] = {}
    survey = survey or Survey()
    if tool in PROGRAM_TOOLS and survey.program:
        # The program that matters most; the graph viewer draws its root op at once.
        found["module_name"] = survey.program
        if tool == "graph_viewer" and survey.node:
            found["node_name"] = survey.node
    return origin + viewer.embedded_path(run, tool, host, prefix=prefix, **found), full


VIEW_MARGIN = 0.03
"""The share of the window's length shown before and after it."""


def view_range(window: tuple[float, float]) -> tuple[float, float]:
    """XProf's ``view_start`` and ``view_end`` (ms on the timeline) for a window of seconds.

    With :data:`VIEW_MARGIN` each side, so its first step is not at the edge.
    """
    start, end = window
    margin = (end - start) * VIEW_MARGIN
    return max(0.0, start - margin) * 1e3, (end + margin) * 1e3


ROUTE_LINES = {
    "busy": "The kernel is running a cell: the viewer continues here when the cell ends.",
    "port_only": (
        "{name} opens only on the viewer's port {port}, which this browser cannot reach; "
        "the trace viewer shows here through the kernel. Forward port {port} to this browser "
        "(e.g. VS Code's Ports view, or ssh -L {port}:127.0.0.1:{port}) to see {name}."
    ),
    "none": (
        "XProf cannot show here: this browser did not reach the viewer's port {port} within "
        "1 s, and the kernel route is missing (it needs anywidget in the kernel: pip install "
        "anywidget, then run the cell again). Or forward port {port} to this browser, or set "
        "XPROF_MAGIC_PROXY_URL to a proxy that reaches it."
    ),
    "failed": (
        "The viewer's page did not come through the kernel ({error}). Run the cell again; "
        "or forward port {port} to this browser."
    ),
}
"""The frame's lines about the route (``{name}``: the tool; ``{port}``: the viewer's)."""
