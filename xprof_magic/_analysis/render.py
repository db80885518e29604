"""A summary as plain text, as static HTML with one inline SVG chart, and two side by side.

The HTML carries no script, no external resource and no ``<style>`` block (inline styles
only), so it shows the same in a live notebook, a saved one opened without a kernel, and
viewers that strip scripts. Every string that came from the user's cell is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from xprof_magic._analysis.model import CompareRow, LabelRow, OpRow, StepStats, Summary, Timed

__all__ = [
    "chart_svg",
    "compare_html",
    "compare_text",
    "fmt_bytes",
    "fmt_s",
    "render_html",
    "render_text",
]

TEXT_LABEL_ROWS = 25
HTML_LABEL_ROWS = 60
TEXT_OPS = 6
_BLUE, _ORANGE, _GREY = "#4e79a7", "#e8833a", "rgba(127,127,127,0.35)"
_LEVEL_COLOR = {"error": "#d62728", "warning": _ORANGE, "info": _BLUE}
_LEVEL_MARK = {"error": "✖", "warning": "!", "info": "·"}
_KIND_TAG = {"trace": " [xp.Trace]", "step": " [step]", "label": ""}
_BOX = (
    "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;"
    "line-height:1.4;max-width:980px;border:1px solid rgba(127,127,127,0.35);"
    "border-radius:6px;padding:10px 14px;"
)
_TABLE = "border-collapse:collapse;margin:4px 0 10px 0;font-size:12px;"
_TH = "text-align:left;padding:2px 8px;border-bottom:1px solid rgba(127,127,127,0.35);"
_TD = "padding:1px 8px;vertical-align:top;"
_NUM = _TD + "text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;"
_H = "margin:10px 0 2px 0;font-size:13px;font-weight:600;"


def fmt_s(value: float | None) -> str:
    """Seconds in the unit a person reads fastest: ``1.23 s``, ``45.6 ms``, ``789 µs``."""
    if value is None:
        return "–"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f} s"
    if magnitude >= 1:
        return f"{value:.2f} s"
    if magnitude >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    if magnitude == 0:
        return "0 s"
    return f"{value * 1e6:.0f} µs"


def fmt_bytes(value: float | None) -> str:
    """Bytes as B, KB, MB or GB (powers of 1000)."""
    if value is None:
        return "–"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _pct(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 100:.0f}%" if value >= 0.1 else f"{value * 100:.1f}%"


def _timed(t: Timed | None) -> str:
    if t is None:
        return "–"
    text = f"{t.count} × {fmt_s(t.total_s)}"
    return f"{text}, {fmt_bytes(t.bytes)}" if t.bytes is not None else text


def _steps_line(steps: StepStats) -> str:
    where = "the timeline" if steps.source == "trace" else "the magic's step timer"
    first = f"first {fmt_s(steps.first_s)}"
    if 0 in steps.compiling:
        first += " (compiled)"
    text = f"{steps.count} × '{steps.name}' (from {where}): {first}"
    if steps.rest_median_s is not None:
        text += (
            f"; the other {steps.count - 1}: min {fmt_s(steps.rest_min_s)} · median "
            f"{fmt_s(steps.rest_median_s)} · max {fmt_s(steps.rest_max_s)}"
        )
    later = [i for i in steps.compiling if i > 0]
    if later:
        text += f"; {len(later)} later step(s) compiled"
    return text


def _runtime_parts(s: Summary) -> list[tuple[str, str]]:
    c = s.compiles
    parts: list[tuple[str, str]] = []
    if c.count is not None:
        text = f"{c.count} × {fmt_s(c.total_s)}"
        if c.cache_hits is not None:
            text += f" ({c.cache_hits} cache hits)"
        parts.append(("compilations", text))
    elif c.trace_count is not None:
        parts.append(("compilations (timeline)", f"{c.trace_count} × {fmt_s(c.trace_s)}"))
    parts.append(("executions", _timed(s.executions)))
    parts.append(("transfers to device", _timed(s.to_device)))
    parts.append(("transfers from device", _timed(s.from_device)))
    return parts


def _header(s: Summary) -> str:
    status = s.status if s.error is None else f"{s.status}: {s.error}"
    bits = [f"run {s.run}", status]
    if s.wall_s is not None:
        bits.append(f"wall {fmt_s(s.wall_s)}")
    bits.append(f"device {s.device.kind}")
    if s.start:
        bits.append(s.start[:19])
    return " · ".join(bits)


def _label_name(row: LabelRow) -> str:
    thread = f"[{row.thread}] " if row.thread and len(row.path) == 1 else ""
    return f"{thread}{row.path[-1]}{_KIND_TAG.get(row.kind, '')}"


def render_text(summary: Summary) -> str:
    """The ``text/plain`` form: the headlines first, then one short section per question."""
    s = summary
    out = [f"xprof summary — {_header(s)}"]
    out.extend(f"  {_LEVEL_MARK.get(n.level, '·')} {n.text}" for n in s.notes)
    if s.labels:
        source = {"trace": "the timeline", "metadata": "the magic's timers"}.get(
            s.label_source, s.label_source
        )
        cell = f"the {fmt_s(s.wall_s)} cell" if s.wall_s else "the capture"
        out += ["", f"Labels — host time from {source}; share of {cell}"]
        out.append(f"  {'total':>9} {'mean':>9} {'runs':>6} {'share':>6} {'compiles':>8}  block")
        for row in s.labels[:TEXT_LABEL_ROWS]:
            compiles = "" if row.compiles is None else str(row.compiles or "")
            indent = "  " * (len(row.path) - 1)
            out.append(
                f"  {fmt_s(row.total_s):>9} {fmt_s(row.mean_s):>9} {row.count:>6} "
                f"{_pct(row.share):>6} {compiles:>8}  {indent}{_label_name(row)}"
            )
        if len(s.labels) > TEXT_LABEL_ROWS:
            out.append(f"  … {len(s.labels) - TEXT_LABEL_ROWS} more blocks")
    if s.steps:
        out += ["", f"Steps: {_steps_line(s.steps)}"]
    d = s.device
    out += ["", f"Device {d.kind} and host threads:"]
    if d.busy_s is not None and d.window_s:
        what = "XLA ops ran (any CPU client thread)" if d.on_cpu else "the device was busy"
        out.append(
            f"  {what} {fmt_s(d.busy_s)} of the {fmt_s(d.window_s)} window ({_pct(d.busy_share)})"
            + ("" if d.on_cpu else f"; idle {_pct(1 - (d.busy_share or 0))}")
        )
    for dev in d.devices[:8]:
        out.append(f"  {dev.name}: busy {fmt_s(dev.busy_s)} ({_pct(dev.share)})")
    if d.threads:
        out.append("  host threads (busy thread time, share of the window):")
        for g in d.threads:
            out.append(f"    {g.name} ×{g.threads}: {fmt_s(g.busy_s)} ({_pct(g.share)}) — {g.role}")
    out += ["", "torch_xla, this cell only:"]
    out.extend(f"  {name}: {value}" for name, value in _runtime_parts(s))
    if s.compiles.sites:
        out.append("  compiled inside (innermost block):")
        for site in s.compiles.sites[:10]:
            flag = " — recompiled" if site.recompiled and not site.warm_up else ""
            out.append(
                f"    {' › '.join(site.path)}: {site.compiles} × {fmt_s(site.total_s)} in "
                f"{site.compiled_runs} of {site.runs} runs{flag}"
            )
    if s.compiles.outside_labels:
        out.append(f"  {s.compiles.outside_labels} compilation(s) outside any labelled block")
    if s.fallbacks:
        out += ["", "Ops that fell back to the CPU (torch_xla aten:: counters):"]
        out.extend(f"  {f.op} ×{f.count} — {f.hint}" for f in s.fallbacks)
    for title, ops in _op_sections(s):
        out += ["", f"{title} (self time):"]
        out.extend(
            f"  {fmt_s(op.self_s):>9} {_pct(op.share):>6} {op.count:>6}×  {op.name}"
            + (f" [{op.category}]" if op.category not in ("XLA op", "compile") else "")
            for op in ops[:TEXT_OPS]
        )
    if s.missing:
        out += ["", "Missing from this summary:"]
        out.extend(f"  - {m}" for m in s.missing)
    out += ["", f"({s.events} timeline events read in {fmt_s(s.read_s)}; run folder {s.run_dir})"]
    return "\n".join(out)


def _op_sections(s: Summary) -> list[tuple[str, tuple[OpRow, ...]]]:
    device = "XLA ops on the CPU client" if s.device.on_cpu else "XLA ops on the device"
    return [
        (title, ops)
        for title, ops in (
            ("Top host operations", s.host_ops),
            (f"Top {device}", s.device_ops),
            ("Top compilation work", s.compile_ops),
        )
        if ops
    ]


# --- HTML -----------------------------------------------------------------------------


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int]) -> str:
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


def _bar(share: float | None) -> str:
    width = max(0.0, min(1.0, share or 0.0)) * 80
    return (
        f'<span style="display:inline-block;width:80px;height:8px;background:{_GREY};'
        f'vertical-align:middle;margin-right:6px"><span style="display:block;height:8px;'
        f'width:{width:.1f}px;background:{_BLUE}"></span></span>{_pct(share)}'
    )


def render_html(summary: Summary) -> str:
    """Static, self-contained HTML (inline styles and SVG, no script) of the summary."""
    s = summary
    parts = [f'<div class="xprof-magic-summary" style="{_BOX}">']
    parts.append(
        f'<div style="font-weight:600;margin-bottom:4px">xprof summary — {_e(_header(s))}</div>'
    )
    badge_color = _ORANGE if s.device.kind != "TPU" else "#2ca02c"
    parts.append(
        f'<div style="margin:4px 0"><span style="background:{badge_color};color:#fff;'
        f'border-radius:4px;padding:1px 7px;font-weight:600">{_e(s.device.kind)}</span> '
        f"{_e(s.device.statement)}</div>"
    )
    for note in s.notes:
        if note.text == s.device.statement:
            continue
        color = _LEVEL_COLOR.get(note.level, _BLUE)
        parts.append(
            f'<div style="border-left:4px solid {color};padding:2px 8px;margin:3px 0">'
            f"<b>{_e(note.level)}</b> {_e(note.text)}</div>"
        )
    chart = chart_svg(s)
    if chart:
        parts.append(f'<div style="margin:6px 0">{chart}</div>')
    if s.steps:
        parts.append(f'<div style="{_H}">Steps</div><div>{_e(_steps_line(s.steps))}</div>')
    if s.labels:
        source = {"trace": "from the timeline", "metadata": "from the magic's timers"}.get(
            s.label_source, ""
        )
        parts.append(f'<div style="{_H}">Labelled blocks — host time {_e(source)}</div>')
        rows = []
        for row in s.labels[:HTML_LABEL_ROWS]:
            pad = 14 * (len(row.path) - 1)
            name = f'<span style="padding-left:{pad}px">{_e(_label_name(row))}</span>'
            compiles = "" if not row.compiles else f"{row.compiles} ({fmt_s(row.compile_s)})"
            rows.append(
                [
                    name,
                    fmt_s(row.total_s),
                    fmt_s(row.mean_s),
                    str(row.count),
                    _bar(row.share),
                    compiles,
                ]
            )
        parts.append(
            _table(["block", "total", "mean", "runs", "share of cell", "compiles"], rows, {1, 2, 3})
        )
        if len(s.labels) > HTML_LABEL_ROWS:
            parts.append(f"<div>… {len(s.labels) - HTML_LABEL_ROWS} more blocks</div>")
    parts.append(f'<div style="{_H}">Device and host threads</div>')
    d = s.device
    if d.busy_s is not None and d.window_s:
        what = "XLA ops were running on the CPU client" if d.on_cpu else "Device busy"
        parts.append(
            f"<div>{_e(what)}: {fmt_s(d.busy_s)} of the {fmt_s(d.window_s)} window "
            f"({_pct(d.busy_share)})</div>"
        )
    if d.devices:
        parts.append(
            _table(
                ["device", "busy", "share", "idle"],
                [
                    [_e(x.name), fmt_s(x.busy_s), _pct(x.share), _pct(1 - x.share)]
                    for x in d.devices
                ],
                {1, 2, 3},
            )
        )
    if d.threads:
        parts.append(
            _table(
                ["threads", "count", "busy (thread time)", "share of window", "role"],
                [
                    [_e(g.name), str(g.threads), fmt_s(g.busy_s), _pct(g.share), _e(g.role)]
                    for g in d.threads
                ],
                {1, 2, 3},
            )
        )
    parts.append(f'<div style="{_H}">torch_xla, this cell only</div>')
    parts.append(_table(["", ""], [[_e(k), _e(v)] for k, v in _runtime_parts(s)], set()))
    if s.compiles.sites:
        parts.append(
            _table(
                ["compiled inside", "compiles", "time", "runs that compiled", ""],
                [
                    [
                        _e(" › ".join(x.path)),
                        str(x.compiles),
                        fmt_s(x.total_s),
                        f"{x.compiled_runs} of {x.runs}",
                        "<b>recompiled</b>" if x.recompiled and not x.warm_up else "",
                    ]
                    for x in s.compiles.sites[:20]
                ],
                {1, 2, 3},
            )
        )
    if s.fallbacks:
        parts.append(f'<div style="{_H}">Ops that fell back to the CPU</div>')
        parts.append(
            _table(
                ["op", "calls", "hint"],
                [[_e(f.op), str(f.count), _e(f.hint)] for f in s.fallbacks],
                {1},
            )
        )
    for title, ops in _op_sections(s):
        parts.append(f'<div style="{_H}">{_e(title)} (self time)</div>')
        parts.append(
            _table(
                ["operation", "kind", "count", "self time", "share"],
                [
                    [_e(op.name), _e(op.category), str(op.count), fmt_s(op.self_s), _pct(op.share)]
                    for op in ops
                ],
                {2, 3, 4},
            )
        )
    if s.missing:
        items = "".join(f"<li>{_e(m)}</li>" for m in s.missing)
        parts.append(f'<div style="{_H}">Missing from this summary</div>')
        parts.append(f'<ul style="margin:2px 0">{items}</ul>')
    parts.append(
        f'<div style="opacity:0.7;font-size:11px;margin-top:6px">{s.events} timeline events read '
        f"in {fmt_s(s.read_s)} · {_e(s.run_dir)}</div></div>"
    )
    return "".join(parts)


# --- the chart --------------------------------------------------------------------------


def chart_svg(summary: Summary, width: int = 560, height: int = 150) -> str:
    """Step times as bars (compiling steps orange), else the largest labels; "" if neither."""
    if summary.steps and summary.steps.count >= 2:
        return _steps_svg(summary.steps, width, height)
    rows = [r for r in summary.labels if len(r.path) <= 2 and not r.thread]
    if rows:
        return _labels_svg(sorted(rows, key=lambda r: -r.total_s)[:8], width)
    return ""


def _steps_svg(steps: StepStats, width: int, height: int) -> str:
    left, top, bottom = 56, 16, 18
    plot_w, plot_h = width - left - 8, height - top - bottom
    values = list(steps.durations_s)
    compiling = set(steps.compiling)
    buckets = max(1, -(-len(values) // 240))
    bars: list[tuple[float, bool]] = []
    for i in range(0, len(values), buckets):
        chunk = range(i, min(i + buckets, len(values)))
        bars.append((max(values[j] for j in chunk), any(j in compiling for j in chunk)))
    rest = values[1:] or values
    ymax = max(values)
    clipped = ymax > 3 * max(rest)
    if clipped:
        ymax = max(rest) * 1.25
    step_w = plot_w / len(bars)
    gap = 1.0 if step_w > 3 else 0.0
    shapes = []
    for i, (value, hot) in enumerate(bars):
        h = min(value, ymax) / ymax * plot_h if ymax > 0 else 0
        x = left + i * step_w
        color = _ORANGE if hot or (i == 0 and steps.compiling == ()) else _BLUE
        shapes.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(step_w - gap, 0.6):.1f}" '
            f'height="{h:.1f}" fill="{color}">'
            f"<title>step {i * buckets}: {fmt_s(value)}</title></rect>"
        )
        if clipped and value > ymax:
            shapes.append(
                f'<text x="{x + 2:.1f}" y="{top - 4}" font-size="10" fill="currentColor">'
                f"↑ {fmt_s(value)}</text>"
            )
    if steps.rest_median_s is not None and ymax > 0:
        y = top + plot_h - min(steps.rest_median_s, ymax) / ymax * plot_h
        shapes.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" stroke-dasharray="4 3" stroke-opacity="0.6"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="10" text-anchor="end" '
            f'fill="currentColor">{fmt_s(steps.rest_median_s)}</text>'
        )
    axis = (
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="{_GREY}"/>'
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        f'stroke="{_GREY}"/>'
        f'<text x="{left - 4}" y="{top + 8}" font-size="10" text-anchor="end" '
        f'fill="currentColor">{fmt_s(ymax)}</text>'
        f'<text x="{left}" y="{height - 4}" font-size="10" fill="currentColor">'
        f"{_e(steps.name)} times, {steps.count} steps (orange: compiled; dashed: median of "
        "the rest)</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step times">'
        f"{axis}{''.join(shapes)}</svg>"
    )


def _labels_svg(rows: list[LabelRow], width: int) -> str:
    row_h, name_w, top = 18, 200, 4
    height = top + row_h * len(rows) + 18
    biggest = max(r.total_s for r in rows) or 1.0
    plot_w = width - name_w - 80
    shapes = []
    for i, r in enumerate(rows):
        y = top + i * row_h
        name = " › ".join(r.path)
        short = name if len(name) <= 32 else name[:31] + "…"
        w = r.total_s / biggest * plot_w
        shapes.append(
            f'<text x="{name_w - 6}" y="{y + 12}" font-size="11" text-anchor="end" '
            f'fill="currentColor">{_e(short)}<title>{_e(name)}</title></text>'
            f'<rect x="{name_w}" y="{y + 3}" width="{max(w, 0.5):.1f}" height="{row_h - 6}" '
            f'fill="{_BLUE}"/>'
            f'<text x="{name_w + w + 4:.1f}" y="{y + 12}" font-size="11" '
            f'fill="currentColor">{fmt_s(r.total_s)}</text>'
        )
    caption = (
        f'<text x="{name_w}" y="{height - 4}" font-size="10" fill="currentColor">'
        "host time of the largest labelled blocks</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="label times">'
        f"{''.join(shapes)}{caption}</svg>"
    )


# --- comparison -------------------------------------------------------------------------


def _cell(value: float | str | None, unit: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if unit == "s":
        return fmt_s(value)
    return f"{value:g}"


def _delta(row: CompareRow) -> str:
    a, b = row.a, row.b
    if isinstance(a, str) or isinstance(b, str):
        return "" if a == b else "differs"
    if a is None or b is None:
        return "only in A" if b is None else "only in B"
    diff = b - a
    if diff == 0:
        return "="
    text = fmt_s(diff) if row.unit == "s" else f"{diff:+g}"
    if row.unit == "s" and not text.startswith("-"):
        text = "+" + text
    if a > 0 and row.unit == "s":
        text += f" ({b / a:.2g}×)"
    return text


def _indented(row: CompareRow) -> str:
    return "  " * max(0, len(row.path) - 1) + row.name


def compare_text(a: str, b: str, rows: Sequence[CompareRow], notes: Sequence[str]) -> str:
    """Two runs side by side as plain text, grouped by section."""
    out = [f"xprof compare — A: {a}   B: {b}"]
    out.extend(f"  ! {n}" for n in notes)
    width = min(max([len(_indented(r)) for r in rows] + [10]), 48)
    section = ""
    for row in rows:
        if row.section != section:
            section = row.section
            out += ["", f"{section}", f"  {'':<{width}} {'A':>12} {'B':>12}  Δ (B − A)"]
        name = _indented(row)
        name = name if len(name) <= width else name[: width - 1] + "…"
        out.append(
            f"  {name:<{width}} {_cell(row.a, row.unit):>12} {_cell(row.b, row.unit):>12}  "
            f"{_delta(row)}"
        )
    return "\n".join(out)


def compare_html(a: str, b: str, rows: Sequence[CompareRow], notes: Sequence[str]) -> str:
    """Two runs side by side as static HTML."""
    parts = [f'<div class="xprof-magic-compare" style="{_BOX}">']
    parts.append(f'<div style="font-weight:600">xprof compare — A: {_e(a)} · B: {_e(b)}</div>')
    for note in notes:
        parts.append(
            f'<div style="border-left:4px solid {_ORANGE};padding:2px 8px;margin:3px 0">'
            f"{_e(note)}</div>"
        )
    section = ""
    table_rows: list[list[str]] = []

    def flush() -> None:
        if table_rows:
            parts.append(f'<div style="{_H}">{_e(section)}</div>')
            parts.append(_table(["", f"A: {a}", f"B: {b}", "Δ (B − A)"], table_rows, {1, 2, 3}))
            table_rows.clear()

    for row in rows:
        if row.section != section:
            flush()
            section = row.section
        pad = 14 * max(0, len(row.path) - 1)
        table_rows.append(
            [
                f'<span style="padding-left:{pad}px">{_e(row.name)}</span>',
                _e(_cell(row.a, row.unit)),
                _e(_cell(row.b, row.unit)),
                _e(_delta(row)),
            ]
        )
    flush()
    parts.append("</div>")
    return "".join(parts)
