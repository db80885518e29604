"""A run -> a summary that answers the first questions about a profiled cell at a glance.

Which device ran the work, where the cell's time went (labels, steps), whether the same code
compiled again, which ops fell back to the CPU, what the device and the host threads were
busy with. Numbers come from three places, each named in the summary's docs:

* the capture's metadata (``xprof_magic.json``, written by the core): wall time, status,
  device kind and torch_xla's own counters and metrics for this cell alone;
* the timeline (``<host>.xplane.pb``) read through XProf's ``ProfileData`` API: labels,
  steps, compile events and the blocks that held them, XLA ops, thread and device busy time;
* nothing else: no protobuf is parsed by hand, and reading never writes into the run.

:func:`summarize` never raises: a capture it cannot read gives a summary whose ``missing``
says what is absent and why. Reading costs a few microseconds per timeline event; a capture
too large for ``budget_s`` gives a quick summary from the metadata alone (``pending``), and
:func:`summarize_in_background` / :func:`summarize_or_defer` finish the job in a thread and
call back, so a front end can show "summary pending" and replace it when ready.

IPython-free: rendering to text and static HTML (inline SVG chart, no JavaScript) is here
too, so a saved notebook shows the summary without a kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xprof_magic._analysis.model import (
    CompareRow,
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
from xprof_magic._analysis.render import (
    chart_svg,
    compare_html,
    compare_text,
    fmt_s,
    render_html,
    render_text,
)
from xprof_magic._analysis.trace import (
    GROUP_ROLES,
    STEP,
    Block,
    ReadAborted,
    TraceFacts,
    read_trace,
)

__all__ = [
    "DEFAULT_BUDGET_S",
    "METADATA_FILE",
    "SUMMARY_FILE",
    "CompareRow",
    "Comparison",
    "CompileSite",
    "Compiles",
    "DeviceBusy",
    "DeviceInfo",
    "Fallback",
    "LabelRow",
    "Note",
    "OpRow",
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
    "summarize_in_background",
    "summarize_or_defer",
]

METADATA_FILE = "xprof_magic.json"
SUMMARY_FILE = "xprof_magic_summary.json"
DEFAULT_BUDGET_S = 2.0
# Measured on a 2-core VM: 2.6 MB of xplane.pb per second idle (about 10 µs an event),
# 1.1 MB/s when shared; the deadline catches an estimate that was too hopeful.
READ_BYTES_PER_S = 1.5e6
TOP_OPS = 10
MAX_LABEL_ROWS = 300
MAX_STEP_DURATIONS = 10_000
FALLBACK_HINTS = {
    "nonzero": "its output shape depends on the data; keep a mask and use torch.where",
    "masked_select": "its output shape depends on the data; use torch.where with a mask",
    "unique": "its output shape depends on the data; avoid it inside the hot loop",
    "_local_scalar_dense": (
        ".item(), float(t), bool(t) or printing a tensor waits for the device and copies "
        "the value to the host; read values once, after the loop"
    ),
}
SCALAR_READ = "aten::_local_scalar_dense"
FALLBACK_DEFAULT_HINT = (
    "ran on the CPU: its inputs were copied off the device and the XLA graph was cut; "
    "look for an op XLA supports or move it out of the hot loop"
)


def summarize(
    run_dir: str | os.PathLike[str], *, budget_s: float | None = DEFAULT_BUDGET_S
) -> Summary:
    """Summarize the run in ``run_dir``; never raises.

    ``budget_s`` bounds the time spent reading the timeline: when the capture is estimated
    (:func:`estimate_read_s`) or found to need longer, the result is built from the metadata
    alone and has ``pending=True``; call again with ``budget_s=None`` (in a thread, see
    :func:`summarize_in_background`) for the full one.
    """
    started = time.perf_counter()
    path = Path(run_dir)
    try:
        summary = _summarize(path, budget_s, started)
    except Exception as error:  # the summary must never take the cell down with it
        summary = Summary(
            run=path.name,
            run_dir=str(path),
            missing=(f"the analysis failed ({type(error).__name__}: {error}); please report it",),
            notes=(Note("error", f"No summary: the analysis failed with {type(error).__name__}."),),
        )
    return replace(summary, read_s=round(time.perf_counter() - started, 4))


def estimate_read_s(run_dir: str | os.PathLike[str]) -> float:
    """Seconds :func:`summarize` is expected to need, from the size of the timeline files."""
    try:
        size = sum(p.stat().st_size for p in Path(run_dir).glob("*.xplane.pb"))
    except OSError:
        return 0.0
    return size / READ_BYTES_PER_S


def save_summary(summary: Summary, run_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write ``xprof_magic_summary.json`` beside the capture (atomically); return its path."""
    folder = Path(run_dir) if run_dir is not None else Path(summary.run_dir)
    target = folder / SUMMARY_FILE
    tmp = folder / f".{SUMMARY_FILE}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_text(json.dumps(summary.to_json(), indent=1), encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def load_summary(run_dir: str | os.PathLike[str]) -> Summary | None:
    """The saved summary of ``run_dir``, or None when absent, unreadable or out of date."""
    try:
        data = json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
        return Summary.from_json(data)
    except (OSError, ValueError, TypeError):
        return None


