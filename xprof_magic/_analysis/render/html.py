"""A summary as static HTML, with inline SVG charts (:mod:`.chart`, :mod:`.breakdown_chart`).

The HTML carries no script, no external resource and no ``<style>`` block (inline styles
only), so it shows the same in a live notebook, a saved one opened without a kernel, and
viewers that strip scripts. Every string that came from the user's cell is escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from xprof_magic._analysis.render.breakdown_chart import breakdown_svg
from xprof_magic._analysis.render.chart import BLUE, GREY, ORANGE, chart_svg
from xprof_magic._analysis.render.chart import escape as _e
from xprof_magic._analysis.render.gaps import gaps_said
from xprof_magic._analysis.render.memory_section import memory_lines, memory_svg
from xprof_magic._analysis.render.notes import device_statement, notes_of
from xprof_magic._analysis.render.text import (
    CODE,
    fallback_hint,
    header,
    label_name,
    op_sections,
    per_thread,
    runtime_parts,
    steps_line,
    thread_role,
    versions_line,
)
from xprof_magic._backends.registry import get_vocabulary
from xprof_magic._units import NONE, data_size, percent, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.summary import Summary

__all__ = ["BOX", "HEADING", "chart_svg", "prose", "render_html", "section", "table"]

HTML_LABEL_ROWS = 60
_LEVEL_COLOR = {"error": "#d62728", "warning": ORANGE, "info": BLUE}
BOX = (
    "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;"
    "line-height:1.4;max-width:980px;border:1px solid rgba(127,127,127,0.35);"
    "border-radius:6px;padding:10px 14px;"
)
_TABLE = "border-collapse:collapse;margin:4px 0 10px 0;font-size:12px;"
_TH = (
    "text-align:left;padding:2px 8px;border-bottom:1px solid rgba(127,127,127,0.35);"
    # Between words only: a front's own style (marimo's summary: overflow-wrap anywhere)
    # would break a narrow column's header inside a word ("call s").
    "overflow-wrap:normal;word-break:normal;"
)
_TD = "padding:1px 8px;vertical-align:top;overflow-wrap:anywhere;"
_NUM = (
    "padding:1px 8px;vertical-align:top;text-align:right;font-variant-numeric:tabular-nums;"
    "white-space:nowrap;"
)
HEADING = "margin:10px 0 2px 0;font-size:13px;font-weight:600;"
"""A section's heading."""


def prose(text: str) -> str:
    """A note's prose as HTML: escaped, the code it quotes between backticks as code."""
    return CODE.sub(r"<code>\1</code>", _e(text))


def table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int]) -> str:
    cells = "".join(
        f'<th style="{_TH}{"text-align:right;" if i in numeric else ""}">{_e(h)}</th>'
        for i, h in enumerate(head)
    )
    body = []
    for row in rows:
        tds = "".join(
            f'<td style="{_NUM if i in numeric else _TD}">{cell}</td>' for i, cell in enumerate(row)
        )
        body.append(f"<tr>{tds}</tr>")
    return f'<table style="{_TABLE}"><tr>{cells}</tr>{"".join(body)}</table>'


def section(title: str, body: Sequence[str], opened: bool = False) -> str:
    """A part of the summary under its heading, folded (``<details>``) unless ``opened``.

    ``<details>`` needs no script: the summary stays whole in the output, never clipped. The heading
    keeps its disclosure triangle where a notebook's style sheet takes it away (Notebook 6 makes
    ``summary`` a block).
    """
    state = " open" if opened else ""
    return (
        f'<details class="xprof-magic-section"{state} style="margin:8px 0 2px 0">'
        f'<summary style="{HEADING}cursor:pointer;display:list-item">{_e(title)}</summary>'
        f"{''.join(body)}</details>"
    )


def _bar(share: float | None) -> str:
    width = max(0.0, min(1.0, share or 0.0)) * 80
    return (
        f'<span style="display:inline-block;width:80px;height:8px;background:{GREY};'
        f'vertical-align:middle;margin-right:6px"><span style="display:block;height:8px;'
        f'width:{width:.1f}px;background:{BLUE}"></span></span>{percent(share)}'
    )


