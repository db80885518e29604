"""``python -m xprof_magic._analysis.timeline.worker``: one share of a timeline pass.

Run in another process, started by :class:`.pool.Pool`: reads one pickled task from stdin
(the arguments of :func:`.parallel.read_parts`: serialized lines and what reading them
needs) and writes the pickled parts, or the exception that stopped it, to stdout.
"""

from __future__ import annotations

import pickle
import sys

from xprof_magic._analysis.timeline.parallel import read_parts

__all__ = ["main"]


def main() -> int:
    try:
        task = pickle.load(sys.stdin.buffer)
    except EOFError:  # the caller needed no help after all
        return 0
    try:
        answer: object = read_parts(*task)
    except Exception as error:
        answer = error
    pickle.dump(answer, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