_read_lock = threading.Lock()


def summarize_in_background(
    run_dir: str | os.PathLike[str],
    on_ready: Callable[[Summary], None] | None = None,
    *,
    save: bool = True,
) -> Future[Summary]:
    """Read the whole timeline in a daemon thread; ``on_ready(summary)`` runs there when done.

    Reads run one at a time, so several pending cells do not compete for the CPU. The full
    summary is saved beside the capture (``save``) so it shows again without recomputation.
    An exception raised by ``on_ready`` is swallowed; the future still holds the summary.
    """
    future: Future[Summary] = Future()

    def work() -> None:
        with _read_lock:
            summary = summarize(run_dir, budget_s=None)
        if save and summary.complete:
            with contextlib.suppress(OSError):
                save_summary(summary, run_dir)
        future.set_result(summary)
        if on_ready is not None:
            with contextlib.suppress(Exception):
                on_ready(summary)

    future.set_running_or_notify_cancel()
    threading.Thread(target=work, name="xprof-summary", daemon=True).start()
    return future


def summarize_or_defer(
    run_dir: str | os.PathLike[str],
    on_ready: Callable[[Summary], None] | None = None,
    *,
    budget_s: float | None = DEFAULT_BUDGET_S,
) -> Summary:
    """The summary to show now: a saved one, a fresh one, or a quick one while the rest loads.

    When the quick one is returned (``pending=True``), the full summary is computed in the
    background and handed to ``on_ready``; a front end shows the first and replaces it.
    """
    saved = load_summary(run_dir)
    if saved is not None and not saved.pending:
        return saved
    summary = summarize(run_dir, budget_s=budget_s)
    if summary.pending:
        summarize_in_background(run_dir, on_ready)
    elif summary.complete:
        with contextlib.suppress(OSError):
            save_summary(summary, run_dir)
    return summary


@dataclass(frozen=True)
class Comparison:
    """Two summaries side by side: the rows, and notes on what differs in kind."""

    a: str
    b: str
    rows: tuple[CompareRow, ...]
    notes: tuple[str, ...]

    def text(self) -> str:
        """The side-by-side table as plain text."""
        return compare_text(self.a, self.b, self.rows, self.notes)

    def html(self) -> str:
        """The side-by-side table as static, self-contained HTML."""
        return compare_html(self.a, self.b, self.rows, self.notes)

    def _repr_html_(self) -> str:
        return self.html()

    def __str__(self) -> str:
        return self.text()


