"""Two runs side by side: the same quantities in rows, and what differs in kind, as data.

Rows cover the two diagnoses (verdict and each category's share of step time), the device,
wall time, steps, compilations, runtime figures, CPU fallbacks and every labelled block, the
blocks of both runs merged into one tree. When B is the same cell after the fix A's verdict
asks for (its share fell by 5 points or more), A's predicted gain (:mod:`.gain`) stands
beside the measured one: the ratio of the two runs' mean steps. The words (the notes, the
tables) are the render stage's (:mod:`~xprof_magic._analysis.render.comparison_words`).
"""

from __future__ import annotations

from xprof_magic._analysis.diagnosis.gain import step_time
from xprof_magic._analysis.model.comparison import CompareRow, Comparison
from xprof_magic._analysis.model.diagnosis import Gain
from xprof_magic._analysis.model.summary import Summary

__all__ = ["MOVED", "compare"]

MOVED = 0.05
"""A category's share of step time that moved by this much (5 points) is said as moved."""


def compare(a: Summary, b: Summary) -> Comparison:
    """Put two runs side by side: device, wall, steps, compiles, fallbacks, labels."""
    rows = [
        *_diagnosis_rows(a, b),
        *_row("run", "device", a.device.kind, b.device.kind, "text"),
        *_row("run", "status", a.status, b.status, "text"),
        *_row("run", "wall time", a.wall_s, b.wall_s, "s"),
        *_row("run", "device memory peak", _peak(a), _peak(b), "bytes"),
        *_step_rows(a, b),
        *_compile_rows(a, b),
        *_runtime_rows(a, b),
        *_fallback_rows(a, b),
        *_label_rows(a, b),
    ]
    x, y = _shares(a), _shares(b)
    verdicts = tuple((s.diagnosis.verdict, s.diagnosis.share) for s in (a, b)) if x or y else ()
    return Comparison(
        a.run,
        b.run,
        tuple(rows),
        verdicts=verdicts,
        moves=_moves(x, y),
        devices=(a.device.kind, b.device.kind),
        incomplete=tuple((which, s.missing[0]) for which, s in (("A", a), ("B", b)) if s.missing),
        predicted=_predicted(a, x, y),
        step_s=_step_times(a, b),
    )


def _predicted(a: Summary, x: dict[str, float], y: dict[str, float]) -> Gain | None:
    """A's estimate of its fix's gain, where B, the run after the fix, shows the fix removed time.

    Only where A's verdict has a cost to remove and B, the run after the fix, has at least
    :data:`MOVED` less of it (else no fix, nothing to measure).
    """
    d = a.diagnosis
    if d.verdict in ("device", "unknown") or d.gain is None:
        return None
    fixed = x.get(d.verdict, 0.0) - y.get(d.verdict, 0.0) >= MOVED
    return d.gain if fixed else None


def _step_times(a: Summary, b: Summary) -> tuple[float, float] | None:
    """The two runs' mean steps, as the gain estimate measures them."""
    x, y = step_time(a.diagnosis), step_time(b.diagnosis)
    return (x, y) if x and y else None


def _shares(s: Summary) -> dict[str, float]:
    parts = s.diagnosis.breakdown
    if not parts.categories or parts.total_s() <= 0:
        return {}
    return {c: parts.share(c, bool(parts.steps)) for c in parts.categories if c != "idle"}


def _verdict(s: Summary) -> str:
    d = s.diagnosis
    return d.verdict if d.share is None else f"{d.verdict} ({d.share:.0%})"


def _moves(x: dict[str, float], y: dict[str, float]) -> tuple[tuple[str, float, float], ...]:
    """The categories whose share moved by :data:`MOVED` or more, largest move first."""
    changes = sorted(
        (c for c in dict.fromkeys([*x, *y]) if abs(x.get(c, 0.0) - y.get(c, 0.0)) >= MOVED),
        key=lambda c: -abs(x.get(c, 0.0) - y.get(c, 0.0)),
    )
    return tuple((c, x.get(c, 0.0), y.get(c, 0.0)) for c in changes)


