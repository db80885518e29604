"""What a person sees under a cell, measured in the browser: for the browser tests.

Each check reads the page the way Chromium laid it out (Playwright's ``evaluate``), so
that a test fails on what the user would see: a summary clipped inside a scroll box,
chart labels drawn over each other, a timeline opened on the wrong steps, XProf's menu
beside the tool, a spinner that never stops.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from xprof_magic._viewer.app.inline import BUSY_SELECTOR

__all__ = [
    "busy",
    "chart_boxes",
    "clipped",
    "controls",
    "first_thread",
    "moved",
    "nav_shown",
    "one_line",
    "overlapping",
    "visible_range",
]

_CLIPPED = """(el) => {
  const out = [];
  const stop = '.jp-OutputArea, .output_area, .output_subarea, .output-area';
  // Up through shadow roots too: marimo draws a widget in one.
  const up = (e) => e.parentElement ||
    (e.getRootNode() instanceof ShadowRoot ? e.getRootNode().host : null);
  for (let e = el; e && e !== document.documentElement; e = up(e)) {
    const s = getComputedStyle(e);
    for (const [axis, over, size, client] of [
        ['y', s.overflowY, e.scrollHeight, e.clientHeight],
        ['x', s.overflowX, e.scrollWidth, e.clientWidth]]) {
      if (over !== 'visible' && size > client + 1) {
        out.push(`${e.tagName.toLowerCase()}.${e.className}: overflow-${axis} ${over}, ` +
                 `${size} px in ${client}`);
      }
    }
    if (e.matches(stop) || e === document.body) break;
  }
  return out;
}"""


def clipped(element: Any) -> list[str]:
    """Every box from ``element`` up to its output area (JupyterLab's, Notebook 6's,
    marimo's) that hides part of its content (overflow not visible, content larger than the
    box): empty when the user sees it whole, without scrolling inside it."""
    found: list[str] = element.evaluate(_CLIPPED)
    return found


_BOXES = """(svg) => Array.from(svg.querySelectorAll('text')).map(t => {
  const b = t.getBoundingClientRect();
  return {text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height};
})"""


def chart_boxes(svg: Any) -> list[dict[str, Any]]:
    """The boxes Chromium drew for every label of a chart, in page pixels."""
    boxes: list[dict[str, Any]] = svg.evaluate(_BOXES)
    return boxes


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of labels whose drawn boxes meet."""
    out = []
    for a, b in itertools.combinations(boxes, 2):
        apart = (
            a["x"] + a["w"] <= b["x"]
            or b["x"] + b["w"] <= a["x"]
            or a["y"] + a["h"] <= b["y"]
            or b["y"] + b["h"] <= a["y"]
        )
        if not apart:
            out.append((a["text"], b["text"]))
    return out


_RANGE = """() => {
  const el = document.querySelector('tf-trace-viewer');
  const view = el && el._traceViewer && el._traceViewer.model && el._traceViewer.trackView;
  return view && !el._isLoading ? el._trackViewRange(view) : null;
}"""


RECORD_SHOWN_RANGES = """(() => {
  if (!location.pathname.endsWith('trace_viewer_index.html')) return;
  window.xprofShownRanges = [];
  const tick = () => {
    const el = document.querySelector('tf-trace-viewer');
    const tv = el && el._traceViewer;
    const view = tv && tv.model && tv.trackView;
    if (view && getComputedStyle(tv).visibility !== 'hidden') {
      const r = el._trackViewRange(view);
      const seen = window.xprofShownRanges, last = seen[seen.length - 1];
      if (r && (!last || last.min !== r.min || last.max !== r.max)) seen.push(r);
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();"""
"""A script for ``BrowserContext.add_init_script``: each range the trace viewer's timeline
shows while a person can see it (not hidden), at every frame the browser draws."""


def shown_ranges(frame: Any) -> list[dict[str, float]]:
    """The ranges, ``{min, max}`` in ms, the trace viewer's timeline has shown a person, in
    order (:data:`RECORD_SHOWN_RANGES`)."""
    seen: list[dict[str, float]] = frame.evaluate("() => window.xprofShownRanges || []")
    return seen


def visible_range(frame: Any) -> dict[str, float] | None:
    """The trace viewer's visible range, ``{min, max}`` in milliseconds on the timeline (None
    before it has its data and has drawn them)."""
    found: dict[str, float] | None = frame.evaluate(_RANGE)
    return found


_THREADS = """() => Array.from(document.querySelectorAll('tr-ui-b-heading'))
  .filter(h => h.getBoundingClientRect().height > 0 && h.textContent.trim())
  .sort((a, b) => a.getBoundingClientRect().y - b.getBoundingClientRect().y)
  .map(h => h.textContent.replace(/[▾▸]/g, '').trim())"""


def first_thread(frame: Any) -> str | None:
    """The name of the first thread row the trace viewer draws (None before it has)."""
    names: list[str] = frame.evaluate(_THREADS)
    return names[0] if names else None


_NAV = """() => Array.from(document.querySelectorAll(
    'main-page > mat-toolbar, main-page mat-sidenav.new-nav-sidenav, ' +
    'rack-navigation-drawer, .mat-drawer-backdrop.mat-drawer-shown'))
  .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; })
  .map(e => e.tagName.toLowerCase() + '.' + e.className)"""


def nav_shown(frame: Any) -> list[str]:
    """XProf's toolbar, navigation drawer or menu backdrop, where the page shows one."""
    found: list[str] = frame.evaluate(_NAV)
    return found