def compare(a: Summary, b: Summary) -> Comparison:
    """Put two runs side by side: device, wall, steps, compiles, fallbacks, labels."""
    rows: list[CompareRow] = []

    def add(
        section: str,
        name: str,
        x: float | str | None,
        y: float | str | None,
        unit: str,
        path: tuple[str, ...] = (),
    ) -> None:
        if x is not None or y is not None:
            rows.append(CompareRow(section, name, x, y, unit, path))

    add("run", "device", a.device.kind, b.device.kind, "text")
    add("run", "status", a.status, b.status, "text")
    add("run", "wall time", a.wall_s, b.wall_s, "s")
    for name, get in (
        ("count", lambda s: float(s.count)),
        ("first step", lambda s: s.first_s),
        ("median of the rest", lambda s: s.rest_median_s),
        ("max of the rest", lambda s: s.rest_max_s),
    ):
        add(
            "steps",
            name,
            get(a.steps) if a.steps else None,
            get(b.steps) if b.steps else None,
            "count" if name == "count" else "s",
        )
    add("compile", "compilations", _opt(a.compiles.count), _opt(b.compiles.count), "count")
    add("compile", "compile time", a.compiles.total_s, b.compiles.total_s, "s")
    add(
        "compile",
        "blocks that recompiled",
        float(sum(s.recompiled and not s.warm_up for s in a.compiles.sites)),
        float(sum(s.recompiled and not s.warm_up for s in b.compiles.sites)),
        "count",
    )
    for label, get_t in (
        ("executions", lambda s: s.executions),
        ("to device", lambda s: s.to_device),
        ("from device", lambda s: s.from_device),
    ):
        ta, tb = get_t(a), get_t(b)
        add("runtime", f"{label} (count)", _opt(ta and ta.count), _opt(tb and tb.count), "count")
        add("runtime", f"{label} (time)", ta and ta.total_s, tb and tb.total_s, "s")
    fa = {f.op: f.count for f in a.fallbacks}
    fb = {f.op: f.count for f in b.fallbacks}
    for op in list(fa) + [op for op in fb if op not in fa]:
        add("CPU fallbacks", op, float(fa.get(op, 0)), float(fb.get(op, 0)), "count")
    la = {(r.thread, r.path): r for r in a.labels}
    lb = {(r.thread, r.path): r for r in b.labels}
    for key in _tree_order(list(la) + [k for k in lb if k not in la]):
        ra, rb = la.get(key), lb.get(key)
        name = (f"[{key[0]}] " if key[0] else "") + key[1][-1]
        add("labels", name, ra.total_s if ra else None, rb.total_s if rb else None, "s", key[1])
    notes: list[str] = []
    if a.device.kind != b.device.kind:
        notes.append(
            f"The runs used different devices ({a.device.kind} vs {b.device.kind}): "
            "their times are not comparable."
        )
    for which, s in (("A", a), ("B", b)):
        if s.missing:
            notes.append(f"{which} is incomplete: {s.missing[0]}")
    return Comparison(a.run, b.run, tuple(rows), tuple(notes))


LabelKey = tuple[str, tuple[str, ...]]


def _tree_order(keys: list[LabelKey]) -> list[LabelKey]:
    """Label keys of two runs merged into one tree: each block under its parent, siblings in
    order of first appearance (A's order, then B's additions)."""
    rank = {key: i for i, key in enumerate(keys)}
    children: dict[LabelKey, list[LabelKey]] = {}
    for key in keys:
        parent = (key[0], key[1][:-1])
        children.setdefault(parent if parent in rank else (key[0], ()), []).append(key)
    ordered: list[LabelKey] = []

    def walk(node: LabelKey) -> None:
        for child in sorted(children.get(node, []), key=rank.__getitem__):
            ordered.append(child)
            walk(child)

    for thread in dict.fromkeys(k[0] for k in keys):
        walk((thread, ()))
    return ordered


def _opt(value: int | None) -> float | None:
    return None if value is None else float(value)


# --- building the summary ------------------------------------------------------------


