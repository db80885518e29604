"""A run -> a summary that answers the first questions about a profiled cell at a glance.

May import the runs, the cell, the backends and the capture's result; never the viewer or a
front. Its modules, and what each holds, are in ARCHITECTURE.md's table.
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
from xprof_magic._analysis.render.display_hooks import register as _register_renderers
from xprof_magic._analysis.render.html import render_html
from xprof_magic._analysis.render.text import render_text
from xprof_magic._analysis.stages import DEFAULT_BUDGET_S, summarize
from xprof_magic._analysis.summaries import summary_of

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
