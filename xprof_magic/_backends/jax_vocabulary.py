"""JAX's words: its ``jax.monitoring`` event names, timeline events, advice and headings.

Kept apart from :mod:`xprof_magic._backends.jax` so that the analysis can read a JAX run
without importing JAX. Event names are those jax 0.7.2 to 0.10 record; the backend stores
each duration event as a metric under its own name, and each compiled function's
compilations under ``compile:<fun_name>`` (``library:<fun_name>`` for the programs that
eager ``jax.numpy`` calls and JAX's own helpers compile, once per shape: not the user's
recompiles).
"""

from __future__ import annotations

from xprof_magic._backends import words

__all__ = [
    "BACKEND_COMPILE",
    "CACHE_EVENTS",
    "FUNCTION_COMPILE",
    "LIBRARY_COMPILE",
    "LOWER",
    "TRACE",
    "VOCABULARY",
]

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
PERSISTENT_HITS = "/jax/compilation_cache/cache_hits"
PERSISTENT_MISSES = "/jax/compilation_cache/cache_misses"
CACHE_EVENTS = frozenset({PERSISTENT_HITS, PERSISTENT_MISSES})
FUNCTION_COMPILE = "compile:"
LIBRARY_COMPILE = "library:"

# One per compilation, on the thread that called the jitted function (jax 0.8+ and 0.7).
COMPILE_EVENTS = ("backend_compile_and_load", "backend_compile")
# Lowering the traced function to MLIR, before each of those: a recompile's cost too (on a
# CPU capture about as long as the compilation itself).
COMPILE_PHASES = frozenset({"lower_sharding_computation"})
# JAX's own host events around a jitted call (dispatch, lowering, compilation, transfers),
# read on jax 0.10 CPU captures; with "::" in them (C++) they are runtime anyway.
RUNTIME_NAMES = frozenset(
    {
        "ParseArguments",
        "shard_args",
        "Handle inputs",
        "Handle input event recording",
        "AllocateOutputBuffersWithInputReuse",
        "backend_compile",
        "backend_compile_and_load",
        "ExecuteReplicated.__call__",
        "DevicePut",
        "DevicePutWithSharding",
        "ArrayImpl.copy_to_host_async",
        "np.asarray(jax.Array)",
    }
)
RUNTIME_PREFIXES = ("PjitFunction(", "batched_copy_array_to_devices", "BatchedCopyToDevice")
# A device array read on the host (np.asarray(x), float(x)) waits for the program that
# computes it; jax.block_until_ready and x.item() wait without an event of their own.
WAITS = frozenset({"np.asarray(jax.Array)"})
# Each jitted call (and each eager op) dispatches its program, named, and returns at once.
LAUNCHES = ("PjitFunction(",)

