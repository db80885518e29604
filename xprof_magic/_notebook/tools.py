"""XProf's tools as the widget's Tool dropdown offers them: their names and order, and the
background question to the viewer of which tools a run has and which of them have data.

The tools of a run come from the viewer (its ``run_tools`` route), which can take seconds
while XProf reads a large run, and saying which have data takes longer still. So they are
asked in a short-lived thread, never in a dropdown's observer: the widget offers the trace
viewer, always there, at once, and the answers replace it as they come, unless the user has
picked another run meanwhile (each question has a ticket; only the latest one's answer is
shown, and every answer is kept for a return to its run).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xprof_magic._viewer.client import TRACE_VIEWER_TOOL, Viewer, ViewerError, fetch_json
from xprof_magic._viewer.survey import Survey, survey_tools

__all__ = [
    "TOOL_NAMES",
    "TOOL_ORDER",
    "ToolAnswer",
    "ToolLister",
    "ToolQuestions",
    "ToolSurveyor",
    "list_tools",
    "order_tools",
    "tool_label",
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

ToolLister = Callable[[Viewer, str], list[str]]
ToolSurveyor = Callable[[Viewer, str, Sequence[str], Path | None], Survey]


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


@dataclass(frozen=True)
class ToolAnswer:
    """One answer about ``run``'s tools: ``tools`` in the dropdown's order (empty: none
    came, and ``problem`` says why), and ``survey``, which of them have data (None: not
    asked yet)."""

    run: str
    ticket: int
    tools: list[str]
    problem: str = ""
    survey: Survey | None = None


class ToolQuestions:
    """The questions about runs' tools, each in a thread of its own; ``on_answer`` gets each
    answer from that thread: the tools as XProf lists them first, then, once XProf has said
    which have data (:func:`~xprof_magic._viewer.survey.survey_tools`, seconds on a big
    run), those first and the others after them."""

    def __init__(
        self,
        viewer: Viewer,
        run_dir: Callable[[str], Path],
        on_answer: Callable[[ToolAnswer], None],
        list_tools: ToolLister = list_tools,
        survey: ToolSurveyor = survey_tools,
    ) -> None:
        self.viewer = viewer
        self._run_dir = run_dir
        self._on_answer = on_answer
        self._list_tools = list_tools
        self._survey = survey
        self.latest = 0
        self._threads: list[threading.Thread] = []

    def ask(self, run: str) -> None:
        """Ask about ``run``; its ticket becomes the latest."""
        self.latest += 1
        thread = threading.Thread(
            target=self._answer, args=(run, self.latest), name="xprof-widget-tools", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _answer(self, run: str, ticket: int) -> None:
        try:
            tools = order_tools(self._list_tools(self.viewer, run))
            problem = ""
        except ViewerError as error:
            tools, problem = [], str(error)
        self._on_answer(ToolAnswer(run, ticket, tools, problem))
        if tools:
            survey = self._survey(self.viewer, run, tools, self._run_dir(run))
            # The tools with data lead; those without keep their order after them.
            ranked = sorted(tools, key=lambda t: t in survey.empty)
            self._on_answer(ToolAnswer(run, ticket, ranked, survey=survey))

    def wait(self, timeout: float = 30.0) -> bool:
        """Block until the questions asked so far are answered; False if one is still
        pending after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)
