"""``python -m bench sync-steps``: what a step marker costs a torch_xla step that ends at a sync.

A loop whose steps end at ``torch_xla.sync()`` keeps a profiler marker on every step (the
step tracker's sync rule). The smallest realistic such step: one lazy op on a 4×4 tensor on
the CPU, then the sync (a graph looked up in the cache and run). Three variants, each a loop
of ``--steps`` steps under ``xp.start_trace``/``stop_trace``, run interleaved:

- ``sync``: the step alone;
- ``sync+marker``: a ``TraceMe("step", _r=1, step_num=i)`` around each step, the marker the
  backend opens (:meth:`~xprof_magic._backends.torch_xla.TorchXlaBackend.event`);
- ``sync+tracker``: the step tracker's own sync path, each sync reported to a
  :class:`~xprof_magic._cell.step_tracker.StepTracker` (its marker closed, the next one
  opened, its bookkeeping), as under ``%%xprof --steps``;
- ``marker alone`` and ``tracker alone``: the same markers, or the tracker's sync path, with
  no step, ten times as many: their cost per step without the step's noise around it.

Prints each variant's median, per step, and its ratio to ``sync``, then each alone's cost
against the step's.
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

_STEPPED = ("sync", "sync+marker", "sync+tracker")


def measure(steps: int = 2000, reps: int = 9) -> dict[str, Any]:
    """The loop's seconds per variant (``reps`` each, interleaved), medians and ratios."""
    import torch
    import torch_xla
    import torch_xla.debug.profiler as xp
    from torch_xla import _XLAC

    from xprof_magic._cell.step_tracker import StepTracker

    def event(name: str, **stats: Any) -> Any:
        return _XLAC.profiler.TraceMe(name, **stats)

    device = torch_xla.device()
    x = torch.ones(4, 4, device=device)

    def loop(kind: str) -> float:
        nonlocal x
        tracker = StepTracker(event, None, watch_syncs=True)
        if kind == "sync+tracker":
            tracker.arm()
        start = time.perf_counter()
        if kind == "marker alone":
            for i in range(steps * 10):
                with event("step", _r=1, step_num=i):
                    pass
        elif kind == "tracker alone":
            tracker.arm()
            for _ in range(steps * 10):
                tracker.synced(True)
        for i in range(steps if kind in _STEPPED else 0):
            if kind == "sync+marker":
                with event("step", _r=1, step_num=i):
                    x = x * 0.5 + 1.0
                    torch_xla.sync()
            else:
                x = x * 0.5 + 1.0
                torch_xla.sync()
                if kind == "sync+tracker":
                    tracker.synced(True)
        elapsed = time.perf_counter() - start
        if kind not in _STEPPED:
            elapsed /= 10
        tracker.finish()
        tracker.release()
        return elapsed

    names = [*_STEPPED, "marker alone", "tracker alone"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    server = xp.start_server(9419, only_on_master=False)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(-1, reps):  # the first round warms up
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            xp.start_trace(str(tmp / f"{name}-{rep}"))
            try:
                elapsed = loop(name)
            finally:
                xp.stop_trace()
            if rep >= 0:
                times[name].append(elapsed)
    del server
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "steps": steps,
        "times": times,
        "median_s": medians,
        "ratio": {name: value / medians["sync"] for name, value in medians.items()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sync-steps")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args(argv)
    result = measure(args.steps, args.reps)
    base = result["median_s"]["sync"] / result["steps"]
    for name, median in result["median_s"].items():
        per = median / result["steps"]
        if name in _STEPPED:
            tail = f"{result['ratio'][name]:.3f}× sync  (+{(per - base) * 1e6:5.2f} µs/step)"
        else:
            tail = f"{per / base:.2%} of a step"
        print(f"{name:13s} median {median * 1e3:8.1f} ms  {per * 1e6:7.1f} µs/step  {tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
