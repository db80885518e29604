"""What the live device-memory figures cost the bench's training cell: ``python -m bench
memory-sampling``.

``%%xprof`` asks the backend for the device's memory at the end of every labelled block
(:meth:`~xprof_magic._cell.label_times.Recorder.sample`), where the runtime keeps such
figures (a TPU or a GPU); XLA's CPU client keeps none, so here the first answer, none, stops
the asking. To measure what the asking costs where it goes on, the same training cell
(:data:`bench.cells.TRAIN`, two labelled blocks a step) runs under ``%%xprof`` in one
real kernel, interleaved: as shipped (none on the CPU), and with the backend answering each
time as a chip does (a dict built per call, as ``jax.Device.memory_stats()`` returns one).
Prints the medians and their ratio, the target being at most 1.02.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.cells import SETUP, TRAIN
from tests._kernel import Kernel
from xprof_magic._runs import store as _store

__all__ = ["main"]

ANSWERING = """
from xprof_magic._backends import torch_xla as _b
def _figures(self):
    stats = {"bytes_in_use": 1.0e9, "peak_bytes_in_use": 1.2e9, "bytes_limit": 16.0e9}
    return stats["bytes_in_use"], stats["peak_bytes_in_use"], stats["bytes_limit"]
_b.TorchXlaBackend.memory = _figures
"""
SHIPPED = """
from xprof_magic._backends import torch_xla as _b
_b.TorchXlaBackend.memory = _SHIPPED
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory-sampling")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    logdir = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    kernel = Kernel(extra={"XPROF_MAGIC_NO_SERVER": "1"})
    try:
        kernel.timed(SETUP)
        kernel.timed(f"STEPS = {args.steps}\n%load_ext xprof_magic")
        kernel.timed(
            "from xprof_magic._backends import torch_xla as _b\n"
            "_SHIPPED = _b.TorchXlaBackend.memory"
        )
        cell = f"%%xprof --logdir {logdir} --no-display\n{TRAIN}"
        kernel.timed(cell)  # compiled once, the viewer's question settled
        times: dict[str, list[float]] = {"shipped": [], "answering": []}
        for rep in range(args.reps):
            order = ["shipped", "answering"] if rep % 2 == 0 else ["answering", "shipped"]
            for name in order:
                kernel.timed(SHIPPED if name == "shipped" else ANSWERING)
                times[name].append(kernel.timed(cell)[2])
    finally:
        kernel.close()
    meta = _store.runs(logdir)[0].metadata or {}
    samples = len(meta.get("memory", []))
    shipped, answering = (statistics.median(times[k]) for k in ("shipped", "answering"))
    print(f"training cell, {args.steps} steps, {args.reps} runs each, interleaved, medians:")
    print(f"  as shipped (the CPU client answers none): {shipped * 1e3:.1f} ms")
    print(f"  answering at every block's end, as a chip: {answering * 1e3:.1f} ms")
    print(f"  ratio {answering / shipped:.3f} (target ≤ 1.02); samples in the last run: {samples}")
    per_call = _per_sample_s()
    print(
        f"  one sample costs {per_call * 1e6:.1f} µs here: {samples} of them are "
        f"{samples * per_call * 1e3:.2f} ms, {samples * per_call / shipped:.3%} of the cell"
    )
    return 0


def _per_sample_s(calls: int = 20_000) -> float:
    """The recorder's own cost of one sample, the backend answering as a chip does."""
    import time

    from xprof_magic._cell.label_times import Recorder

    def figures() -> tuple[float, float, float]:
        stats = {"bytes_in_use": 1.0e9, "peak_bytes_in_use": 1.2e9, "bytes_limit": 16.0e9}
        return stats["bytes_in_use"], stats["peak_bytes_in_use"], stats["bytes_limit"]

    best = float("inf")
    for _ in range(5):
        recorder = Recorder(lambda name, **stats: None)  # type: ignore[arg-type,return-value]
        recorder.sampler = figures
        started = time.perf_counter()
        for _ in range(calls):
            recorder.sample(("block",))
        best = min(best, (time.perf_counter() - started) / calls)
    return best
