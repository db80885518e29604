"""``python -m bench tiny-steps``: what ``%%xprof --steps`` adds to a loop of 10,000 tiny steps.

One in-process IPython shell, JAX on the CPU, a jitted step on a 4×4 array (tens of
microseconds). The loop's own time, measured inside the cell with ``time.perf_counter`` (or,
``--clock cpu``, the thread's CPU time, ``time.thread_time``), not the capture's start, stop
and store, in these variants run interleaved:

- ``manual``: ``jax.profiler.start_trace`` / ``stop_trace`` by hand around the loop;
- ``manual+steps``: the same, with a step marker by hand around each iteration
  (``jax.profiler.StepTraceAnnotation``), which is what ``--steps`` draws;
- ``manual+stamps``: the same, each step's start appended to a list by the loop's iterator
  in C (``map``/``zip``), as ``--steps`` records tiny steps over a dict or set;
- ``manual+count``: the same, the loop's own iterator handed on by a
  :func:`itertools.chain`, as ``--steps`` counts tiny steps over a built-in sequence or a
  ``range`` (the position is read from the iterator at the sampler's looks and the loop's
  end, nothing per step): the floor of steps recorded in Python;
- ``manual+sampler``: the first, with the magic's line sampler
  (:mod:`xprof_magic._cell.sampler`) looking at the loop's thread at its full rate (a loop
  whose steps are not recorded in C): its cost alone;
- ``manual+wakes``: the first, with a thread that wakes as often as the sampler and takes the
  interpreter's lock, at the sampler's switch interval, but looks at nothing: what the
  hand-offs of the lock cost, without the looks;
- ``manual+sparse``: the sampler as in a loop whose steps are recorded in C
  (:data:`~xprof_magic._cell.sampler.SPARSE` times fewer looks);
- ``xprof (markers)``: the cell under ``%%xprof --steps`` with a profiler marker on every
  step, as before tiny steps were recorded in Python;
- ``xprof``: the cell under ``%%xprof --steps`` (labels, its first steps marked, the rest
  counted, their times spread between the sampler's looks and written into the timeline
  after the trace).

Prints the medians and each variant's ratio to ``manual``, and the same of the fastest runs
(on a shared machine the least disturbed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "measure"]

SETUP = """
import itertools, operator, sys, time, threading
import jax, jax.numpy as jnp
from xprof_magic._cell.sampler import LineSampler, framework_folders

@jax.jit
def tiny(W):
    return W * 0.5 + 1.0

W = jnp.ones((4, 4))
W = tiny(W)

class Wakes(LineSampler):
    def _look(self, weight=1):
        pass
"""

LOOP = """
_t = CLOCK()
for i in range(STEPS):
    W = tiny(W)
jax.block_until_ready(W)
elapsed = CLOCK() - _t
"""


STEPPED = """
for i in range(STEPS):
    with jax.profiler.StepTraceAnnotation("step", step_num=i):
        W = tiny(W)
jax.block_until_ready(W)
elapsed = CLOCK() - _t
"""


STAMPED = """
_stamps = []
_stamped = map(_stamps.append, iter(time.time_ns, None))
for i in map(operator.itemgetter(0), zip(range(STEPS), _stamped)):
    W = tiny(W)
jax.block_until_ready(W)
elapsed = CLOCK() - _t
"""


COUNTED = """
for i in itertools.chain.from_iterable([iter(range(STEPS))]):
    W = tiny(W)
jax.block_until_ready(W)
elapsed = CLOCK() - _t
"""


def _manual(
    logdir: str,
    sampled: str = "",
    stepped: bool = False,
    stamped: bool = False,
    counted: bool = False,
) -> str:
    """``sampled``: the sampler's class, and its arguments past the frameworks."""
    body = STEPPED if stepped else LOOP.replace("_t = CLOCK()", "")
    if stamped:
        body = STAMPED
    if counted:
        body = COUNTED
    start = "_t = CLOCK()\n"
    if sampled:
        kind, _, rest = sampled.partition(",")
        start = (
            f"_s = {kind}(threading.get_ident(), sys._getframe().f_code.co_filename,"
            f" framework_folders(){',' + rest if rest else ''})\n_s.start()\n" + start
        )
    stop = "_s.stop()\n" if sampled else ""
    return f"jax.profiler.start_trace({logdir!r})\n{start}{body}{stop}jax.profiler.stop_trace()\n"


def measure(steps: int = 10_000, reps: int = 5, clock: str = "wall") -> dict[str, Any]:
    """The loop's seconds per variant (``reps`` each, interleaved), medians and ratios.

    ``clock``: ``wall`` (``time.perf_counter``) or ``cpu``: the cell thread's own CPU time
    (``time.thread_time``), which a busy machine disturbs far less (the time the thread waits
    for a core is left out, and with it the looking thread's own work: the hand-offs of the
    interpreter's lock still count).
    """
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    assert ip is not None
    ip.run_line_magic("load_ext", "xprof_magic")
    assert ip.run_cell(SETUP).success
    ip.user_ns["STEPS"] = steps
    ip.user_ns["CLOCK"] = time.thread_time if clock == "cpu" else time.perf_counter
    tmp = Path(tempfile.mkdtemp(prefix="bench-tiny-"))
    variants = {
        "manual": _manual(str(tmp / "manual")),
        "manual+steps": _manual(str(tmp / "stepped"), stepped=True),
        "manual+stamps": _manual(str(tmp / "stamped"), stamped=True),
        "manual+count": _manual(str(tmp / "counted"), counted=True),
        "manual+sampler": _manual(str(tmp / "sampled"), "LineSampler"),
        "manual+wakes": _manual(str(tmp / "woken"), "Wakes"),
        "manual+sparse": _manual(str(tmp / "sparse"), "LineSampler,fast=lambda: True"),
        "xprof (markers)": (
            f"%%xprof --logdir {tmp / 'marked'} --no-display --steps --backend jax\n{LOOP}"
        ),
        "xprof": f"%%xprof --logdir {tmp / 'xprof'} --no-display --steps --backend jax\n{LOOP}",
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for cell in variants.values():  # warm each once
        assert ip.run_cell(cell).success
    from xprof_magic._cell import step_tracker as _steps

    fast_below = _steps.FAST_BELOW_NS
    order = list(variants)
    for rep in range(reps):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            # "xprof (markers)": a marker per step throughout, as before steps were recorded
            # in Python (no step is short enough to be).
            _steps.FAST_BELOW_NS = 0 if name == "xprof (markers)" else fast_below
            try:
                assert ip.run_cell(variants[name]).success
            finally:
                _steps.FAST_BELOW_NS = fast_below
            times[name].append(float(ip.user_ns["elapsed"]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    least = {name: min(values) for name, values in times.items()}
    return {
        "steps": steps,
        "times": times,
        "median_s": medians,
        "min_s": least,
        "ratio": {name: value / medians["manual"] for name, value in medians.items()},
        "min_ratio": {name: value / least["manual"] for name, value in least.items()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tiny-steps")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="the loop's wall time, or its thread's CPU time (steadier on a busy machine)",
    )
    args = parser.parse_args(argv)
    result = measure(args.steps, args.reps, args.clock)
    for name, median in result["median_s"].items():
        per = median / result["steps"] * 1e6
        ratio, least = result["ratio"][name], result["min_ratio"][name]
        print(
            f"{name:17s} median {median * 1e3:8.1f} ms  {per:6.1f} µs/step  {ratio:.3f}× manual"
            f"  (fastest run: {least:.3f}× manual's fastest)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
