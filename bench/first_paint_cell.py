"""``python -m bench first-paint --after-cell``: a training cell, a read, then its timeline.

What a user does: run a ``%%xprof`` training cell (the MLP of :mod:`bench.captures`, sized
to a ~30 MB or ~100 MB capture), read its summary for :data:`READ_S` seconds (``--read-s``),
then open the timeline (``%xprof view RUN``). A real JupyterLab and Debian's Chromium, one kernel
per repetition, each mode in a JupyterLab (so a viewer) of its own:

- ``ahead``: the viewer converts each run for the trace viewer as soon as it is committed
  (:mod:`xprof_magic._viewer.prepare.queue`), the default;
- ``no preview``: ``ahead`` without the preview of a large run's first events
  (:mod:`xprof_magic._viewer.prepare.preview`): the frame waits for the whole timeline;
- ``on demand``: ``XPROF_MAGIC_PREPARE=0``, XProf converts on the first request, as before;
- ``preview from 20 MB``: ``ahead`` with a 30 MB run previewed too (BENCHMARKS.md: it was
  not sooner, and it delayed the whole timeline);
- ``preview of 20k``: ``ahead`` with a large run's preview cut at 20,000 events, not 50,000.

A mode named twice runs twice, alternately with the others (``--modes ahead "on demand"
ahead "on demand"``), its figures pooled.

Times, on the browser's clock: the key press that runs the cell, the cell done (its prompt
numbered: summary and widget shown), the first paint of the timeline under that cell, the
key press of ``%xprof view`` and the first paint of that view (see :mod:`bench.first_paint`
for what a first paint is): of the preview where one is shown (its frame inside the page
said while the run is prepared), then of the whole timeline, with where the view's whole
timeline went (its page starting, its trace data answered) and whether the frame under the
cell, which the view's output scrolls away, loaded its timeline too. Then the next cell: a smaller
``%%xprof`` cell run as soon as the big one is done (while its conversion runs), against
the same cell once the machine is at rest (under 15% of the CPUs busy for a second).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import captures
from bench.paint import DATA_TIMING, PROBE

__all__ = ["measure", "report"]

READ_S = 5.0
NEXT_STEPS = 400
TIMEOUT_S = 600.0
MODES = {
    "ahead": {"XPROF_MAGIC_PREPARE": "1"},
    "no preview": {"XPROF_MAGIC_PREPARE": "1", "XPROF_MAGIC_PREPARE_PREVIEW_FROM_MB": "1e9"},
    "on demand": {"XPROF_MAGIC_PREPARE": "0"},
    "preview from 20 MB": {"XPROF_MAGIC_PREPARE": "1", "XPROF_MAGIC_PREPARE_PREVIEW_FROM_MB": "20"},
    "preview of 20k": {"XPROF_MAGIC_PREPARE": "1", "XPROF_MAGIC_PREPARE_PREVIEW_EVENTS": "20000"},
}

_WATCH_PROMPT = """
(index) => {
  const cell = document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell')[index];
  const prompt = cell.querySelector('.jp-InputPrompt');
  window.__done = window.__done || {};
  delete window.__done[index];
  const before = prompt.innerText;
  const seen = new MutationObserver(() => {
    const text = prompt.innerText;
    if (/\\[\\d+\\]/.test(text) && text !== before) {
      window.__done[index] = performance.timeOrigin + performance.now();
      seen.disconnect();
    }
  });
  seen.observe(prompt, {childList: true, subtree: true, characterData: true});
}
"""


def _cells(run: str, steps: int) -> list[str]:
    setup = (
        "%load_ext xprof_magic\nimport sys\n"
        f"sys.path.insert(0, {str(captures.ROOT)!r})\n"
        "from bench.captures import make_step"
    )
    big = f"%%xprof --name {run}\nstep = make_step()\nfor i in range({steps}):\n    step(i)"
    return [setup, big, f"%xprof view {run}"]


def _next_cells(rep: int) -> list[str]:
    def cell(name: str) -> str:
        return (
            f"%%xprof --name {name}\nstep = make_step()\nfor i in range({NEXT_STEPS}):\n    step(i)"
        )

    setup, big, _ = _cells(f"next-big-{rep}", captures.SIZES["30MB"])
    return [setup, big, cell(f"next-busy-{rep}"), cell(f"next-idle-{rep}")]


class _Notebook:
    """One notebook page: run a cell by its index, wait for it, find its frames' paints."""

    def __init__(self, context: Any, lab: Any, name: str) -> None:
        from tests._wait import wait_until

        self.wait_until = wait_until
        self.page = context.new_page()
        self.lab = lab
        self.page.goto(lab.notebook_url(name, workspace=Path(name).stem), timeout=120_000)
        self.cells = self.page.locator(".jp-NotebookPanel .jp-CodeCell")
        self.cells.first.wait_for(timeout=120_000)
        self.seen: set[Any] = set()
        self.wait_until(self._idle, 120, "the kernel to start", self.pause)

    def pause(self, seconds: float) -> None:
        self.page.wait_for_timeout(seconds * 1000)

    def now(self) -> float:
        return float(self.page.evaluate("performance.timeOrigin + performance.now()"))

    def _idle(self) -> bool:
        sessions = self.lab.api("GET", "/api/sessions")
        return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)

    def press(self, index: int) -> float:
        """Run cell ``index`` by its key press; the time of the press."""
        self.cells.nth(index).locator(".jp-InputPrompt").click()
        self.page.evaluate(_WATCH_PROMPT, index)
        pressed = self.now()
        self.page.keyboard.press("Shift+Enter")
        return pressed

    def done(self, index: int) -> float:
        """When cell ``index`` finished (its prompt numbered)."""

        def finished() -> Any:
            return self.page.evaluate(f"(window.__done || {{}})[{index}] || null")

        return float(self.wait_until(finished, TIMEOUT_S, f"cell {index} to finish", self.pause))

    def frame(self, index: int) -> Any:
        """The trace viewer frame under cell ``index`` (a new one)."""
        cell = self.cells.nth(index)

        def found() -> Any:
            names = cell.evaluate(
                "c => Array.from(c.querySelectorAll('[data-xprof-frame]'))"
                ".map(e => 'xprof-' + e.dataset.xprofFrame)"
            )
            for frame in self.page.frames:
                shows = frame.name in names and "trace_viewer_index.html" in frame.url
                if shows and frame not in self.seen:
                    return frame
            return None

        frame = self.wait_until(
            found, TIMEOUT_S, f"the trace viewer under cell {index}", self.pause
        )
        self.seen.add(frame)
        cell.locator("iframe.xprof-outer").scroll_into_view_if_needed()
        return frame

    def painted(self, frame: Any, own: bool = False) -> float | None:
        """When a timeline in ``frame`` was first painted (its own, or unless ``own`` the
        preview's in the frame it holds), None while none is."""
        times = []
        for one in [frame] if own else [frame, *frame.child_frames]:
            try:
                found = one.evaluate("window.__firstPaint || null")
            except Exception:  # the preparing page reloading into XProf's
                continue
            if found and found.get("paint"):
                times.append(float(found["paint"]))
        return min(times) if times else None

    def paint(self, frame: Any, own: bool = False) -> float:
        """Wait for ``frame``'s first paint (Chromium paints only frames in view)."""
        what = "the timeline's first paint"
        found = self.wait_until(lambda: self.painted(frame, own), TIMEOUT_S, what, self.pause)
        return float(found)