VOCABULARY = words.Vocabulary(
    backend="jax",
    metrics=words.MetricNames(
        compile_time=BACKEND_COMPILE,
        compile_cache_hits=PERSISTENT_HITS,
        function_compile_prefix=FUNCTION_COMPILE,
    ),
    timeline=words.TimelineNames(
        compile_events=COMPILE_EVENTS,
        compile_phases=COMPILE_PHASES,
        runtime_names=RUNTIME_NAMES,
        runtime_prefixes=RUNTIME_PREFIXES,
        waits=WAITS,
        launches=LAUNCHES,
        thread_roles={
            "python": "Python threads: your code, tracing and dispatch of jitted calls",
            "tf_XLAEigen": "Eigen pool: parallel parts of XLA ops",
            "tf_xla-cpu-codegen": "XLA CPU codegen: compilation",
        },
    ),
    advice=words.Advice(
        fixes={
            **words.NEUTRAL_FIXES,
            "input": "Prefetch: load the next batch while the step runs (a loader with "
            "workers, or jax.device_put of the next batch before the step).",
            "host": "If the step runs jax.numpy ops outside jax.jit, put it under jax.jit (eager "
            "ops dispatch one at a time); if it is jitted already, do more per call (a larger "
            "batch, or several steps in one call with jax.lax.scan).",
            "eager": "Put the step under jax.jit: its jax.numpy ops run eagerly, each "
            "dispatched from Python on its own, so the host bounds the loop.",
            "compiled step": "The step is already one jitted call, so the host's own Python "
            "between calls is the cost: do more per call (a larger batch, or several steps in "
            "one call with jax.lax.scan or fori_loop) and keep per-step Python (logging, "
            "data handling) out of the loop.",
            "making batches": "That line runs no JAX op, so jax.jit, lax.scan or a larger "
            "batch would not shorten it: it is the input pipeline. Make the batches off the "
            "step's path: vectorize the NumPy over the whole batch, make them once before the "
            "loop if they do not change, or prepare the next ones in a background thread (a "
            "prefetching iterator, or a loader with workers) while the jitted step runs.",
            "printing": "Print less often (every N steps), and fetch what you print once "
            "(jax.device_get): each print of a device array waits for the step and copies it "
            "back; jax.jit would not shorten it.",
            "own code": "That line runs no JAX op, so jax.jit or lax.scan would not shorten "
            "it: do it less often (every N steps), vectorize it, or move it out of the loop.",
            "changing shapes": "Pad the inputs to a few fixed shapes (bucketing), so each "
            "jitted function compiles once per shape; JAX_EXPLAIN_CACHE_MISSES=1 says why.",
            "memory": "Make the step fit the device: a smaller batch, bf16 instead of f32, "
            "jax.checkpoint (remat) around the layers whose activations are largest, or "
            "sharding the arrays across devices (jax.sharding); donate_argnums lets a step "
            "reuse its inputs' buffers.",
            "eager shapes": "That jax.numpy call runs eagerly, outside jax.jit, so it compiles "
            "for every new shape it is given: do it in NumPy before the data reaches JAX "
            "(np.pad on the host), or inside the jitted step on inputs of fixed shape.",
            "changing values": "Pass numbers that change between steps as traced "
            "arguments, not static_argnums or Python values the jitted function closes over, "
            "so it compiles once; JAX_EXPLAIN_CACHE_MISSES=1 says why.",
            "transfer": "Copy each batch to the device ahead of its step: jax.device_put the "
            "next batch while this step runs (a prefetch), or the whole data once before the "
            "loop if it fits; and no np.asarray of device arrays inside the step.",
            "sync": "Keep block_until_ready(), float(x) and printing arrays out of the loop.",
            "collective": "The chips wait on collectives (psum, all_gather, or those the "
            "shardings insert): shard so that less crosses the chips (check the shardings of "
            "the step's inputs and outputs), or accumulate gradients and sync them less often.",
            "host offload": "The chip waits for copies between its memory and the host's "
            "(host offload: memory_kind='pinned_host', an offloading remat policy): keep those "
            "arrays in HBM (memory_kind='device') if they fit, or offload fewer of them.",
        },
        host_read_how="np.asarray(x), x.item(), float(x), printing",
        recompile=(
            "A jitted function compiles again for each new input shape, dtype or static "
            "argument: keep shapes fixed (pad or bucket). "
            "jax.config.update('jax_explain_cache_misses', True) logs why."
        ),
        cpu_device=(
            "Ran on JAX's CPU backend, not on a TPU or GPU: these times say nothing about "
            "accelerator speed."
        ),
    ),
    headings=words.Headings(metrics="JAX, this cell only"),
    capture=words.CaptureWords(
        stop_trace="jax.profiler.stop_trace()",
        sync_label="jax.block_until_ready(live arrays) (--sync)",
        no_steps=(
            "the cell ran no loop; mark steps yourself with xprof_magic.step() or "
            "jax.profiler.StepTraceAnnotation"
        ),
        shrink=(
            "To shrink a capture, profile fewer steps (a shorter loop in the cell), or capture "
            "on demand with fewer host events: %xprof capture --host-tracer-level 1."
        ),
        workers=(
            "To capture a worker, start a server in it, jax.profiler.start_server(9500 + "
            "rank), and capture it from here with %xprof capture localhost:<port> while it runs"
        ),
    ),
)
