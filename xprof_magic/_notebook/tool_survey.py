"""The widget's background question to the viewer: which tools a run has, and which have data.

Their names and order come from :mod:`~xprof_magic._viewer.tool_pages`, shared with the
marimo view.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xprof_magic._viewer.process.client import Viewer, ViewerError
from xprof_magic._viewer.survey import Survey, survey_tools
from xprof_magic._viewer.tool_pages import ToolLister, ToolSurveyor, list_tools, order_tools

__all__ = ["ToolAnswer", "ToolQuestions"]


@dataclass(frozen=True)
class ToolAnswer:
    """One answer about ``run``'s tools.

    ``tools`` in the dropdown's order (empty: none came, and ``problem`` says why), and
    ``survey``, which of them have data (None: not asked yet).
    """

    run: str
    ticket: int
    tools: list[str]
    problem: str = ""
    survey: Survey | None = None


class ToolQuestions:
    """The questions about runs' tools, each in a thread of its own.

    ``on_answer`` gets each answer from that thread: the tools as XProf lists them first, then,
    once XProf has said which have data (:func:`~xprof_magic._viewer.survey.survey_tools`,
    seconds on a big run), those first and the others after them.
    """

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
        """Block until the questions asked so far are answered.

        False if one is still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)