def _one(context: Any, lab: Any, run: str, steps: int, read_s: float) -> dict[str, float]:
    from tests._browser import write_notebook

    name = f"{run}.ipynb"
    write_notebook(lab.root / name, _cells(run, steps))
    notebook = _Notebook(context, lab, name)
    try:
        notebook.press(0)
        notebook.done(0)
        pressed = notebook.press(1)
        done = notebook.done(1)
        under = notebook.frame(1)  # scrolled into view: the user reads the summary above it
        left = done + read_s * 1e3 - notebook.now()
        if left > 0:
            notebook.pause(left / 1e3)
        drawn = notebook.painted(under)
        opened = notebook.press(2)
        view = notebook.frame(2)
        view_paint = notebook.paint(view)
        whole_paint = notebook.paint(view, own=True)
        where = _steps(view, opened)
        under_paint = notebook.painted(under)
    finally:
        notebook.page.close()
        lab.shutdown_kernels()
    xplane = captures_bytes(lab, run)
    ready = _ready_at(lab, run)
    return {
        "cell_s": (done - pressed) / 1e3,
        "ready_after_done_s": ready - done / 1e3,
        "under_drawn": 1.0 if drawn is not None else 0.0,
        "open_to_paint_s": (view_paint - opened) / 1e3,
        "preview_shown": 1.0 if view_paint < whole_paint else 0.0,
        "open_to_whole_s": (whole_paint - opened) / 1e3,
        "press_to_paint_s": (view_paint - pressed) / 1e3,
        "xplane_mb": xplane / 1e6,
        # Whether the frame under the cell, scrolled away by the view's output, loaded its
        # timeline too (its page then ran beside the view's, in the same renderer).
        "under_loaded": 1.0 if under_paint is not None else 0.0,
        # How long before the view's key press the frame under the cell first drew its
        # timeline (its page runs on the notebook's thread, as the view's does).
        **({"under_lead_s": (opened - under_paint) / 1e3} if under_paint is not None else {}),
        **where,
    }


