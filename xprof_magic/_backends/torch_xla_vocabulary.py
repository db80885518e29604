"""PyTorch/XLA's words: its metric names, timeline events, thread roles, advice and headings.

Kept apart from :mod:`xprof_magic._backends.torch_xla` so that the analysis can read a
torch_xla run without importing torch_xla (seconds, and gigabytes in a summary subprocess).
Metric names are those of ``torch_xla.debug.metrics`` in torch_xla 2.9.0; event and thread
names were read on 2.9.0 captures. The timeline reader (:mod:`xprof_magic._analysis.timeline.read`)
takes its event and thread names from here; a second backend's reader would take them from
that backend's vocabulary.
"""

from __future__ import annotations

from xprof_magic._backends import words

__all__ = [
    "COMPILE_EVENTS",
    "CPU_CLIENT_GROUPS",
    "RUNTIME_NAMES",
    "RUNTIME_PREFIXES",
    "STEP_ENDS",
    "THREAD_ROLES",
    "VOCABULARY",
]

COMPILE_EVENTS = ("XLAGraphExecutor::Compile", "PjRtComputationClient::Compile")
RUNTIME_NAMES = frozenset(
    {
        "StepMarker",
        "SyncLiveTensorsGraph",
        "SyncTensorsGraph",
        "SyncTensorsGraphInternal",
        "ScheduleSyncTensorsGraph",
        "CollectSyncTensors",
        "ExtractIRAndPrepareXlaData_",
        "RunPostOrder",
        "SetTensorData",
        "TensorCollectionBarrier",
        "D2H Dispatch",
        "H2D Dispatch",
    }
)
RUNTIME_PREFIXES = ("Wait for ", "ThreadpoolListener", "end: ")
# torch_xla.sync() (xm.mark_step(), MpDeviceLoader's step-end sync, a StepTrace's exit,
# xm.optimizer_step(barrier=True)): the pending graph built, compiled and launched, after
# TensorCollectionBarrier waited for the one before. The same events launch each execution.
STEP_ENDS = frozenset({"StepMarker", "SyncLiveTensorsGraph", "SyncTensorsGraph"})
CPU_CLIENT_GROUPS = ("tf_XLAPjRtCpuClient", "tf_XLAEigen")
THREAD_ROLES = {
    "python": "Python threads: your code, lazy tracing, compile calls",
    "tf_XLAPjRtCpuClient": "XLA CPU client: runs the compiled XLA ops",
    "tf_XLAEigen": "Eigen pool: parallel parts of XLA ops",
    "tf_xla-cpu-codegen": "XLA CPU codegen: compilation",
    "tf_pytorchxla": "torch_xla runtime: launches executions",
}
_DATA_DEPENDENT = "its output shape depends on the data"
FIXES = {
    **words.NEUTRAL_FIXES,
    "input": "Prefetch: load through MpDeviceLoader, or decode in DataLoader workers "
    "(num_workers > 0; more of them, or a larger prefetch_factor, where it has some), so the "
    "next batch is ready when the step ends.",
    "host": "Do more per step: turn the inner Python loop into fewer, larger tensor ops, or "
    "compile the step (torch_xla.compile), so tracing stops dominating.",
    "device loader": "The loop already reads through MpDeviceLoader, which copies ahead: its "
    "DataLoader does not keep up with the step. Give the DataLoader more workers "
    "(num_workers) or a deeper prefetch (prefetch_factor, MpDeviceLoader's "
    "loader_prefetch_size), or make each batch cheaper to read and collate.",
    "few cores": "Make the batches cheaper rather than elsewhere: tokenize or decode the "
    "dataset once, before the loop, and iterate over the tensors, or vectorize the collate_fn "
    "and the Dataset's __getitem__ over the whole batch; DataLoader workers (num_workers > 0) "
    "pay off on a machine with more cores.",
    "busy workers": "Make the batches cheaper rather than by more workers: tokenize or decode "
    "the dataset once, before the loop, and iterate over the tensors, or vectorize the "
    "collate_fn and the Dataset's __getitem__ over the whole batch; more DataLoader workers "
    "(num_workers), or a larger prefetch_factor, pay off on a machine with more cores.",
    "making batches": "That line runs no torch op, so torch_xla.compile would not shorten "
    "it: it is the input pipeline. Make the batches off the step's path: vectorize the NumPy "
    "over the whole batch, make them once before the loop if they do not change, or move the "
    "work into a Dataset's __getitem__ or collate_fn read by a DataLoader with num_workers > 0.",
    "printing": "Print less often (every N steps), and move what you print to the host "
    "once first (t.cpu(), loss.item()): printing an XLA tensor runs torch's formatting as "
    "XLA ops, each traced, compiled and read back; torch_xla.compile would not shorten it.",
    "own code": "That line runs no torch op, so torch_xla.compile would not shorten it: do it "
    "less often (every N steps), vectorize it, or move it out of the loop.",
    "compile": "Keep shapes and Python values fixed between steps, so each graph compiles "
    "once; PT_XLA_DEBUG_LEVEL=2 prints why a graph compiled.",
    "growing graph": "Call torch_xla.sync() at the end of each iteration: without it the "
    "pending graph grows every step and each .item() compiles a new one.",
    "changing shapes": "Pad the batches to a few fixed sizes (bucketing) or drop the last "
    "partial batch (drop_last=True), so the graphs compiled once are reused.",
    "changing values": "Pass numbers that change between steps as device tensors "
    "(torch.tensor(p, device=dev)) or index with tensors, not Python numbers that the graph "
    "bakes in (an exponent in x.pow(p), an index x[i]); PT_XLA_DEBUG_LEVEL=2 prints why a "
    "graph compiled.",
    "transfer": "Keep tensors on the device between steps: move the data once, before the "
    "loop, or let MpDeviceLoader copy the next batch while the step runs.",
    "sync": "Keep .item(), print(t) and .cpu() out of the loop: read values once, after it, "
    "or every N steps.",
    "memory": "Make the step fit the device: a smaller batch, bf16 (torch.autocast('xla')), "
    "gradient checkpointing of the largest layers (torch_xla.utils.checkpoint), or SPMD "
    "sharding of the model across devices.",
    "collective": "The chips wait on collectives (xm.all_reduce, the gradients' all-reduce in "
    "xm.optimizer_step): accumulate gradients over several steps before reducing, or shard "
    "with SPMD so that less crosses the chips.",
}

