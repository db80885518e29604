"""``python -m bench first-paint``: from ``%xprof view`` to the first picture of the timeline.

A real JupyterLab and Debian's Chromium (the browser tests' harness, :mod:`tests._browser`)
open a notebook whose log directory holds the ~30 MB training capture of
:mod:`bench.captures` (built once, cached under ``bench/.captures/``, copied here because
XProf writes its caches into the run folder). The cell ``%xprof view 30MB`` runs:

- cold: no viewer for the log directory and no XProf caches in the run, so the viewer
  starts and XProf converts the whole XSpace on the trace viewer's first data request;
- warm: the same cell again, with the viewer running and its ``*.SSTABLE`` caches written.

Every time is read in the browser on one clock (``performance.timeOrigin + now()``): the
key press that runs the cell; the embedded trace viewer page starting to load; its
``data?tag=trace_viewer@`` request (resource timing: sent, first byte, last byte); and the
first paint, the first animation frame in which the timeline names the host's track
(``span.process-track-name``) and its drawing canvas holds at least 1,000 coloured pixels,
i.e. event slices are drawn, with the timeline not hidden. From first byte back to sent is
XProf's time on the server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

from bench import captures
from bench.paint import DATA_TIMING, PROBE

__all__ = ["main", "measure"]

RUN = "30MB"
TIMEOUT_S = 120.0


def _copy_capture(logdir: Path, source: Path | None) -> Path:
    """``source``, else the cached 30 MB capture (built on first use), as run ``30MB``."""
    source = source or captures.ensure_captures([RUN])[RUN]
    target = logdir / "plugins" / "profile" / RUN
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.SSTABLE", "cache_*"))
    return target


def _forget_conversion(run_dir: Path) -> None:
    """Remove what XProf wrote into the run, so that the next request converts again."""
    for path in run_dir.iterdir():
        if path.name.endswith(".SSTABLE") or path.name == "cache_version.txt":
            path.unlink()


def _one_view(page: Any, seen: set[Any], reps_label: str, kernel: bool = False) -> dict[str, float]:
    """Run the notebook's second cell and wait for its timeline's first paint (``kernel``:
    the page comes through the kernel route, in a frame written as ``about:srcdoc``)."""
    from tests._wait import wait_until

    cell = page.locator(".jp-NotebookPanel .jp-CodeCell").nth(1)
    cell.locator(".jp-InputPrompt").click()
    pressed: float = page.evaluate("performance.timeOrigin + performance.now()")
    page.keyboard.press("Shift+Enter")

    def pause(seconds: float) -> None:
        page.wait_for_timeout(seconds * 1000)

    def new_frame() -> Any:
        from playwright.sync_api import Error

        for frame in page.frames:
            if frame in seen or frame.is_detached():
                continue
            if kernel and frame.name.startswith("xprof-") and frame.url == "about:srcdoc":
                with contextlib.suppress(Error):
                    if frame.evaluate("window.__firstPaint ? 1 : 0"):
                        return frame
            elif "trace_viewer_index.html" in frame.url:
                return frame
        return None

    frame = wait_until(new_frame, TIMEOUT_S, f"{reps_label}: the widget's trace viewer", pause)
    seen.add(frame)
    cell.locator("iframe.xprof-outer").scroll_into_view_if_needed()

    def painted() -> Any:
        from playwright.sync_api import Error

        try:  # the page said while a cold run is prepared reloads into XProf's
            found = frame.evaluate("window.__firstPaint || null")
        except Error:
            return None
        return found if found and found["paint"] else None

    def state() -> str:
        page.screenshot(path=str(Path(tempfile.gettempdir()) / "first-paint-failure.png"))
        probe = frame.evaluate("window.__firstPaint || null")
        return f"{reps_label}: no first paint of the timeline in {frame.url}; probe: {probe}"

    found = wait_until(painted, TIMEOUT_S, state, pause)
    if kernel:  # no resource timing: the data came as widget messages
        return {
            "page_s": (found["page"] - pressed) / 1e3,
            "tracks_s": (found["tracks"] - pressed) / 1e3,
            "paint_s": (found["paint"] - pressed) / 1e3,
        }
    data = frame.evaluate(DATA_TIMING)
    assert len(data) >= 1, f"{reps_label}: no trace_viewer@ data request in the page"
    first = data[0]
    return {
        "page_s": (found["page"] - pressed) / 1e3,
        "request_s": (first["start"] - pressed) / 1e3,
        "server_s": (first["first_byte"] - first["start"]) / 1e3,
        "data_s": (first["end"] - pressed) / 1e3,
        "tracks_s": (found["tracks"] - pressed) / 1e3,
        "paint_s": (found["paint"] - pressed) / 1e3,
        "reply_mb": first["bytes"] / 1e6,
        "decoded_mb": first["decoded"] / 1e6,
        "transferred_mb": first["transferred"] / 1e6,
        "data_requests": len(data),
        "query": first["query"],
    }


def _direct_fetches(env: dict[str, str], logdir: Path, query: str, reps: int) -> list[float]:
    """The browser's ``trace_viewer@`` request again from the kernel's client (``fetch_json``:
    request, gzip, JSON parse), viewer and caches warm."""
    from xprof_magic import _viewer

    os.environ["XPROF_MAGIC_VIEWER_DIR"] = env["XPROF_MAGIC_VIEWER_DIR"]
    viewer = _viewer.find_viewer(logdir)
    assert viewer is not None, f"no viewer for {logdir}"
    params: dict[str, Any] = dict(parse_qsl(query))
    took = []
    for _ in range(reps):
        started = time.perf_counter()
        _viewer.fetch_json(viewer, "data", **params)
        took.append(time.perf_counter() - started)
    return took


def measure(reps: int = 3, source: Path | None = None) -> dict[str, Any]:
    """Cold then warm ``%xprof view 30MB`` in one JupyterLab page, ``reps`` times each."""
    from playwright.sync_api import sync_playwright

    from tests._browser import CHROMIUM_ARGS, find_chromium, write_notebook
    from tests._notebook_servers import start_jupyterlab, stop_viewers
    from tests._wait import wait_until

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-first-paint-") as tmp:
        home = Path(tmp)
        lab = start_jupyterlab(home / "lab")
        run_dir = _copy_capture(Path(lab.env["XPROF_MAGIC_LOGDIR"]), source)
        xplane_mb = sum(p.stat().st_size for p in run_dir.glob("*.xplane.pb")) / 1e6
        write_notebook(lab.root / "paint.ipynb", ["%load_ext xprof_magic", f"%xprof view {RUN}"])
        results: dict[str, Any] = {"cold": [], "warm": []}
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium,
                    args=CHROMIUM_ARGS,
                    env={**os.environ, "HOME": str(home / "chromium")},
                )
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_init_script(PROBE)
                page = context.new_page()
                page.goto(lab.notebook_url("paint.ipynb", workspace="paint"), timeout=90_000)
                first = page.locator(".jp-NotebookPanel .jp-CodeCell").first
                first.wait_for(timeout=90_000)

                def idle() -> bool:
                    sessions = lab.api("GET", "/api/sessions")
                    return bool(sessions) and all(
                        s["kernel"]["execution_state"] == "idle" for s in sessions
                    )

                def pause(seconds: float) -> None:
                    page.wait_for_timeout(seconds * 1000)

                wait_until(idle, 90, "the kernel to start", pause)
                first.locator(".jp-InputPrompt").click()
                page.keyboard.press("Shift+Enter")
                wait_until(
                    lambda: first.locator(".jp-InputPrompt").inner_text().strip() == "[1]:",
                    60,
                    "%load_ext xprof_magic",
                    pause,
                )
                seen: set[Any] = set()
                for rep in range(reps):
                    stop_viewers(lab.env)
                    _forget_conversion(run_dir)
                    results["cold"].append(_one_view(page, seen, f"cold {rep + 1}"))
                    print(f"first-paint: cold {rep + 1}: {results['cold'][-1]}", flush=True)
                for rep in range(reps):
                    results["warm"].append(_one_view(page, seen, f"warm {rep + 1}"))
                    print(f"first-paint: warm {rep + 1}: {results['warm'][-1]}", flush=True)
                logdir = Path(lab.env["XPROF_MAGIC_LOGDIR"])
                query = results["warm"][-1]["query"]
                results["direct_s"] = _direct_fetches(lab.env, logdir, query, reps)
                context.close()
                results["kernel"] = _kernel_views(browser, lab, home, reps)
                browser.close()
        finally:
            lab.stop()
            stop_viewers(lab.env)
    results.update(
        xplane_mb=xplane_mb, load_before=load_before, load_after=os.getloadavg(), reps=reps
    )
    return results


def _kernel_views(browser: Any, lab: Any, home: Path, reps: int) -> list[dict[str, float]]:
    """The same warm view through the kernel route: a second page of the same notebook in a
    browser that reaches the notebook server's port only (so the widget picks the kernel),
    its XProf files not yet in that browser's cache for the first repetition."""
    from tests._wait import wait_until

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(PROBE)
    other = re.compile(rf"^https?://(127\.0\.0\.1|localhost)(?!:{lab.port}/)")
    context.route(lambda url: bool(other.match(url)), lambda route: route.abort())
    page = context.new_page()
    page.goto(lab.notebook_url("paint.ipynb", workspace="paint-kernel"), timeout=90_000)
    first = page.locator(".jp-NotebookPanel .jp-CodeCell").first
    first.wait_for(timeout=90_000)
    first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    wait_until(
        lambda: re.fullmatch(r"\[\d+\]:", first.locator(".jp-InputPrompt").inner_text().strip()),
        60,
        "%load_ext xprof_magic, again",
        lambda s: page.wait_for_timeout(s * 1000),
    )
    seen: set[Any] = set()
    found = []
    for rep in range(reps):
        found.append(_one_view(page, seen, f"kernel {rep + 1}", kernel=True))
        print(f"first-paint: kernel {rep + 1}: {found[-1]}", flush=True)
    context.close()
    return found