def _steps(frame: Any, opened: float) -> dict[str, float]:
    """Where the whole timeline's first paint after ``%xprof view`` went, from its key press:
    XProf's trace viewer page starting, its data request sent and answered, then drawn."""
    found = frame.evaluate("window.__firstPaint || null")
    data = frame.evaluate(DATA_TIMING)
    if not found or not data:
        return {}
    return {
        "view_page_s": (found["page"] - opened) / 1e3,
        "view_request_s": (data[0]["start"] - opened) / 1e3,
        "view_server_s": (data[0]["first_byte"] - data[0]["start"]) / 1e3,
        "view_data_s": (data[0]["end"] - opened) / 1e3,
        "view_tracks_s": (found["tracks"] - opened) / 1e3,
    }


def _ready_at(lab: Any, run: str) -> float:
    """When the run's trace viewer caches were committed (``cache_version.txt`` written, by
    the preparer or by XProf), on the wall clock the browser's times share."""
    from xprof_magic._runs import store as _store

    run_dir = _store.run_path(lab.env["XPROF_MAGIC_LOGDIR"], run)
    return (run_dir / "cache_version.txt").stat().st_mtime


def captures_bytes(lab: Any, run: str) -> int:
    from xprof_magic._runs import store as _store

    return _store.xplane_bytes(_store.run_path(lab.env["XPROF_MAGIC_LOGDIR"], run))


