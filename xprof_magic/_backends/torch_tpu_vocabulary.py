"""TorchTPU's words: its compile-cache counter names, timeline events, advice and headings.

Kept apart from :mod:`xprof_magic._backends.torch_tpu` so that the analysis can read a
TorchTPU run without importing torch (seconds, and hundreds of MB once torch-tpu is
installed, since ``import torch`` then loads TorchTPU and libtpu). Counter names are the
fields of ``torch.tpu._get_cache_stats()`` in torch-tpu 0.2.0; the compile time is the sum
of its entries' ``compilation_duration``.
"""

from __future__ import annotations

from xprof_magic._backends import words

__all__ = [
    "CACHE_HITS",
    "CACHE_REQUESTS",
    "COMPILATIONS",
    "COMPILATION_DURATION",
    "PRIVATE_ROUTE",
    "PUBLIC_ROUTE",
    "ROUTE_KEY",
    "STEPS_RECOMPILED",
    "VOCABULARY",
]

COMPILATIONS = "num_compilations"
CACHE_HITS = "num_cache_hits"
CACHE_REQUESTS = "num_cache_reqs"
COMPILATION_DURATION = "compilation_duration"
STEPS_RECOMPILED = "the cell's steps"
"""Who the recompile note names: TorchTPU counts compilations, not compiled functions."""

ROUTE_KEY = "profiler route"
"""The run metadata's ``versions`` entry that says how the capture was made."""
PUBLIC_ROUTE = "torch.profiler.profile + torch.tpu.profiler.TpuProfilerConfig"
PRIVATE_ROUTE = "torch_tpu._internal.profiler._impl.start_trace (host only)"

VOCABULARY = words.Vocabulary(
    backend="torch_tpu",
    metrics=words.MetricNames(
        compile_time=COMPILATION_DURATION,
        compile_cache_hits=CACHE_HITS,
    ),
    headings=words.Headings(metrics="TorchTPU (torch.tpu._get_cache_stats()), this cell only"),
    timeline=words.TimelineNames(
        # Each eager PyTorch op, through TorchTPU's RecordFunction callback: runtime, not blocks.
        runtime_prefixes=("aten::",),
        # Each eager op launches its work on the device and returns (not seen without a TPU).
        launches=("aten::",),
        thread_roles={"python": "Python threads: your code and the PyTorch ops it calls"},
    ),
    advice=words.Advice(
        host_read_how=".item(), .cpu(), float(t), printing",
        recompile=(
            "TorchTPU compiles again for each new input shape or dtype: keep shapes fixed "
            "(pad or bucket). TORCH_TRACE=<dir>, set before starting Python, records a "
            "cache_hit and a reason per compilation."
        ),
        cpu_device=(
            "No TPU: TorchTPU has no tpu device here, so the tensors ran on the CPU and only "
            "the host was traced; these times say nothing about TPU speed."
        ),
    ),
    capture=words.CaptureWords(
        stop_trace="torch_tpu._internal.profiler._impl.stop_trace()",
        sync_label="torch.accelerator.synchronize() (--sync)",
        no_steps=(
            "TorchTPU runs eagerly, so a step is one iteration of the cell's loop, and the "
            "cell ran none; mark steps yourself with xprof_magic.step()"
        ),
        shrink="To shrink a capture, profile fewer steps (a shorter loop in the cell).",
        workers=(
            "To capture a worker, start TorchTPU's profiler server in it, "
            "torch_tpu._internal.profiler.start_server(9500 + rank), and capture it from "
            "here with %xprof capture localhost:<port> while it runs"
        ),
    ),
)
