"""``python -m xprof_magic._analysis RUN_DIR``: the full summary, in a process of its own.

With ``-`` for ``RUN_DIR``, the folder is read from a line of standard input, after the reader's
imports (:class:`~xprof_magic._analysis.cache.Spare` starts it ahead); at the end of the input
with no line, it exits at once with status 0.

The notebook reads big summaries this way (:func:`~xprof_magic._analysis.cache.
summarize_in_subprocess`, which :func:`~xprof_magic._analysis.summaries.summary_of` calls), so
that reading a huge capture neither holds the kernel's GIL nor grows the kernel's memory.
The summary is saved beside the capture even when incomplete, since the caller reads it
from there; the exit status is 0 when it is complete, 1 when something was missing, 2 on
a usage error.
"""

from __future__ import annotations

import sys

from xprof_magic._analysis.cache import save_summary
from xprof_magic._analysis.stages import summarize

__all__ = ["main", "warm_up"]


def main(argv: list[str] | None = None) -> int:
    """Read the whole timeline of the run folder given, save its summary."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m xprof_magic._analysis RUN_DIR", file=sys.stderr)
        return 2
    if args == ["-"]:
        warm_up()
        line = sys.stdin.readline().strip()
        if not line:
            return 0
        args = [line]
    summary = summarize(args[0], budget_s=None)
    save_summary(summary, args[0])
    return 0 if summary.complete else 1


def warm_up() -> None:
    """What a summary loads on first use, loaded while the process waits for its run folder.

    The backends' words, each imported when a run of theirs is read.
    """
    from xprof_magic._backends.registry import BACKENDS, get_vocabulary

    for name in BACKENDS:
        get_vocabulary(name)


if __name__ == "__main__":
    raise SystemExit(main())
