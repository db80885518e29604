"""A run -> a summary that answers the first questions about a profiled cell at a glance.

Which device ran the work, where the cell's time went (labels, steps), whether the same code
compiled again, which ops fell back to the CPU, what the device and the host threads were
busy with. The modules, in the order data flows through them:

* :mod:`.timeline` reads ``<host>.xplane.pb`` (:mod:`.timeline.trace` and the modules it
  uses) with the protobuf runtime and a schema of its own (:mod:`.timeline.xspace`), one
  thread's line at a time, into numpy arrays (:mod:`.timeline.lines`) and then plain facts
  (:mod:`.timeline.facts`); big timelines are shared with worker processes
  (:mod:`.timeline.pool`, :mod:`.timeline.worker`); reading never writes into the run;
* :mod:`.summary.build` turns the run's metadata (:class:`~xprof_magic._metadata.RunMetadata`)
  and those facts into a :class:`Summary` (:mod:`.model.summary`), with
  :mod:`.summary.blocks` (labels, steps) and :mod:`.summary.device` (device, threads, top
  ops); :mod:`.diagnosis.breakdown` splits each step's time into input, host, compile,
  transfer, sync, device, collective and idle, and :mod:`.diagnosis.verdict` draws the
  :class:`Diagnosis` (:mod:`.model.diagnosis`) from it; :mod:`.render.notes` adds the
  headlines, the verdict first after the device;
* :mod:`.diagnosis.compare` puts two summaries side by side;
* :mod:`.render.text` and :mod:`.render.html` render them (static HTML, inline SVG, no
  JavaScript, so a saved notebook shows the summary without a kernel; :mod:`.render.chart`
  the step times, :mod:`.render.breakdown_chart` the per-step breakdown);
* :mod:`.cache` keeps a summary beside its capture and reads big ones in a process of its
  own (``python -m xprof_magic._analysis RUN_DIR``, :mod:`.__main__`);
* :func:`summary_of` (:mod:`.entry`) is what front ends call: it picks the saved summary,
  a quick one within a time budget, or the whole one, here or in a process of its own.

The backend's metric names, event names and advice come from its
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
from xprof_magic._analysis.diagnosis.compare import Comparison, compare
from xprof_magic._analysis.entry import summary_of
from xprof_magic._analysis.model.summary import (
    Breakdown,
    CompareRow,
    Compiles,
    CompileSite,
    DeviceBusy,
    DeviceInfo,
    Diagnosis,
    Fallback,
    LabelRow,
    Note,
    OpRow,
    StepBreakdown,
    StepStats,
    Summary,
    ThreadGroup,
    Timed,
)
from xprof_magic._analysis.render.html import chart_svg, render_html
from xprof_magic._analysis.render.text import render_text
from xprof_magic._analysis.summary.build import DEFAULT_BUDGET_S, summarize

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
