"""The headlines of a summary: one small rule per thing a reader should notice first.

Each rule looks at a finished :class:`Summary` and says zero or more :class:`Note`; the
order of :data:`RULES` is the order the notes are shown in. Advice that depends on the
backend (how to see why a graph recompiled, what a fallback costs) comes from its
:class:`~xprof_magic._backends.Vocabulary`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from xprof_magic._analysis.model.diagnosis import HIGHLY_INPUT, MODERATELY_INPUT
from xprof_magic._analysis.model.summary import CompileSite, Note, Summary
from xprof_magic._analysis.render.gaps import gap_said, shown_flaws
from xprof_magic._analysis.render.headline import said
from xprof_magic._analysis.render.memory_section import growth_note
from xprof_magic._backends import NEUTRAL, Vocabulary
from xprof_magic._backends.registry import capabilities, get_vocabulary
from xprof_magic._units import seconds

__all__ = ["RULES", "Rule", "device_statement", "notes_for", "notes_of"]

Rule = Callable[[Summary, Vocabulary], Iterator[Note]]


def cell_raised(s: Summary, words: Vocabulary) -> Iterator[Note]:
    if s.status == "error":
        yield Note("error", f"The cell raised {s.error}; the capture covers it up to the error.")


def incomplete(s: Summary, words: Vocabulary) -> Iterator[Note]:
    if s.pending:
        yield Note(
            "info",
            "Quick summary from the metadata: reading the timeline takes longer than "
            "the time budget.",
        )
    elif s.missing:
        yield Note("warning", f"Incomplete summary: {gap_said(s.missing[0])}.")


def device_statement(s: Summary, words: Vocabulary | None = None) -> str:
    """The device that ran the cell, said plainly (``words``: the summary's backend's)."""
    d = s.device
    what = f"{d.kind} ({d.name})" if d.name else d.kind
    if s.saved_words is not None and s.saved_words.device:
        return s.saved_words.device
    if d.on_cpu:
        return (words or get_vocabulary(s.backend)).advice.cpu_device
    if d.kind == "unknown":
        return "The device is unknown: no metadata and no device activity in the timeline."
    if d.planes is None:
        return f"Ran on {what}."
    if not d.planes:
        return (
            f"Ran on {what}, but the timeline holds no {d.kind} activity: nothing reached the "
            "device, or device tracing was off."
        )
    count = f"{d.planes} {d.kind}s" if d.planes > 1 else f"one {d.kind}"
    return f"Ran on {what}: {count} in the timeline."


def device(s: Summary, words: Vocabulary) -> Iterator[Note]:
    known = s.device.kind not in ("CPU", "unknown") and not s.device.silent
    level = "info" if known else "warning"
    yield Note(level, device_statement(s, words))


def diagnosis(s: Summary, words: Vocabulary) -> Iterator[Note]:
    """The verdict in words, first after the device; then input that is only moderate."""
    d = s.diagnosis
    verdict = said(s)
    if verdict.headline:
        yield Note(verdict.level, verdict.headline)
    # A wait that recurs: the verdict's steady steps, less the first step's fill of the pipeline.
    parts = d.recurring()
    if d.verdict not in ("input", "unknown") and parts.categories:
        of_steps = bool(parts.steps)
        share = parts.share("input", of_steps)
        made = parts.made(of_steps) >= 0.5 * parts.seconds("input", of_steps)
        what = (
            "is making batches in your own Python and NumPy" if made else "waits for the next batch"
        )
        fix = "making batches" if made else d.input_cause or "input"
        advice = words.advice.fixes.get(fix, "")
        if MODERATELY_INPUT <= share < HIGHLY_INPUT:
            yield Note(
                "info",
                f"Moderately input-bound (XProf: 5% to 20%): {share:.0%} of step time {what}. "
                f"{advice}".rstrip(),
            )


def recompiled(s: Summary, words: Vocabulary) -> Iterator[Note]:
    for site in s.compiles.sites:
        if not site.recompiled:
            continue
        where = " › ".join(site.path)
        if site.warm_up:
            yield Note(
                "info",
                f"'{site.path[-1]}' compiled in its first {site.compiled_runs} runs only "
                f"(warm-up; in {where}).",
            )
        elif site.compiled_runs >= 2:
            yield Note(
                "warning",
                f"Recompiled: '{site.path[-1]}' (in {where}) compiled again "
                f"{_again(site)}, {seconds(site.total_s)} in all. {words.advice.recompile}",
            )
        elif site.path[-1].lstrip().startswith(("for ", "while ", "async for ")):
            yield Note(
                "warning",
                f"Recompiled: the loop '{site.path[-1]}' compiled {site.compiles} times in one "
                f"run ({seconds(site.total_s)}): its iterations build different graphs.",
            )
        elif not capabilities(words.backend).eager_compiles:
            yield Note(
                "warning",
                f"Recompiled: '{site.path[-1]}' (in {where}) compiled {site.compiles} graphs "
                f"in one run ({seconds(site.total_s)}): it builds a new graph on each inner "
                f"call, e.g. for a growing length. {words.advice.recompile}",
            )


def _again(site: CompileSite) -> str:
    """Which later runs (or steps) compiled again.

    "in run 4 of its 6 (first compiled in run 1)", or by the numbers of the steps they ran in, as
    the profiler numbers them.
    """
    in_steps = len(site.first_steps) == len(site.first_runs) > 0
    numbers = site.first_steps if in_steps else tuple(i + 1 for i in site.first_runs)
    if not numbers:
        return f"in {site.compiled_runs - 1} later runs of its {site.runs}"
    noun = "step" if in_steps else "run"
    first, later = numbers[0], numbers[1:]
    again = site.compiled_runs - 1
    named = [str(n) for n in later]
    if again > len(named):
        listed = ", ".join(named) + ", …"
    elif len(named) == 1:
        listed = named[0]
    else:
        listed = ", ".join(named[:-1]) + " and " + named[-1]
    where = f"in {noun} {listed}" if again == 1 else f"{again} times, in {noun}s {listed}"
    of = "" if in_steps else f" of its {site.runs}"
    return f"{where}{of} (first compiled in {noun} {first})"


def recompiled_functions(s: Summary, words: Vocabulary) -> Iterator[Note]:
    """A function compiled more than once in the cell, with the backend's reason where it gave one.

    Or once, when the backend says it had compiled before (in an earlier cell).
    """
    reasons = dict(reversed(s.compiles.reasons))
    for name, count, total_s in s.compiles.functions:
        inner = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
        why = reasons.pop(inner, None)
        if capabilities(words.backend).eager_compiles and inner.startswith("_") and not why:
            continue  # a library helper compiled once per shape of an eager call
        if count >= 2:
            what = f"compiled {count} times in this cell ({seconds(total_s)} in all)"
        elif why:
            what = f"compiled again after an earlier cell ({seconds(total_s)})"
        else:
            continue
        yield Note(
            "warning",
            f"Recompiled: {name} {what}" + (f": {why}." if why else f". {words.advice.recompile}"),
        )
    # A version of the backend that names no compiled function still says why one traced again.
    for name, why in reasons.items():
        if not s.compiles.functions:
            yield Note("warning", f"Recompiled: {name} compiled again: {why}.")


def compiled_somewhere(s: Summary, words: Vocabulary) -> Iterator[Note]:
    c = s.compiles
    if c.count and c.count >= 3 and not c.sites and s.label_source != "trace":
        yield Note(
            "warning",
            f"{c.count} compilations in this cell; the timeline is needed to say where.",
        )


def fell_back(s: Summary, words: Vocabulary) -> Iterator[Note]:
    others = [f for f in s.fallbacks if f.op != words.metrics.host_read]
    if others:
        ops = ", ".join(f"{f.op} ×{f.count}" for f in others[:4])
        yield Note(
            "warning",
            f"{len(others)} op(s) fell back to the CPU: {ops}. {words.advice.fallback_effect}",
        )


def read_back(s: Summary, words: Vocabulary) -> Iterator[Note]:
    reads = [f for f in s.fallbacks if f.op == words.metrics.host_read]
    if reads:
        count = reads[0].count
        how = f"{words.metrics.host_read}: {words.advice.host_read_how}"
        yield Note(
            "warning" if count > 2 else "info",
            f"{count} tensor value(s) read back to the host ({how})"
            + ("; each waits for the device, so keep them out of the loop." if count > 2 else "."),
        )


def compile_heavy(s: Summary, words: Vocabulary) -> Iterator[Note]:
    c = s.compiles
    if c.total_s and s.wall_s and c.total_s >= 0.5 * s.wall_s:
        yield Note(
            "info",
            f"Compilation took {seconds(c.total_s)} of the cell's {seconds(s.wall_s)}; runs "
            "that reuse the same shapes skip it.",
        )


def memory(s: Summary, words: Vocabulary) -> Iterator[Note]:
    """A loop whose device memory grows every step (a leak), said plainly."""
    note = growth_note(s)
    if note:
        yield Note("warning", note)


RULES: tuple[Rule, ...] = (
    cell_raised,
    incomplete,
    device,
    diagnosis,
    memory,
    recompiled,
    recompiled_functions,
    compiled_somewhere,
    fell_back,
    read_back,
    compile_heavy,
)


def notes_for(summary: Summary, words: Vocabulary = NEUTRAL) -> tuple[Note, ...]:
    """Every rule's notes, in the order of :data:`RULES`."""
    return tuple(note for rule in RULES for note in rule(summary, words))


def notes_of(summary: Summary) -> tuple[Note, ...]:
    """The headlines a reader sees, in the summary's backend's words.

    Every rule's, then what reading the run found wrong (a summary of schema 2: the notes it was
    saved with).
    """
    if summary.saved_words is not None:
        return summary.saved_words.notes
    flaws, alone = shown_flaws(summary)
    if alone:
        return flaws  # no analysis to word: only why (no run folder, a failure)
    return (*notes_for(summary, get_vocabulary(summary.backend)), *flaws)