VOCABULARY = words.Vocabulary(
    backend="torch_xla",
    metrics=words.MetricNames(
        compile_time="CompileTime",
        compile_cache_hits="CachedCompile",
        execute_time="ExecuteTime",
        to_device_time="TransferToDeviceTime",
        to_device_bytes="OutboundData",
        from_device_time="TransferFromDeviceTime",
        from_device_bytes="InboundData",
        fallback_prefix="aten::",
        host_read="aten::_local_scalar_dense",
        host_copy_ns="TensorToData",
    ),
    timeline=words.TimelineNames(
        compile_events=COMPILE_EVENTS,
        runtime_names=RUNTIME_NAMES,
        thread_roles=THREAD_ROLES,
        step_ends=STEP_ENDS,
        # .item(), float(t), print(t), .cpu(): a tensor's value copied back to the host,
        # after the sync that computes it.
        waits=frozenset({"PjRtComputationClient::TransferFromDevice"}),
        launches=tuple(sorted(STEP_ENDS)),
        # MpDeviceLoader's own xp.Trace names, on its loader threads.
        input_pipeline=frozenset(
            {"cpu_loader.next", "get_batch_from_cpu_queue", "cpu_data_to_xla_device"}
        ),
    ),
    advice=words.Advice(
        fallback_hints={
            "aten::nonzero": f"{_DATA_DEPENDENT}; keep a mask and use torch.where",
            "aten::masked_select": f"{_DATA_DEPENDENT}; use torch.where with a mask",
            "aten::unique": f"{_DATA_DEPENDENT}; avoid it inside the hot loop",
            "aten::_local_scalar_dense": (
                ".item(), float(t), bool(t) or printing a tensor waits for the device and "
                "copies the value to the host; read values once, after the loop"
            ),
        },
        fallback_hint=(
            "ran on the CPU: its inputs were copied off the device and the XLA graph was cut; "
            "look for an op XLA supports or move it out of the hot loop"
        ),
        fallback_effect="Each call copies tensors off the device and cuts the graph.",
        host_read_how=".item(), float(t), printing",
        recompile=(
            "Shapes or Python values change between runs; keep shapes fixed (pad or bucket). "
            "PT_XLA_DEBUG_LEVEL=2, set before importing torch_xla, prints why."
        ),
        fixes=FIXES,
        cpu_device=(
            "Ran on the CPU (PJRT_DEVICE=CPU), not on a TPU: XLA's CPU client executed the "
            "compiled graphs on host threads, so these times say nothing about TPU speed."
        ),
    ),
    headings=words.Headings(
        metrics="torch_xla, this cell only",
        fallbacks="Ops that fell back to the CPU (torch_xla aten:: counters)",
    ),
    capture=words.CaptureWords(
        stop_trace="torch_xla.debug.profiler.stop_trace()",
        sync_label="torch_xla.sync() (--sync)",
        no_steps=(
            "the cell neither synced (torch_xla.sync(), xm.mark_step(), MpDeviceLoader) nor "
            "ran a loop; mark steps yourself with xprof_magic.step() or "
            "torch_xla.debug.profiler.StepTrace"
        ),
        shrink=(
            "To shrink a capture, profile fewer steps (a shorter loop in the cell), or capture "
            "on demand with torch_xla.debug.profiler.trace(..., host_tracer_level=1)."
        ),
        workers=(
            "To capture a worker, start a server in it, xp.start_server(9500 + rank, "
            "only_on_master=False) (keep the object), and capture it from here with "
            "xp.trace('localhost:<port>', logdir, duration_ms=...) while it runs; or use "
            "start_method='fork', whose workers %%xprof traces as hosts rank<N>"
        ),
    ),
)
