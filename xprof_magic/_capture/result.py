"""A finished capture as its caller sees it: where the run is, how it went, what it holds.

:class:`CaptureResult` is what :func:`xprof_magic.last` returns and what the magic prints
under the cell (:meth:`CaptureResult.text`); the full summary is the analysis's job.
IPython-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from xprof_magic._cell import labels as _labels
from xprof_magic._cell.step_window import steps_line
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store
from xprof_magic._units import seconds, wrapped

__all__ = ["CaptureResult", "size_warning"]

_TEXT_LABEL_LINES = 12
# XProf's trace viewer shows at most about a million events (jax-ml/jax 21295); an xplane
# holds roughly 15 bytes an event (100k TraceMe events made 1.46 MB). Protobuf cannot read
# a message over 2 GiB at all.
TRACE_VIEWER_EVENT_CAP = 1_000_000
BYTES_PER_EVENT = 15
PROTOBUF_LIMIT_BYTES = 2 * 1024**3


def size_warning(xplane_bytes: int, shrink: str) -> str | None:
    """What a user should know about a capture this large, and how to shrink the next one.

    ``shrink``: the advice in the run's backend's words.
    """
    events = xplane_bytes // BYTES_PER_EVENT
    if xplane_bytes >= PROTOBUF_LIMIT_BYTES // 2:
        return (
            f"this capture is {xplane_bytes / 2**20:.0f} MB: near or past protobuf's 2 GB "
            f"limit, beyond which XProf cannot read it at all. {shrink}"
        )
    if events >= TRACE_VIEWER_EVENT_CAP:
        return (
            f"this capture holds about {events / 1e6:.1f} million events: XProf's trace "
            "viewer shows about a million at a time, so zoom in or pick a window; the other "
            f"tools read them all. {shrink}"
        )
    return None


@dataclass
class CaptureResult:
    """One finished capture: what ran, how it went, and where the run is stored.

    The viewer and the analysis attach to this object. The cell's value is not here:
    :meth:`~xprof_magic._capture.capture.Capture.run` returns it, stored or not.
    """

    run: str
    run_dir: Path
    logdir: Path
    wall_s: float
    status: str
    error: dict[str, str] | None
    labels: list[_labels.LabelStat]
    steps: list[float]
    backend: str
    device: str
    metadata: _metadata.RunMetadata
    messages: list[str] = field(default_factory=list)

    @classmethod
    def stored(
        cls,
        run_dir: Path,
        logdir: Path,
        metadata: _metadata.RunMetadata,
        labels: list[_labels.LabelStat],
        messages: list[str],
    ) -> CaptureResult:
        """The result of a run just stored in ``run_dir``, from the metadata stored with it."""
        error = metadata.error
        return cls(
            run=run_dir.name,
            run_dir=run_dir,
            logdir=logdir,
            wall_s=metadata.wall_s or 0.0,
            status=metadata.status,
            error=None if error is None else {"type": error.type, "message": error.message},
            labels=labels,
            steps=list(metadata.steps),
            backend=metadata.backend,
            device=metadata.device,
            metadata=replace(metadata, run=run_dir.name),
            messages=messages,
        )

    @property
    def hosts(self) -> tuple[str, ...]:
        return _store.hosts(self.run_dir)

    def text(self, blocks: bool = True) -> str:
        """The short plain-text summary printed under a cell.

        Its long lines are broken between words (:func:`~xprof_magic._units.wrapped`): the run,
        where it is stored, its steps and, with ``blocks``, the labelled blocks by the magic's
        timers (left out where the summary is shown: its table has the timeline's times, and a block
        is said once).
        """
        outcome = "ok" if self.error is None else f"failed: {self.error['type']}"
        lines = [
            f"xprof: run {self.run} ({outcome}) — {seconds(self.wall_s)} on {self.device}",
            f"  stored in {self.run_dir}",
        ]
        meta = self.metadata
        steps = steps_line(len(self.steps), meta.step_rule, meta.step_window, meta.steps_first)
        if steps:
            lines.append(f"  {steps}")
        rows = _label_rows(self.labels) if blocks else []
        if rows:
            lines.append("  labelled blocks, host time, largest first:")
            for depth, stat in rows[:_TEXT_LABEL_LINES]:
                count = f"  ×{stat.count}" if stat.count > 1 else ""
                lines.append(
                    f"    {seconds(stat.total_s):>9}  {'  ' * depth}{stat.path[-1]}{count}"
                )
            if len(rows) > _TEXT_LABEL_LINES:
                lines.append(f"    … {len(rows) - _TEXT_LABEL_LINES} more")
        lines.extend(f"  {m}" for m in self.messages)
        return wrapped("\n".join(lines))

    def __repr__(self) -> str:
        return self.text()


def _label_rows(stats: list[_labels.LabelStat]) -> list[tuple[int, _labels.LabelStat]]:
    """Labels as an indented tree, each level largest first."""
    children: dict[tuple[str, ...], list[_labels.LabelStat]] = {}
    for stat in stats:
        children.setdefault(stat.path[:-1], []).append(stat)
    rows: list[tuple[int, _labels.LabelStat]] = []

    def walk(parent: tuple[str, ...], depth: int) -> None:
        for stat in sorted(children.get(parent, []), key=lambda s: -s.total_s):
            rows.append((depth, stat))
            if stat.path and depth < 32:
                walk(stat.path, depth + 1)

    walk((), 0)
    return rows