def _hosts(s: Summary) -> list[str]:
    """The hosts table of a multi-host run (nothing for one host)."""
    if not s.hosts:
        return []
    slowest = f"; slowest: {s.slowest_host}" if s.slowest_host else ""
    head = f"Hosts — {len(s.hosts)} captured{slowest}; the other sections read {s.host}"
    rows = []
    for h in s.hosts:
        name = _e(h.host) + (" <b>(slowest)</b>" if h.host == s.slowest_host else "")
        if h.problem:
            rows.append([name, _e(h.problem), "", "", ""])
            continue
        rows.append(
            [
                name,
                _e(h.step_name or NONE),
                _e(seconds(h.step_s) if h.step_s is not None else NONE),
                str(h.steps),
                _e(seconds(h.busy_s) if h.busy_s is not None else NONE)
                + f" ({_e(percent(h.busy_share))})",
            ]
        )
    hosts = table(["host", "step", "step time", "steps", "device busy"], rows, {2, 3, 4})
    return [f'<div style="{HEADING}">{_e(head)}</div>', hosts]


def render_html(summary: Summary) -> str:
    """Static, self-contained HTML (inline styles and SVG, no script) of the summary."""
    s = summary
    words = get_vocabulary(s.backend)
    parts = [f'<div class="xprof-magic-summary" style="{BOX}">']
    parts += _heading(s)
    picture = breakdown_svg(s.diagnosis, s.steps)
    if picture:
        parts.append(f'<div style="margin:6px 0">{picture}</div>')
    # The breakdown's bars are the steps' times (the same spans): one chart carries both.
    chart = "" if picture and s.diagnosis.breakdown.steps else chart_svg(s)
    if chart:
        parts.append(f'<div style="margin:6px 0">{chart}</div>')
    memory_chart = memory_svg(s)
    if memory_chart:
        parts.append(f'<div style="margin:6px 0">{memory_chart}</div>')
    if s.steps:
        parts.append(f'<div style="{HEADING}">Steps</div><div>{_e(steps_line(s.steps))}</div>')
    parts += _labels(s)
    parts += _hosts(s)
    parts.append(section("Device and host threads", _device(s)))
    parts.append(section("Device memory", _memory(s), opened=s.memory.oom is not None))
    runtime = [table(["", ""], [[_e(k), _e(v)] for k, v in runtime_parts(s)], set())]
    parts.append(section(words.headings.metrics, runtime + _compile_sites(s)))
    if s.fallbacks:
        fallbacks = table(
            ["op", "calls", "hint"],
            [[_e(f.op), str(f.count), _e(fallback_hint(f, words))] for f in s.fallbacks],
            {1},
        )
        parts.append(section(words.headings.fallbacks, [fallbacks], opened=True))
    ops = _ops(s)
    if ops:
        parts.append(section("Top operations (self time)", ops))
    if s.missing:
        items = "".join(f"<li>{_e(m)}</li>" for m in gaps_said(s))
        parts.append(f'<div style="{HEADING}">Missing from this summary</div>')
        parts.append(f'<ul style="margin:2px 0">{items}</ul>')
    made_by = f"<br>{_e(versions_line(s))}" if s.versions else ""
    parts.append(
        f'<div style="opacity:0.7;font-size:11px;margin-top:6px">{s.events} timeline events read '
        f"in {seconds(s.read_s)} · {_e(s.run_dir)}{made_by}</div></div>"
    )
    return "".join(parts)


def _heading(s: Summary) -> list[str]:
    """The title, the device badge with its statement, and the notes."""
    statement = device_statement(s)
    parts = [
        f'<div style="font-weight:600;margin-bottom:4px">xprof summary — {_e(header(s))}</div>'
    ]
    badge_color = ORANGE if s.device.kind in ("CPU", "unknown") else "#2ca02c"
    parts.append(
        f'<div style="margin:4px 0"><span style="background:{badge_color};color:#fff;'
        f'border-radius:4px;padding:1px 7px;font-weight:600">{_e(s.device.kind)}</span> '
        f"{_e(statement)}</div>"
    )
    for note in notes_of(s):
        if note.text == statement:
            continue
        color = _LEVEL_COLOR.get(note.level, BLUE)
        parts.append(
            f'<div style="border-left:4px solid {color};padding:2px 8px;margin:3px 0">'
            f"<b>{_e(note.level)}</b> {prose(note.text)}</div>"
        )
    return parts