def report(results: dict[str, Any]) -> str:
    """The figures as a Markdown table, medians over the repetitions."""

    def med(kind: str, key: str) -> float:
        return float(statistics.median(row[key] for row in results[kind]))

    rows = [
        ("the trace viewer page starts loading", "page_s"),
        ("its `data?tag=trace_viewer@` request sent", "request_s"),
        ("that reply's last byte", "data_s"),
        ("the host's track named", "tracks_s"),
        ("**first paint** (event slices drawn)", "paint_s"),
        ("XProf's time on that request (sent → first byte)", "server_s"),
    ]
    lines = [
        f"| from the key press that runs `%xprof view {RUN}` to … | cold | warm |",
        "| --- | --- | --- |",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {med('cold', key):.2f} s | {med('warm', key):.2f} s |")
    kernel = results.get("kernel") or []
    if kernel:
        paint = statistics.median(row["paint_s"] for row in kernel)
        warm = med("warm", "paint_s")
        lines.append(
            f"| **first paint through the kernel route** (warm viewer; the port refused) | | "
            f"**{paint:.2f} s** ({paint / warm:.2f}× the port's) |"
        )
        lines.append(
            "| … the kernel route's first time in this browser (XProf's files not cached) | | "
            f"{kernel[0]['paint_s']:.2f} s |"
        )
    direct = statistics.median(results["direct_s"])
    warm_mb = med("warm", "transferred_mb")
    before, after = results["load_before"][0], results["load_after"][0]
    lines += [
        "",
        f"- the page's request: `data?{unquote(results['cold'][0]['query'])}`; reply "
        f"{med('cold', 'decoded_mb'):.1f} MB of JSON, {med('cold', 'reply_mb'):.2f} MB gzipped "
        f"on the wire; {warm_mb:.2f} MB transferred when warm (0 would be the browser's cache);",
        f"- the same request from the kernel's client (`fetch_json`), warm: {direct:.2f} s;",
        f"- median of {results['reps']}; load average {before:.1f} before, {after:.1f} after.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench first-paint")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each (default 3)")
    parser.add_argument(
        "--capture",
        type=Path,
        default=None,
        help="a run folder to copy (default: bench/.captures/plugins/profile/30MB, built once)",
    )
    parser.add_argument(
        "--after-cell",
        action="store_true",
        help="a %%%%xprof training cell, a read (--read-s), then %%xprof view "
        "(bench/first_paint_cell.py), instead of %%xprof view of a copied capture",
    )
    parser.add_argument("--sizes", nargs="*", default=["30MB", "100MB"], help="--after-cell")
    parser.add_argument(
        "--modes",
        nargs="*",
        default=["ahead", "on demand"],
        help="--after-cell: which modes (ahead, 'no preview', 'on demand')",
    )
    parser.add_argument("--next-reps", type=int, default=3, help="--after-cell: next-cell runs")
    parser.add_argument(
        "--read-s",
        type=float,
        default=5.0,
        help="--after-cell: seconds between the cell done and %%xprof view (default 5)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.after_cell:
        from bench import first_paint_cell

        return first_paint_cell.main(args.sizes, args.reps, args.modes, args.next_reps, args.read_s)
    started = time.perf_counter()
    results = measure(args.reps, args.capture)
    print(report(results))
    print(f"first-paint: took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
