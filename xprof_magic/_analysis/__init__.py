"""A run -> a summary that answers the first questions about a profiled cell at a glance.

Which device ran the work, where the cell's time went (labels, steps), whether the same code
compiled again, which ops fell back to the CPU, what the device and the host threads were
busy with, and the verdict: what bounds the cell, where, and the fix. The sub-packages are
the stages, in the order data flows through them (:mod:`.stages` runs them):

* :mod:`.timeline`: read ``<host>.xplane.pb`` with the protobuf runtime and a schema of its
  own, one thread's line at a time, into numpy arrays and then plain facts
  (:mod:`.timeline.facts`); big timelines are shared with worker processes; reading never
  writes into the run;
* :mod:`.summary`: the run's metadata and those facts -> a :class:`Summary`: labels and
  steps, device and threads, hosts, compilations, the backend's figures;
* :mod:`.diagnosis`: each step's time split into input, host, compile, transfer, sync,
  device, collective and idle, and the verdict drawn from it, as data
  (:class:`Diagnosis`); two summaries side by side (:class:`Comparison`);
* :mod:`.render`: the words: the verdict's headline and the notes (made once, when the
  summary is built, and saved with it), the text and static HTML of a summary and of a
  comparison (inline SVG, no JavaScript, so a saved notebook shows it without a kernel).

:mod:`.model` holds the plain frozen dataclasses the stages hand on (and their JSON form);
a :class:`Summary` and a :class:`Comparison` display themselves through :mod:`.render`,
whose renderers this package registers for them when it is imported
(:mod:`.render.shown`): the model never imports the render stage.
:mod:`.cache` keeps a summary beside its capture and reads big ones in a process of its own
(``python -m xprof_magic._analysis RUN_DIR``, :mod:`.__main__`); :func:`summary_of`
(:mod:`.entry`) is what front ends call: it picks the saved summary, a quick one within a
time budget, or the whole one, here or in a process of its own.

May import :mod:`xprof_magic._runs` (the run's metadata and folders),
:mod:`xprof_magic._cell` (the names of markers, labels and steps),
:mod:`xprof_magic._backends` and the capture's result (its size limit); never the viewer or a
front. The backend's metric names, event names and advice come from its
:class:`~xprof_magic._backends.Vocabulary`. :func:`summarize` and :func:`summary_of` never
raise: a capture they cannot read gives a summary whose ``missing`` says what is absent
and why. IPython-free; importing it loads numpy and protobuf, so the notebook imports it
only when a summary is first needed.
"""

from __future__ import annotations

from xprof_magic._analysis.cache import (
    SUMMARY_FILE,
    estimate_read_s,
    load_summary,
    save_summary,
    summarize_in_subprocess,
)
from xprof_magic._analysis.diagnosis.compare import compare
from xprof_magic._analysis.entry import summary_of
from xprof_magic._analysis.model.comparison import CompareRow, Comparison
from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, StepBreakdown
from xprof_magic._analysis.model.summary import (
    Compiles,
    CompileSite,
    DeviceBusy,
    DeviceInfo,
    Fallback,
    LabelRow,
    Note,
    OpRow,
    StepStats,
    Summary,
    ThreadGroup,
    Timed,
)
from xprof_magic._analysis.render.chart import chart_svg
from xprof_magic._analysis.render.html import render_html
from xprof_magic._analysis.render.shown import register as _register_renderers
from xprof_magic._analysis.render.text import render_text
from xprof_magic._analysis.stages import DEFAULT_BUDGET_S, summarize

__all__ = [
    "DEFAULT_BUDGET_S",
    "SUMMARY_FILE",
    "Breakdown",
    "CompareRow",
    "Comparison",
    "CompileSite",
    "Compiles",
    "DeviceBusy",
    "DeviceInfo",
    "Diagnosis",
    "Fallback",
    "LabelRow",
    "Note",
    "OpRow",
    "StepBreakdown",
    "StepStats",
    "Summary",
    "ThreadGroup",
    "Timed",
    "chart_svg",
    "compare",
    "estimate_read_s",
    "load_summary",
    "render_html",
    "render_text",
    "save_summary",
    "summarize",
    "summarize_in_subprocess",
    "summary_of",
]

_register_renderers()