def _labels(s: Summary) -> list[str]:
    """The labelled blocks as an indented tree, at most :data:`HTML_LABEL_ROWS` rows."""
    if not s.labels:
        return []
    source = {"trace": "from the timeline", "metadata": "from the magic's timers"}.get(
        s.label_source, ""
    )
    parts = [f'<div style="{HEADING}">Labelled blocks — host time {_e(source)}</div>']
    rows = []
    peaks = any(row.peak_bytes is not None for row in s.labels)
    for row in s.labels[:HTML_LABEL_ROWS]:
        pad = 14 * (len(row.path) - 1)
        name = f'<span style="padding-left:{pad}px">{_e(label_name(row))}</span>'
        compiles = "" if not row.compiles else f"{row.compiles} ({seconds(row.compile_s)})"
        cells = [name, seconds(row.total_s), seconds(row.mean_s), str(row.count)]
        cells += [_bar(row.share), compiles]
        if peaks:
            cells.append(data_size(row.peak_bytes) if row.peak_bytes is not None else "")
        rows.append(cells)
    heads = ["block", "total", "mean", "runs", "share of cell", "compiles"]
    parts.append(table([*heads, "peak memory"] if peaks else heads, rows, {1, 2, 3, 6}))
    if len(s.labels) > HTML_LABEL_ROWS:
        parts.append(f"<div>… {len(s.labels) - HTML_LABEL_ROWS} more blocks</div>")
    return parts


def _memory(s: Summary) -> list[str]:
    """The memory section: the same lines as the text's, one to a row."""
    return [f"<div>{_e(line.strip())}</div>" for line in memory_lines(s)[2:]]


def _device(s: Summary) -> list[str]:
    """How busy the device (or the CPU client) and each group of host threads were."""
    parts: list[str] = []
    d = s.device
    if d.busy_s is not None and d.window_s:
        what = "XLA ops were running on the CPU client" if d.on_cpu else "Device busy"
        if not d.on_cpu and len(d.devices) > 1:
            what = f"The {len(d.devices)} devices busy, on average each"
        parts.append(
            f"<div>{_e(what)}: {seconds(d.busy_s)} of the {seconds(d.window_s)} window "
            f"({percent(d.busy_share)})</div>"
        )
    if d.devices:
        parts.append(
            table(
                ["device", "busy", "share", "idle", "copying"],
                [
                    [
                        _e(x.name),
                        seconds(x.busy_s),
                        percent(x.share),
                        percent(1 - x.share),
                        seconds(x.copy_s) if x.copy_s is not None else NONE,
                    ]
                    for x in d.devices
                ],
                {1, 2, 3, 4},
            )
        )
    if d.threads:
        parts.append(
            table(
                ["threads", "count", "busy (thread time)", "share of window, per thread", "role"],
                [
                    [
                        _e(g.name),
                        str(g.threads),
                        seconds(g.busy_s),
                        percent(per_thread(g)),
                        _e(thread_role(g, get_vocabulary(s.backend))),
                    ]
                    for g in d.threads
                ],
                {1, 2, 3},
            )
        )
    return parts


def _compile_sites(s: Summary) -> list[str]:
    """The blocks that compiled, the first 20 (nothing if none did)."""
    if not s.compiles.sites:
        return []
    rows = [
        [
            _e(" › ".join(x.path)),
            str(x.compiles),
            seconds(x.total_s),
            f"{x.compiled_runs} of {x.runs}",
            "<b>recompiled</b>" if x.recompiled and not x.warm_up else "",
        ]
        for x in s.compiles.sites[:20]
    ]
    head = ["compiled inside", "compiles", "time", "runs that compiled", ""]
    return [table(head, rows, {1, 2, 3})]


def _ops(s: Summary) -> list[str]:
    """One table per kind of operation (host, device, compile), by self time."""
    parts = []
    for title, ops in op_sections(s):
        parts.append(f'<div style="{HEADING}">{_e(title)}</div>')
        parts.append(
            table(
                ["operation", "kind", "count", "self time", "share"],
                [
                    [
                        _e(op.name),
                        _e(op.category),
                        str(op.count),
                        seconds(op.self_s),
                        percent(op.share),
                    ]
                    for op in ops
                ],
                {2, 3, 4},
            )
        )
    return parts