def _summarize(path: Path, budget_s: float | None, started: float) -> Summary:
    missing: list[str] = []
    if not path.is_dir():
        return Summary(
            run=path.name,
            run_dir=str(path),
            missing=(f"the run folder {path} does not exist or is not a folder",),
            notes=(Note("error", f"No capture at {path}: check the run name or --logdir."),),
        )
    meta, problem = _read_metadata(path)
    if problem:
        missing.append(problem)
    xplanes = sorted(path.glob("*.xplane.pb"))
    host_file = _pick_host(xplanes, _text(meta.get("host")))
    facts: TraceFacts | None = None
    pending = False
    if host_file is None:
        missing.append(
            f"no <host>.xplane.pb in {path}: the profiler wrote no timeline, so labels from "
            "the trace, compile sites, ops and busy time are absent"
        )
    else:
        estimate = estimate_read_s(path)
        if budget_s is not None and estimate > budget_s:
            pending = True
        else:
            try:
                facts = read_trace(
                    host_file,
                    label_names=_label_names(meta),
                    cell_ns=_cell_ns(meta),
                    deadline=None if budget_s is None else started + budget_s,
                )
            except ReadAborted:
                pending = True
            except (ValueError, OSError) as error:
                missing.append(f"the timeline {host_file.name} could not be read ({error})")
        if pending:
            size_mb = sum(p.stat().st_size for p in xplanes) / 1e6
            missing.append(
                f"the timeline ({size_mb:.1f} MB) was not read: it takes longer than the "
                f"{budget_s:g} s budget, so labels and steps come from the magic's timers and "
                "compile sites, ops and busy time are absent"
            )
        if len(xplanes) > 1 and host_file is not None:
            others = ", ".join(p.name for p in xplanes if p != host_file)
            missing.append(f"only host {host_file.name} is summarized; also captured: {others}")
    return _build(path, meta, facts, host_file, tuple(missing), pending)


def _read_metadata(path: Path) -> tuple[dict[str, Any], str | None]:
    file = path / METADATA_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, (
            f"no {METADATA_FILE}: wall time, status and torch_xla's metrics (compiles, "
            "transfers, CPU fallbacks) are unknown; was the run made by xprof_magic?"
        )
    except (OSError, ValueError) as error:
        return {}, f"{METADATA_FILE} is unreadable ({error}); metrics and wall time are unknown"
    if not isinstance(data, dict):
        return {}, f"{METADATA_FILE} does not hold an object; metrics and wall time are unknown"
    return data, None


def _pick_host(xplanes: list[Path], host: str) -> Path | None:
    for p in xplanes:
        if p.name == f"{host}.xplane.pb":
            return p
    return xplanes[0] if xplanes else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _meta_labels(meta: Mapping[str, Any]) -> list[tuple[tuple[str, ...], int, float]]:
    found: list[tuple[tuple[str, ...], int, float]] = []
    labels = meta.get("labels")
    for item in labels if isinstance(labels, list) else []:
        if not isinstance(item, dict):
            continue
        path, count, total = item.get("path"), item.get("count"), _num(item.get("total_s"))
        if (
            isinstance(path, list)
            and path
            and all(isinstance(p, str) for p in path)
            and isinstance(count, int)
            and total is not None
        ):
            found.append((tuple(path), count, total))
    return found