_BUSY = """(selector) => Array.from(document.querySelectorAll(selector))
  .filter(e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden';
  })
  .map(e => e.tagName.toLowerCase() + '.' + e.className)"""


def busy(frame: Any) -> list[str]:
    """XProf's loading indicators the page shows now (:data:`BUSY_SELECTOR`)."""
    found: list[str] = frame.evaluate(_BUSY, BUSY_SELECTOR)
    return found


def steps_missed(seen: dict[str, float] | None, summary: Any) -> str:
    """Why the trace viewer's visible range ``seen`` (ms) does not open on the steps the
    verdict is about ("" when it does): it must hold every steady step
    (:meth:`Diagnosis.steady`: after the compiling warm-up and any step unlike the others
    before them), and leave out most of the step left out just before them."""
    steps = summary.steps
    if steps is None or not steps.starts_s:
        return "the summary has no step times"
    if seen is None:
        return "the trace viewer has not drawn its data"
    d = summary.diagnosis
    steady = d.steady() if len(d.breakdown.steps) == len(steps.starts_s) else ()
    first, last = (steady[0], steady[-1]) if steady else (d.warm_up, len(steps.starts_s) - 1)
    start = steps.starts_s[first] * 1e3
    # Where the host ran ahead of the device, the first steady step's host part (its
    # labels) began before the step: the window holds it (verdict_window).
    own = steps.host_starts_s[first] * 1e3 if len(steps.host_starts_s) > first else start
    end = (steps.starts_s[last] + steps.durations_s[last]) * 1e3
    problems = []
    if not seen["min"] <= min(start, own):
        problems.append(f"it starts at {seen['min']:.1f} ms, after step {first} ({start:.1f})")
    if not seen["max"] >= end:
        problems.append(f"it ends at {seen['max']:.1f} ms, before step {last}'s end ({end:.1f})")
    if first:
        middle = (steps.starts_s[first - 1] + steps.durations_s[first - 1] / 2) * 1e3
        # Most of the step left out stays out, unless the steady steps' own host part ran
        # during it (the device still on that step's work).
        margin = 0.1 * (seen["max"] - seen["min"])  # the viewer's own, 3% each side
        if seen["min"] < min(middle, own - margin):
            problems.append(f"it shows most of step {first - 1}, left out (from {seen['min']:.1f})")
    return "; ".join(problems)


_CONTROLS = """(w) => {
  const o = w.getBoundingClientRect();
  const name = (e) => [...e.classList].find((c) => CONTROLS.includes(c));
  return [...w.querySelectorAll(CONTROLS.map((c) => '.' + c).join(', '))]
    .map((e) => [name(e), e.getBoundingClientRect()])
    .filter(([, b]) => b.width > 0)
    .map(([n, b]) => [n, Math.round(b.x - o.x), Math.round(b.y - o.y),
                      Math.round(b.width), Math.round(b.height)]);
}"""
CONTROLS = ("xprof-runs", "xprof-tools", "xprof-hosts", "xprof-refresh", "xprof-open")


def controls(widget: Any) -> list[tuple[str, int, int, int, int]]:
    """Where the controls row of a widget (or marimo view) puts each of its controls:
    ``(class, x, y, width, height)``, in px from the widget's corner, the hidden ones left
    out."""
    script = _CONTROLS.replace("CONTROLS", json.dumps(list(CONTROLS)))
    return [tuple(c) for c in widget.evaluate(script)]


def one_line(row: list[tuple[str, int, int, int, int]]) -> bool:
    """Whether the controls of :func:`controls` sit side by side on one line."""
    return bool(row) and max(y for _, _, y, _, _ in row) < min(y + h for _, _, y, _, h in row)


def moved(before: list[Any], after: list[Any], slack: int = 2) -> list[str]:
    """The controls whose place or width differs between two :func:`controls` looks."""
    if [c[0] for c in before] != [c[0] for c in after]:
        return [f"{[c[0] for c in before]} became {[c[0] for c in after]}"]
    return [
        f"{a[0]}: {a[1:]} became {b[1:]}"
        for a, b in zip(before, after, strict=True)
        if any(abs(x - y) > slack for x, y in zip(a[1:], b[1:], strict=True))
    ]


_BROKEN_WORDS = """(s) => {
  const out = [];
  for (const th of s.querySelectorAll('th')) {
    if (!th.getClientRects().length) continue;
    const text = th.firstChild;
    if (!text || text.nodeType !== Node.TEXT_NODE) continue;
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(text.data))) {
      const r = document.createRange();
      r.setStart(text, m.index);
      r.setEnd(text, m.index + m[0].length);
      const tops = new Set([...r.getClientRects()].map((b) => Math.round(b.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
  return out;
}"""


def broken_headers(summary: Any) -> list[str]:
    """The words of the summary's table headers drawn on two lines or more (broken inside
    the word, as "call s" for "calls")."""
    found: list[str] = summary.evaluate(_BROKEN_WORDS)
    return found


def check_summary(panel: Any) -> None:
    """The summary under the cell (``panel`` holds its ``.xprof-magic-summary``) shows whole,
    no table header breaks inside a word, and no two labels of its charts meet."""
    summary = panel.locator(".xprof-magic-summary").first
    summary.wait_for(state="visible", timeout=90_000)
    assert clipped(summary) == [], clipped(summary)
    assert broken_headers(summary) == [], broken_headers(summary)
    charts = summary.locator("svg")
    assert charts.count() >= 1
    for i in range(charts.count()):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        assert overlapping(chart_boxes(chart)) == [], (i, overlapping(chart_boxes(chart)))
