"""What a summary lacks and what reading its run found wrong, in words.

A :class:`~xprof_magic._analysis.model.summary.Gap` says what could not be read; a
:class:`~xprof_magic._analysis.model.summary.Flaw` what was wrong though the summary stands.
Both are worded here, when the summary is shown.
"""

from __future__ import annotations

from xprof_magic._analysis.model.summary import Flaw, Gap, Note, Summary

__all__ = ["FATAL", "flaw_note", "gap_said", "gaps_said", "shown_flaws"]

FATAL = ("analysis failed", "no run folder")
"""The gaps that leave nothing to analyse: the reader sees only why."""


def gap_said(gap: Gap) -> str:
    """What ``gap`` leaves out of the summary, and why, as one clause (no final stop)."""
    what = gap.what
    if what == "analysis failed":
        kind = gap.names[0] if gap.names else "an error"
        return f"the analysis failed ({kind}: {gap.error}); please report it"
    if what == "no run folder":
        return f"the run folder {gap.path} does not exist or is not a folder"
    if what == "no metadata":
        return (
            f"no {gap.path}: wall time, status and the backend's metrics (compiles, "
            "transfers, CPU fallbacks) are unknown; was the run made by xprof_magic?"
        )
    if what == "metadata unusable":
        return f"{gap.error}; metrics and wall time are unknown"
    if what == "no timeline":
        return (
            f"no <host>.xplane.pb in {gap.path}: the profiler wrote no timeline, so labels "
            "from the trace, compile sites, ops and busy time are absent"
        )
    if what == "timeline unreadable":
        return f"the timeline {gap.path} could not be read ({gap.error})"
    if what == "timeline not read":
        why = (
            f"reading it takes longer than the {gap.budget_s:g} s budget"
            if gap.budget_s
            else "it was left for the full summary"
        )
        return (
            f"the timeline ({gap.mb or 0:.1f} MB) was not read: {why}, so labels and steps "
            "come from the magic's timers and compile sites, ops and busy time are absent"
        )
    if what == "timeline too large":
        return (
            f"the timeline ({gap.mb or 0:.0f} MB) is too large to read: protobuf cannot "
            "parse a message over 2 GB, so labels, steps and the backend's metrics come "
            "from the capture's metadata; profile fewer steps next time (--steps A:B traces "
            "only a window)"
        )
    if what == "other hosts":
        return f"only host {gap.path} is summarized; also captured: {', '.join(gap.names)}"
    if what == "labels not on timeline":
        lost = gap.names
        shown = ", ".join(repr(n) for n in lost[:3]) + (" …" if len(lost) > 3 else "")
        return f"{len(lost)} label(s) measured by the magic are not on the timeline: {shown}"
    return gap.error  # as saved: the sentence itself


def gaps_said(summary: Summary) -> tuple[str, ...]:
    """Each thing the summary lacks, in words, in the order it was found."""
    return tuple(gap_said(gap) for gap in summary.missing)


def flaw_note(flaw: Flaw) -> Note:
    """The note a reader sees for ``flaw``."""
    if flaw.what == "metadata fields":
        return Note("warning", f"{flaw.said}; those values are unknown.")
    return Note(flaw.level, flaw.said)


def _fatal_note(gap: Gap) -> Note:
    if gap.what == "analysis failed":
        kind = gap.names[0] if gap.names else "an error"
        return Note("error", f"No summary: the analysis failed with {kind}.")
    return Note("error", f"No capture at {gap.path}: check the run name or --logdir.")


def shown_flaws(summary: Summary) -> tuple[tuple[Note, ...], bool]:
    """The notes of what reading the run found wrong, and whether they are all a reader should see.

    They are all when nothing could be analysed: no run folder, an analysis that failed.
    """
    fatal = tuple(_fatal_note(gap) for gap in summary.missing if gap.what in FATAL)
    flaws = tuple(flaw_note(flaw) for flaw in summary.warnings)
    if fatal or any(note.level == "error" for note in flaws):
        return (*fatal, *flaws), True
    return flaws, False