def _label_names(meta: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(path[-1] for path, _, _ in _meta_labels(meta))


def _cell_ns(meta: Mapping[str, Any]) -> tuple[int, int] | None:
    start, end = meta.get("start_ns"), meta.get("end_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return start, end
    return None


def _build(
    path: Path,
    meta: dict[str, Any],
    facts: TraceFacts | None,
    host_file: Path | None,
    missing: tuple[str, ...],
    pending: bool,
) -> Summary:
    wall_s = _num(meta.get("wall_s"))
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    assert isinstance(metrics, dict)
    counters = metrics.get("counters") if isinstance(metrics.get("counters"), dict) else {}
    timers = metrics.get("metrics") if isinstance(metrics.get("metrics"), dict) else {}
    assert isinstance(counters, dict) and isinstance(timers, dict)
    error = meta.get("error")
    error_text = (
        f"{_text(error.get('type')) or 'Error'}: {_text(error.get('message'))}"
        if isinstance(error, dict)
        else None
    )
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    assert isinstance(versions, dict)
    compiled: RunsByRow = {}
    if facts is not None:
        labels, compiled = _labels_from_trace(facts, wall_s)
        label_source = "trace"
        steps = _steps_from_trace(facts) or _steps_from_meta(meta)
    else:
        labels, label_source = _labels_from_meta(meta, wall_s), "metadata"
        steps = _steps_from_meta(meta)
    if not labels:
        label_source = "none"
    compiles = _compiles(timers, counters, facts, labels, compiled)
    fallbacks = _fallbacks(counters)
    device = _device(meta, facts)
    missing_all = list(missing)
    if facts is not None:
        missing_all.extend(_labels_not_in_trace(meta, facts))
    summary = Summary(
        run=_text(meta.get("run")) or path.name,
        run_dir=str(path),
        host=host_file.name[: -len(".xplane.pb")] if host_file else "",
        status=_text(meta.get("status")) or "unknown",
        error=error_text,
        cell=_text(meta.get("cell")),
        start=_text(meta.get("start")),
        wall_s=wall_s,
        backend=_text(meta.get("backend")),
        versions=tuple(sorted((str(k), str(v)) for k, v in versions.items())),
        complete=facts is not None and not missing_all,
        pending=pending,
        missing=tuple(missing_all),
        device=device,
        labels=labels,
        label_source=label_source,
        steps=steps,
        compiles=compiles,
        executions=_timed(timers, "ExecuteTime"),
        to_device=_timed(timers, "TransferToDeviceTime", "OutboundData"),
        from_device=_timed(timers, "TransferFromDeviceTime", "InboundData"),
        fallbacks=fallbacks,
        host_ops=_top_host_ops(facts),
        device_ops=_top(facts.device_ops if facts else {}, "XLA op"),
        compile_ops=_top(facts.compile_ops if facts else {}, "compile"),
        events=facts.events if facts else 0,
    )
    return replace(summary, notes=_notes(summary))


RunsByRow = dict[tuple[str, tuple[str, ...]], tuple[int, ...]]


def _labels_from_trace(
    facts: TraceFacts, wall_s: float | None
) -> tuple[tuple[LabelRow, ...], RunsByRow]:
    """Blocks summed by their path of names; also which runs of each held a compilation."""
    blocks = facts.blocks
    compiled: RunsByRow = {}
    if not blocks:
        return (), compiled
    time_by_line: dict[str, float] = {}
    for b in blocks:
        if b.parent < 0:
            time_by_line[b.line] = time_by_line.get(b.line, 0.0) + b.end - b.start
    main_line = max(time_by_line, key=lambda k: time_by_line[k]) if time_by_line else ""
    paths: list[tuple[str, ...]] = []
    groups: dict[tuple[str, tuple[str, ...]], _Agg] = {}
    for b in blocks:
        p = (paths[b.parent] if b.parent >= 0 else ()) + (b.name,)
        paths.append(p)
        key = ("" if b.line == main_line else b.line, p)
        agg = groups.get(key)
        if agg is None:
            agg = groups[key] = _Agg(b.kind, b.start)
        agg.add(b)
    window_s = (facts.window[1] - facts.window[0]) / 1e9 if facts.window else None
    cell_s = wall_s or window_s
    children: dict[tuple[str, tuple[str, ...]], list[tuple[str, tuple[str, ...]]]] = {}
    for key in groups:
        children.setdefault((key[0], key[1][:-1]), []).append(key)
    ordered: list[LabelRow] = []

    def walk(parent: tuple[str, tuple[str, ...]]) -> None:
        for key in sorted(children.get(parent, []), key=lambda k: groups[k].first):
            if len(ordered) >= MAX_LABEL_ROWS:
                return
            agg = groups[key]
            total = agg.total_ns / 1e9
            ordered.append(
                LabelRow(
                    path=key[1],
                    kind=agg.kind,
                    count=agg.count,
                    total_s=total,
                    mean_s=total / agg.count,
                    share=total / cell_s if cell_s else None,
                    thread=key[0],
                    compiles=agg.compiles,
                    compile_s=agg.compile_ns / 1e9,
                    compiled_runs=len(agg.compiled_runs),
                )
            )
            compiled[key] = tuple(agg.compiled_runs)
            walk(key)

    for thread in sorted({k[0] for k in groups}):
        walk((thread, ()))
    return tuple(ordered), compiled


class _Agg:
    __slots__ = ("compile_ns", "compiled_runs", "compiles", "count", "first", "kind", "total_ns")

    def __init__(self, kind: str, first: float) -> None:
        self.kind = kind
        self.first = first
        self.count = 0
        self.total_ns = 0.0
        self.compiles = 0
        self.compile_ns = 0.0
        self.compiled_runs: list[int] = []

    def add(self, b: Block) -> None:
        if b.compiles:
            self.compiled_runs.append(self.count)
        self.count += 1
        self.total_ns += b.end - b.start
        self.compiles += b.compiles
        self.compile_ns += b.compile_ns


def _labels_from_meta(meta: Mapping[str, Any], wall_s: float | None) -> tuple[LabelRow, ...]:
    rows = _meta_labels(meta)
    order = {path: i for i, (path, _, _) in enumerate(rows)}
    children: dict[tuple[str, ...], list[tuple[tuple[str, ...], int, float]]] = {}
    for row in rows:
        children.setdefault(row[0][:-1], []).append(row)
    out: list[LabelRow] = []

    def walk(parent: tuple[str, ...]) -> None:
        for path, count, total in sorted(children.get(parent, []), key=lambda r: order[r[0]]):
            out.append(
                LabelRow(
                    path=path,
                    kind="label",
                    count=count,
                    total_s=total,
                    mean_s=total / count if count else 0.0,
                    share=total / wall_s if wall_s else None,
                )
            )
            walk(path)

    walk(())
    known = {r.path for r in out}
    for path, count, total in rows:  # orphans whose parent path was not listed
        if path not in known:
            out.append(LabelRow(path, "label", count, total, total / count if count else 0.0, None))
    return tuple(out[:MAX_LABEL_ROWS])


def _labels_not_in_trace(meta: Mapping[str, Any], facts: TraceFacts) -> list[str]:
    names = _label_names(meta)
    seen = {b.name for b in facts.blocks}
    lost = sorted(names - seen)
    if not lost:
        return []
    shown = ", ".join(repr(n) for n in lost[:3]) + (" …" if len(lost) > 3 else "")
    return [f"{len(lost)} label(s) measured by the magic are not on the timeline: {shown}"]


def _step_stats(
    name: str, source: str, durations: list[float], compiling: tuple[int, ...]
) -> StepStats:
    rest = durations[1:]
    return StepStats(
        name=name,
        source=source,
        count=len(durations),
        durations_s=tuple(durations[:MAX_STEP_DURATIONS]),
        first_s=durations[0],
        rest_min_s=min(rest) if rest else None,
        rest_median_s=statistics.median(rest) if rest else None,
        rest_max_s=max(rest) if rest else None,
        compiling=compiling,
    )


def _steps_from_trace(facts: TraceFacts) -> StepStats | None:
    by_name: dict[str, list[Block]] = {}
    for b in facts.blocks:
        if b.kind == STEP:
            by_name.setdefault(b.name, []).append(b)
    if not by_name:
        return None
    name, blocks = max(
        by_name.items(), key=lambda kv: (len(kv[1]), sum(b.end - b.start for b in kv[1]))
    )
    blocks.sort(key=lambda b: b.start)
    return _step_stats(
        name,
        "trace",
        [(b.end - b.start) / 1e9 for b in blocks],
        tuple(i for i, b in enumerate(blocks) if b.holds_compile),
    )


def _steps_from_meta(meta: Mapping[str, Any]) -> StepStats | None:
    raw = meta.get("steps")
    durations = [float(x) for x in raw if _num(x) is not None] if isinstance(raw, list) else []
    return _step_stats("step", "metadata", durations, ()) if durations else None


def _timed(timers: Mapping[str, Any], name: str, bytes_name: str | None = None) -> Timed | None:
    entry = timers.get(name)
    if not isinstance(entry, dict):
        return None
    count, total = entry.get("count"), _num(entry.get("total_s"))
    if not isinstance(count, int) or total is None:
        return None
    size: float | None = None
    if bytes_name is not None:
        # The core stores every metric's accumulator under "total_s"; for the *Data
        # metrics it is bytes.
        raw = timers.get(bytes_name)
        size = _num(raw.get("total_s")) if isinstance(raw, dict) else None
    return Timed(count=count, total_s=total, bytes=size)


def _compiles(
    timers: Mapping[str, Any],
    counters: Mapping[str, Any],
    facts: TraceFacts | None,
    labels: tuple[LabelRow, ...],
    compiled: RunsByRow,
) -> Compiles:
    compile_time = _timed(timers, "CompileTime")
    hits = counters.get("CachedCompile")
    sites: list[CompileSite] = []
    for row in labels:
        if not row.compiles:
            continue
        runs = compiled.get((row.thread, row.path), ())
        compiled_runs = row.compiled_runs or 0
        loop = row.path[-1].lstrip().startswith(("for ", "while ", "async for "))
        recompiled = compiled_runs >= 2 or (loop and row.count == 1 and row.compiles >= 3)
        sites.append(
            CompileSite(
                path=row.path,
                runs=row.count,
                compiled_runs=compiled_runs,
                compiles=row.compiles,
                total_s=row.compile_s or 0.0,
                first_runs=runs[:8],
                recompiled=recompiled,
                warm_up=recompiled and compiled_runs >= 2 and all(i < 2 for i in runs),
            )
        )
    # No CompileTime entry in a metrics delta means nothing compiled; a malformed one, unknown.
    none_compiled = bool(timers) and "CompileTime" not in timers
    return Compiles(
        count=compile_time.count if compile_time else (0 if none_compiled else None),
        total_s=compile_time.total_s if compile_time else (0.0 if none_compiled else None),
        cache_hits=hits if isinstance(hits, int) else (0 if counters else None),
        trace_count=facts.compile_count if facts else None,
        trace_s=facts.compile_ns / 1e9 if facts else None,
        outside_labels=facts.compiles_outside if facts else 0,
        sites=tuple(sites),
    )


def _fallbacks(counters: Mapping[str, Any]) -> tuple[Fallback, ...]:
    found = []
    for name, value in counters.items():
        if isinstance(name, str) and name.startswith("aten::") and isinstance(value, int):
            op = name[len("aten::") :]
            if value > 0:
                found.append(Fallback(name, value, FALLBACK_HINTS.get(op, FALLBACK_DEFAULT_HINT)))
    return tuple(sorted(found, key=lambda f: (-f.count, f.op)))


def _device(meta: Mapping[str, Any], facts: TraceFacts | None) -> DeviceInfo:
    declared = _text(meta.get("device")).upper()
    device_planes = [n for n in facts.planes if n.startswith("/device:")] if facts else []
    tpu_planes = [n for n in device_planes if n.startswith("/device:TPU")]
    kind = declared or (
        "TPU" if tpu_planes else "CPU" if facts is not None and facts.has_cpu_client else "unknown"
    )
    window_s = (facts.window[1] - facts.window[0]) / 1e9 if facts and facts.window else None
    on_cpu = kind == "CPU"
    if on_cpu:
        statement = (
            "Ran on the CPU (PJRT_DEVICE=CPU), not on a TPU: XLA's CPU client executed the "
            "compiled graphs on host threads, so these times say nothing about TPU speed."
        )
    elif kind == "TPU" and facts is not None and not tpu_planes:
        statement = (
            "Ran on a TPU, but the timeline holds no TPU activity: nothing reached the device, "
            "or device tracing was off."
        )
    elif kind == "TPU":
        statement = f"Ran on TPU: {len(tpu_planes)} TPU device(s) in the timeline."
    elif kind == "unknown":
        statement = "The device is unknown: no metadata and no device activity in the timeline."
    else:
        statement = f"Ran on {kind}."
    if facts is None:
        return DeviceInfo(kind, on_cpu, statement, window_s)
    threads = tuple(
        ThreadGroup(
            name=name,
            role=GROUP_ROLES.get(name, "other host threads"),
            threads=g.threads,
            busy_s=g.busy_ns / 1e9,
            share=g.busy_ns / 1e9 / window_s if window_s else 0.0,
        )
        for name, g in sorted(facts.groups.items(), key=lambda kv: -kv[1].busy_ns)
    )
    devices = tuple(
        DeviceBusy(name, busy / 1e9, busy / 1e9 / window_s if window_s else 0.0)
        for name, busy in facts.devices
    )
    busy_s: float | None = None
    if devices:
        busy_s = sum(d.busy_s for d in devices) / len(devices)
    elif facts.has_cpu_client:
        busy_s = facts.cpu_xla_busy_ns / 1e9
    share = busy_s / window_s if busy_s is not None and window_s else None
    return DeviceInfo(kind, on_cpu, statement, window_s, busy_s, share, devices, threads)


def _top(table: Mapping[Any, list[float]], category: str) -> tuple[OpRow, ...]:
    total = sum(v[1] for v in table.values()) or 1.0
    best = sorted(table.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
    return tuple(
        OpRow(
            name=key[0] if isinstance(key, tuple) else str(key),
            category=key[1] if isinstance(key, tuple) else category,
            count=int(v[0]),
            self_s=v[1] / 1e9,
            share=v[1] / total,
        )
        for key, v in best
        if v[1] > 0
    )


def _top_host_ops(facts: TraceFacts | None) -> tuple[OpRow, ...]:
    if facts is None:
        return ()
    work = {k: v for k, v in facts.host_ops.items() if "wait" not in k[0].lower()}
    return _top(work, "runtime")


def _notes(s: Summary) -> tuple[Note, ...]:
    notes: list[Note] = []
    if s.status == "error":
        notes.append(
            Note("error", f"The cell raised {s.error}; the capture covers it up to the error.")
        )
    if s.pending:
        notes.append(
            Note(
                "info",
                "Quick summary from the metadata: reading the timeline takes longer than "
                "the time budget.",
            )
        )
    elif s.missing:
        notes.append(Note("warning", f"Incomplete summary: {s.missing[0]}."))
    if s.device.on_cpu or s.device.kind != "TPU":
        notes.append(Note("warning", s.device.statement))
    else:
        notes.append(Note("info", s.device.statement))
    for site in s.compiles.sites:
        if not site.recompiled:
            continue
        where = " › ".join(site.path)
        if site.warm_up:
            notes.append(
                Note(
                    "info",
                    f"'{site.path[-1]}' compiled in its first {site.compiled_runs} runs only "
                    f"(warm-up; in {where}).",
                )
            )
        elif site.compiled_runs >= 2:
            notes.append(
                Note(
                    "warning",
                    f"Recompiled: '{site.path[-1]}' (in {where}) compiled again in "
                    f"{site.compiled_runs} of its {site.runs} runs, {fmt_s(site.total_s)} in all. "
                    "Shapes or Python values change between runs; keep shapes fixed (pad or "
                    "bucket). PT_XLA_DEBUG_LEVEL=2, set before importing torch_xla, prints why.",
                )
            )
        else:
            notes.append(
                Note(
                    "warning",
                    f"Recompiled: the loop '{site.path[-1]}' compiled {site.compiles} times in one "
                    f"run ({fmt_s(site.total_s)}): its iterations build different graphs.",
                )
            )
    c = s.compiles
    if c.count and c.count >= 3 and not c.sites and s.label_source != "trace":
        notes.append(
            Note(
                "warning",
                f"{c.count} compilations in this cell; the timeline is needed to say where.",
            )
        )
    reads = [f for f in s.fallbacks if f.op == SCALAR_READ]
    others = [f for f in s.fallbacks if f.op != SCALAR_READ]
    if others:
        ops = ", ".join(f"{f.op} ×{f.count}" for f in others[:4])
        notes.append(
            Note(
                "warning",
                f"{len(others)} op(s) fell back to the CPU: {ops}. Each call copies "
                "tensors off the device and cuts the graph.",
            )
        )
    if reads:
        count = reads[0].count
        notes.append(
            Note(
                "warning" if count > 2 else "info",
                f"{count} tensor value(s) read back to the host ({SCALAR_READ}: .item(), "
                "float(t), printing)"
                + (
                    "; each waits for the device, so keep them out of the loop."
                    if count > 2
                    else "."
                ),
            )
        )
    if c.total_s and s.wall_s and c.total_s >= 0.5 * s.wall_s:
        notes.append(
            Note(
                "info",
                f"Compilation took {fmt_s(c.total_s)} of the cell's {fmt_s(s.wall_s)}; runs that "
                "reuse the same shapes skip it.",
            )
        )
    return tuple(notes)


def main(argv: list[str] | None = None) -> int:
    """``python -m xprof_magic._analysis RUN_DIR``: read the whole timeline, save the summary.

    The magic runs big summaries this way, in a process of their own, so that reading a huge
    capture neither holds the kernel's GIL nor grows the kernel's memory.
    """
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m xprof_magic._analysis RUN_DIR", file=sys.stderr)
        return 2
    summary = summarize(args[0], budget_s=None)
    save_summary(summary, args[0])
    return 0 if summary.complete else 1