def _cpu_times() -> tuple[int, int]:
    """All CPUs' (busy, total) jiffies since boot, from ``/proc/stat``."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _at_rest(window_s: float = 1.0, busiest: float = 0.15) -> bool:
    """Whether the CPUs were under ``busiest`` busy over the next ``window_s`` seconds."""
    busy, total = _cpu_times()
    time.sleep(window_s)
    busy2, total2 = _cpu_times()
    return (busy2 - busy) <= busiest * max(total2 - total, 1)


def _next(context: Any, lab: Any, rep: int) -> dict[str, float]:
    from tests._browser import write_notebook

    name = f"next-{rep}.ipynb"
    write_notebook(lab.root / name, _next_cells(rep))
    notebook = _Notebook(context, lab, name)
    try:
        notebook.press(0)
        notebook.done(0)
        notebook.press(1)
        notebook.done(1)
        under = notebook.frame(1)
        busy_pressed = notebook.press(2)  # at once: the big run's conversion is running
        busy = notebook.done(2) - busy_pressed
        busy_frame = notebook.frame(2)
        notebook.paint(busy_frame)
        notebook.cells.nth(1).locator("iframe.xprof-outer").scroll_into_view_if_needed()
        notebook.paint(under)
        # The machine at rest again: both runs converted (ahead or by their frames), the
        # survey done, all drawn. A fixed pause was not enough: the idle cell then ran beside
        # the busy cell's own conversion and the survey (an "idle" of 6.6 s against 2.7 s).
        notebook.wait_until(_at_rest, 120, "the machine to be at rest", notebook.pause)
        idle_pressed = notebook.press(3)
        idle = notebook.done(3) - idle_pressed
        notebook.paint(notebook.frame(3))
    finally:
        notebook.page.close()
        lab.shutdown_kernels()
    return {"busy_s": busy / 1e3, "idle_s": idle / 1e3, "ratio": busy / idle}


def measure(
    sizes: list[str], reps: int, modes: list[str], next_reps: int, read_s: float = READ_S
) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from tests._browser import CHROMIUM_ARGS, find_chromium
    from tests._notebook_servers import machine_environment, start_jupyterlab, stop_viewers

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    results: dict[str, Any] = {
        "load_before": os.getloadavg(),
        "reps": reps,
        "read_s": read_s,
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-after-cell-") as tmp:
        # A mode named more than once runs again in a JupyterLab of its own, its figures
        # pooled with the earlier ones: alternating modes keeps the machine's drift out of
        # their comparison.
        for turn, mode in enumerate(modes):
            env = {**machine_environment(), **MODES[mode]}
            lab = start_jupyterlab(Path(tmp) / f"{turn}-{mode.replace(' ', '-')}", base_env=env)
            found = results["modes"].setdefault(mode, {"sizes": {}, "next": []})
            try:
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(
                        executable_path=chromium,
                        args=CHROMIUM_ARGS,
                        env={**os.environ, "HOME": str(Path(tmp) / "chromium")},
                    )
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    context.add_init_script(PROBE)
                    for size in sizes:
                        rows = found["sizes"].setdefault(size, [])
                        for _ in range(reps):
                            run = f"{size}-{len(rows) + 1}"
                            rows.append(_one(context, lab, run, captures.SIZES[size], read_s))
                            print(f"first-paint --after-cell: {mode} {run}: {rows[-1]}", flush=True)
                    for _ in range(next_reps):
                        found["next"].append(_next(context, lab, len(found["next"]) + 1))
                        print(f"first-paint --after-cell: {mode} next cell: {found['next'][-1]}")
                    context.close()
                    browser.close()
            finally:
                lab.stop()
                stop_viewers(lab.env)
    results["load_after"] = os.getloadavg()
    return results


def report(results: dict[str, Any]) -> str:
    """Markdown: one row per figure, a column per mode and size; medians."""
    modes = list(results["modes"])
    sizes = list(next(iter(results["modes"].values()))["sizes"])

    def med(mode: str, size: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results["modes"][mode]["sizes"][size]))

    columns = [(size, mode) for size in sizes for mode in modes]
    read_s = results["read_s"]
    header = " | ".join(f"{size} {mode}" for size, mode in columns)
    rule = "|---" * (len(columns) + 1) + "|"
    lines = [f"| median of {results['reps']} a turn | {header} |", rule]
    rows = [
        ("capture (`xplane.pb`)", "xplane_mb", "MB"),
        ("key press → cell done (summary shown)", "cell_s", "s"),
        ("cell done → the timeline's caches written", "ready_after_done_s", "s"),
        (
            f"timeline under the cell drawn after the {read_s:g} s read (share of reps)",
            "under_drawn",
            "",
        ),
        (
            f"**`%xprof view` after a {read_s:g} s read: key press → first paint**",
            "open_to_paint_s",
            "s",
        ),
        ("… of which a preview (share of reps)", "preview_shown", ""),
        ("the timeline under the cell drawn, before that key press", "under_lead_s", "s"),
        ("… XProf's trace viewer page starting (whole timeline)", "view_page_s", "s"),
        ("… its trace data's last byte", "view_data_s", "s"),
        ("… XProf's time on that request (sent → first byte)", "view_server_s", "s"),
        ("`%xprof view`: key press → the whole timeline painted", "open_to_whole_s", "s"),
        ("training cell's key press → that first paint", "press_to_paint_s", "s"),
    ]
    for label, key, unit in rows:
        if not all(
            key in r for size, mode in columns for r in results["modes"][mode]["sizes"][size]
        ):
            continue
        cells = " | ".join(f"{med(mode, size, key):.2f} {unit}" for size, mode in columns)
        lines.append(f"| {label} | {cells} |")
    lines += [
        "",
        "| next cell (400 steps) | while converting | idle | ratio |",
        "|---|---|---|---|",
    ]
    for mode in modes:
        rows_next = results["modes"][mode]["next"]
        if not rows_next:
            continue
        busy = statistics.median(r["busy_s"] for r in rows_next)
        idle = statistics.median(r["idle_s"] for r in rows_next)
        ratio = statistics.median(r["ratio"] for r in rows_next)
        lines.append(
            f"| {mode} (median of {len(rows_next)}) | {busy:.2f} s | {idle:.2f} s | {ratio:.3f} |"
        )
    ahead, demand = (results["modes"].get(m, {}).get("next") for m in ("ahead", "on demand"))
    if ahead and demand:
        # What the conversion itself costs the next cell: the same cell at the same moment
        # (the big one just done: its summary finishing, its output drawn) with a viewer that
        # converts ahead, against one that waits for a click. Pairs in the order they ran.
        pairs = " ".join(
            f"{a['busy_s'] / d['busy_s']:.2f}" for a, d in zip(ahead, demand, strict=False)
        )
        ratio = statistics.median(a["busy_s"] for a in ahead) / statistics.median(
            d["busy_s"] for d in demand
        )
        lines += [
            "",
            "The next cell with the conversion running, against on demand's at the same "
            f"moment: ratio of medians {ratio:.3f}; pairs in order {pairs}.",
        ]
    before, after = results["load_before"][0], results["load_after"][0]
    lines += ["", f"Load average {before:.1f} before, {after:.1f} after."]
    return "\n".join(lines)


def main(sizes: list[str], reps: int, modes: list[str], next_reps: int, read_s: float) -> int:
    started = time.perf_counter()
    results = measure(sizes, reps, modes, next_reps, read_s)
    print(report(results))
    print(f"first-paint --after-cell: took {time.perf_counter() - started:.0f} s")
    return 0