def _diagnosis_rows(a: Summary, b: Summary) -> list[CompareRow]:
    """The verdicts, then each category's share of step time, as text."""
    x, y = _shares(a), _shares(b)
    if not x and not y:
        return []
    rows = _row("diagnosis", "verdict", _verdict(a), _verdict(b), "text")
    for c in dict.fromkeys([*x, *y]):
        if x.get(c, 0.0) or y.get(c, 0.0):
            rows += _row("diagnosis", c, f"{x.get(c, 0.0):.0%}", f"{y.get(c, 0.0):.0%}", "text")
    return rows


def _row(
    section: str,
    name: str,
    x: float | str | None,
    y: float | str | None,
    unit: str,
    path: tuple[str, ...] = (),
) -> list[CompareRow]:
    """One row, or none where neither run has the value."""
    if x is None and y is None:
        return []
    return [CompareRow(section, name, x, y, unit, path)]


def _step_rows(a: Summary, b: Summary) -> list[CompareRow]:
    rows: list[CompareRow] = []
    for name, get in (
        ("count", lambda s: float(s.count)),
        ("first step", lambda s: s.first_s),
        ("median of the rest", lambda s: s.rest_median_s),
        ("max of the rest", lambda s: s.rest_max_s),
    ):
        rows += _row(
            "steps",
            name,
            get(a.steps) if a.steps else None,
            get(b.steps) if b.steps else None,
            "count" if name == "count" else "s",
        )
    return rows


def _compile_rows(a: Summary, b: Summary) -> list[CompareRow]:
    return [
        *_row("compile", "compilations", _opt(a.compiles.count), _opt(b.compiles.count), "count"),
        *_row("compile", "compile time", a.compiles.total_s, b.compiles.total_s, "s"),
        *_row(
            "compile",
            "blocks that recompiled",
            float(sum(s.recompiled and not s.warm_up for s in a.compiles.sites)),
            float(sum(s.recompiled and not s.warm_up for s in b.compiles.sites)),
            "count",
        ),
    ]


def _runtime_rows(a: Summary, b: Summary) -> list[CompareRow]:
    rows: list[CompareRow] = []
    for label, ta, tb in (
        ("executions", a.executions, b.executions),
        ("to device", a.to_device, b.to_device),
        ("from device", a.from_device, b.from_device),
    ):
        rows += _row(
            "runtime",
            f"{label} (count)",
            _opt(ta.count if ta else None),
            _opt(tb.count if tb else None),
            "count",
        )
        rows += _row(
            "runtime",
            f"{label} (time)",
            ta.total_s if ta else None,
            tb.total_s if tb else None,
            "s",
        )
    return rows


def _fallback_rows(a: Summary, b: Summary) -> list[CompareRow]:
    fa = {f.op: f.count for f in a.fallbacks}
    fb = {f.op: f.count for f in b.fallbacks}
    return [
        row
        for op in list(fa) + [op for op in fb if op not in fa]
        for row in _row("CPU fallbacks", op, float(fa.get(op, 0)), float(fb.get(op, 0)), "count")
    ]


def _label_rows(a: Summary, b: Summary) -> list[CompareRow]:
    """The labels of both runs as one tree: A's order, then what only B has."""
    la = {(r.thread, r.path): r for r in a.labels}
    lb = {(r.thread, r.path): r for r in b.labels}
    rows: list[CompareRow] = []
    for key in _tree_order(list(la) + [k for k in lb if k not in la]):
        ra, rb = la.get(key), lb.get(key)
        name = (f"[{key[0]}] " if key[0] else "") + key[1][-1]
        rows += _row(
            "labels", name, ra.total_s if ra else None, rb.total_s if rb else None, "s", key[1]
        )
    return rows


LabelKey = tuple[str, tuple[str, ...]]


def _tree_order(keys: list[LabelKey]) -> list[LabelKey]:
    """Label keys of two runs merged into one tree.

    Each block under its parent, siblings in order of first appearance (A's order, then B's
    additions).
    """
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


def _peak(s: Summary) -> float | None:
    """The device memory's peak in the cell (None: no figures)."""
    return s.memory.device.peak_bytes if s.memory.device is not None else None


def _opt(value: int | None) -> float | None:
    return None if value is None else float(value)
