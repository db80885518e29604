"""The loop kinds of :mod:`bench.device_truth`: each a JAX loop built so that its bottleneck
is known, with its sizes for the CPU and for an accelerator, the cells that time it without
the profiler, and its truth for each device kind.

A kind's cells are what a user's notebook holds: ``setup`` (imports, data, the functions,
their warm-up), the loop ``cell`` that prints its own timings on an ``oracle:`` line
(``name=value`` pairs), and where it helps a ``compare`` cell that times the same work
another way. See :class:`Kind` and :class:`Truth`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FIX_CHECKED",
    "FIX_KEEPS",
    "JAX_KINDS",
    "NO_ALARM",
    "READ_BACK_COSTS",
    "READ_BACK_NAMED",
    "STEPS_IN_LOOP",
    "Check",
    "Kind",
    "Truth",
    "at_line",
]

Check = tuple[str, Callable[[Mapping[str, Any]], bool]]
"""``(what, test)``: ``test(figures)`` is true when ``what`` holds of a kind's figures."""


@dataclass(frozen=True)
class Truth:
    """What is right for a kind on one device kind: ``verdicts``, the categories that are
    right (any of them); ``text``, the truth in words; ``checks``: more that must hold, each
    ``(what, test)`` with ``test(result)`` true when it holds (``result``: the kind's figures,
    see :func:`run_kind`)."""

    verdicts: tuple[str, ...]
    text: str
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class Kind:
    """A loop whose bottleneck is known.

    ``setup`` runs plain first (sizes are set before it as variables, from ``sizes`` for the
    backend: ``"cpu"`` or ``"accelerator"``); ``cell`` runs plain (the oracle) and then under
    ``%%xprof``; ``compare``, plain, after the oracle; ``before``, plain, before each run of
    the cell. ``truth(platform, oracle)``: what is right on ``platform`` (JAX's
    ``default_backend()``; torch_xla's device type, lower case) given the oracle's figures.
    ``backend``: the magic's ``--backend``; ``fixed``: see below.
    """

    name: str
    does: str
    setup: str
    cell: str
    truth: Callable[[str, Mapping[str, float]], Truth]
    sizes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    compare: str = ""
    before: str = ""
    backend: str = "jax"
    fixed: str = ""
    """The cell with the verdict's own advice applied, timed plain like ``cell`` (its
    ``oracle:`` line gives ``loop=``): the harness checks that it saves at least half the
    time the verdict promised (:data:`FIX_KEEPS`)."""
    fixed_for: Mapping[str, str] = field(default_factory=dict)
    """The fixed cell for a verdict's cause whose advice is another (``few cores``: the batches
    made once, not by workers), in place of ``fixed``."""


def _line_of(cell: str, text: str) -> int:
    """The line that holds ``text`` as the editor numbers the cell run under ``%%xprof``:
    the magic's own line is line 1, ``cell``'s first line 2."""
    for number, line in enumerate(cell.splitlines(), 2):
        if text in line:
            return number
    raise ValueError(f"{text!r} is not in the cell")


def at_line(cell: str, text: str) -> Check:
    """The verdict, or the read-back it names, is at the line of ``cell`` that holds
    ``text``."""
    line = _line_of(cell, text)
    return (f"named at line {line}", lambda r: line in (r["line"], r.get("read_line")))


def _fix_says(words: str) -> Check:
    return (f"the fix says {words}", lambda r: words in r["fix"])


def _fix_never(words: str) -> Check:
    return (f"the fix never says {words}", lambda r: words not in r["fix"])


def _cause(cause: str) -> Check:
    return (f"cause {cause}", lambda r: r["cause"] == cause)


FIX_KEEPS = 0.5
"""The least share of the promised saving (the verdict's gain: a step's time less its time
without the verdict's cost) that the ``fixed`` cell must save, measured without the profiler."""
FIX_CHECKED = 0.1
"""The least promised saving the fix check applies to: less is within a shared machine's
noise (the runs of one cell vary by more)."""
NO_ALARM = ("no alarm", lambda r: r["level"] != "warning")
READ_BACK_COSTS = 1.2
"""A read-back each step is a cost when the loop with it takes this many times the loop
without."""


def _steps_in_loop(r: Mapping[str, Any]) -> bool:
    """The steps add up to no more than the loop the cell timed under the profiler (a step
    ends where its iteration ends: the work after the loop is no step's)."""
    loop = r["profiled_values"].get("loop")
    if loop is None:
        return True
    limit = 1.25 * float(loop) + 0.002
    return max(float(r["steps_sum_s"]), float(r["breakdown_steps_sum_s"])) <= limit


STEPS_IN_LOOP = ("the steps fit in the loop", _steps_in_loop)


def _read_back_named(r: Mapping[str, Any]) -> bool:
    """A sync verdict, or a headline whose own words (not the cell's code it quotes between
    backticks) name the read-back."""
    if r["verdict"] == "sync":
        return True
    words = re.sub(r"`[^`]*`", "", r["headline"]).lower()
    return any(name in words for name in ("read", ".item()", "float(", "np.asarray"))


READ_BACK_NAMED = ("the read-back named", _read_back_named)


# 1. device --------------------------------------------------------------------------------

_DEVICE_SETUP = """\
import time, jax, jax.numpy as jnp

@jax.jit
def heavy(W, X):
    for _ in range(DEPTH):
        X = jnp.tanh(X @ W)
    return X

key = jax.random.PRNGKey(0)
W = jax.random.normal(key, (N, N), getattr(jnp, DTYPE)) / N**0.5
X = jax.random.normal(key, (N, N), getattr(jnp, DTYPE))
heavy(W, X).block_until_ready()
"""

_DEVICE_CELL = """\
t = time.perf_counter()
Y = X
for i in range(STEPS):
    Y = heavy(W, Y)
launch = time.perf_counter() - t
Y.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s, of it launch={launch:.3f} s on the host")
"""


def _device_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("device",),
        "device: each step is a chain of jitted matmuls, launched without a wait; the host "
        "only launches them"
        + ("" if platform == "cpu" else "; never 'put the step under jax.jit'"),
        (_fix_never("jax.jit"),),
    )


DEVICE = Kind(
    "device",
    "a jitted chain of DEPTH N×N matmuls, each step on the last one's result, one wait at the end",
    _DEVICE_SETUP,
    _DEVICE_CELL,
    _device_truth,
    {
        "cpu": {"N": 512, "DEPTH": 4, "STEPS": 30, "DTYPE": "float32"},
        "accelerator": {"N": 8192, "DEPTH": 8, "STEPS": 30, "DTYPE": "bfloat16"},
    },
)

# 2. input ---------------------------------------------------------------------------------

_INPUT_SETUP = """\
import time, numpy as np, jax, jax.numpy as jnp

rng = np.random.default_rng(0)
made = [0.0]

def decode(records):
    # a decode-like loop: each record parsed on its own, then normalised
    rows = []
    for record in records:
        v = np.frombuffer(record, dtype=np.uint8).astype(np.float32)
        rows.append((v - v.mean()) / (v.std() + 1e-6))
    return np.stack(rows)

def batches(n):
    for _ in range(n):
        t = time.perf_counter()
        records = [rng.bytes(FEAT) for _ in range(BATCH)]
        x = np.sort(decode(records), axis=1)  # an augmentation
        made[0] += time.perf_counter() - t
        yield x

@jax.jit
def small(W, x):
    return jnp.tanh(x @ W).mean()

W = jnp.ones((FEAT, 16), jnp.float32) / FEAT
small(W, next(batches(1))).block_until_ready()
"""

_INPUT_CELL = """\
made[0] = 0.0
t = time.perf_counter()
for x in batches(STEPS):
    loss = small(W, x)
loss.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s, of it input={made[0]:.3f} s making the batches")
"""


def _input_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("input",),
        "input: the host makes each batch (a decode-like loop over records, a sort) for much "
        "longer than the small jitted step runs",
        (at_line(_INPUT_CELL, "for x in batches"),),
    )


INPUT = Kind(
    "input",
    "a generator decodes BATCH records of FEAT bytes on the host for each step of a small "
    "jitted step",
    _INPUT_SETUP,
    _INPUT_CELL,
    _input_truth,
    {
        "cpu": {"FEAT": 3072, "BATCH": 128, "STEPS": 30},
        "accelerator": {"FEAT": 3072, "BATCH": 256, "STEPS": 20},
    },
)

# 3. eager host ----------------------------------------------------------------------------

_EAGER_SETUP = """\
import time, jax, jax.numpy as jnp

def eager_step(x):
    for _ in range(OPS):
        x = jnp.tanh(x * 0.5 + 0.1)
    return x

x0 = jnp.ones((S, S), jnp.float32)
eager_step(x0).block_until_ready()
"""

_EAGER_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    x = eager_step(x0)
x.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps of {3 * OPS} eager ops loop={loop:.3f} s")
"""

_EAGER_COMPARE = """\
fused = jax.jit(eager_step)
fused(x0).block_until_ready()
t = time.perf_counter()
for i in range(STEPS):
    x = fused(x0)
x.block_until_ready()
print(f"oracle: the same steps under jax.jit jitted={time.perf_counter() - t:.4f} s")
"""


def _eager_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    speedup = oracle.get("loop", 0) / max(oracle.get("jitted", 0), 1e-9)
    return Truth(
        ("host",),
        f"host: Python dispatches each small eager op; jax.jit of the step is {speedup:.0f}× "
        "faster (compare)",
        (_fix_says("jax.jit"),),
    )


EAGER = Kind(
    "eager",
    "a step of 3×OPS small eager jax.numpy ops on S×S (not jitted)",
    _EAGER_SETUP,
    _EAGER_CELL,
    _eager_truth,
    {
        "cpu": {"S": 64, "OPS": 100, "STEPS": 30},
        "accelerator": {"S": 256, "OPS": 133, "STEPS": 10},
    },
    _EAGER_COMPARE,
)

# 4. changing shapes -----------------------------------------------------------------------

_SHAPES_SETUP = """\
import time, numpy as np, jax, jax.numpy as jnp

xs = [np.ones((ROWS + 8 * n, COLS), np.float32) for n in range(STEPS)]
"""

_SHAPES_CELL = """\
@jax.jit
def score(x):
    return jnp.tanh(x @ x.T).sum()

t = time.perf_counter()
for n in range(STEPS):
    s = score(xs[n])
s.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps on {STEPS} shapes loop={loop:.3f} s")
"""

_SHAPES_COMPARE = """\
t = time.perf_counter()
for n in range(STEPS):
    s = score(xs[n])
s.block_until_ready()
print(f"oracle: the same shapes again, compiled already again={time.perf_counter() - t:.4f} s")
"""


def _shapes_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("compile",),
        "compile: every step compiles `score` for a new shape (compare: the same steps "
        "compiled already take a fraction)",
        (_cause("changing shapes"),),
    )


SHAPES = Kind(
    "shapes",
    "a jitted function (defined in the cell) on a new shape each step",
    _SHAPES_SETUP,
    _SHAPES_CELL,
    _shapes_truth,
    {
        "cpu": {"ROWS": 64, "COLS": 64, "STEPS": 10},
        "accelerator": {"ROWS": 256, "COLS": 256, "STEPS": 12},
    },
    _SHAPES_COMPARE,
)

# 5. transfer ------------------------------------------------------------------------------

_TRANSFER_SETUP = """\
import time, numpy as np, jax, jax.numpy as jnp

@jax.jit
def small(W, x):
    return jnp.tanh(x[:, :16] @ W).mean()

W = jnp.ones((16, 16), jnp.float32)
ready = [np.full((ROWS, COLS), i, np.float32) for i in range(STEPS)]
small(W, ready[0]).block_until_ready()
"""

_TRANSFER_CELL = """\
t = time.perf_counter()
for xb in ready:
    loss = small(W, xb)
loss.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps of {ready[0].nbytes / 1e6:.0f} MB numpy batches loop={loop:.3f} s")
"""

_TRANSFER_COMPARE = """\
on_device = [jax.device_put(xb) for xb in ready]
jax.block_until_ready(on_device)
t = time.perf_counter()
for xb in on_device:
    loss = small(W, xb)
loss.block_until_ready()
resident = time.perf_counter() - t
t = time.perf_counter()
for xb in ready:
    jax.device_put(xb).block_until_ready()
put = time.perf_counter() - t
print(f"oracle: the same steps on batches already on the device resident={resident:.3f} s; "
      f"the copies alone put={put:.3f} s")
del on_device
"""


def _transfer_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    if platform != "cpu":
        return Truth(
            ("transfer",),
            "transfer: each step copies its batch host→device, against a tiny step; the fix "
            "is to put batches on the device ahead (jax.device_put, a prefetch)",
            (_fix_never("jax.jit"),),
        )
    loop, resident = oracle.get("loop", 0.0), oracle.get("resident", 0.0)
    copy_share = max(loop - resident, 0.0) / loop if loop else 0.0
    if copy_share >= 0.5:
        return Truth(
            ("transfer",),
            f"transfer on an accelerator; on the CPU the copy is a memcpy, and here it is "
            f"{copy_share:.0%} of the loop (oracle − resident): transfer",
        )
    return Truth(
        ("device", "unknown"),
        f"transfer on an accelerator; on the CPU the copy is a memcpy or nothing (the loop "
        f"from numpy and from the device differ by {copy_share:.0%}): the tiny step is all "
        "there is (device, or too small to judge)",
        (_fix_never("jax.jit"),),
    )


TRANSFER = Kind(
    "transfer",
    "a tiny jitted step fed a ROWS×COLS float32 numpy batch each step (a host→device copy)",
    _TRANSFER_SETUP,
    _TRANSFER_CELL,
    _transfer_truth,
    {
        "cpu": {"ROWS": 2048, "COLS": 2048, "STEPS": 20},
        "accelerator": {"ROWS": 2048, "COLS": 2048, "STEPS": 20},
    },
    _TRANSFER_COMPARE,
)

_PUT_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    xb = jax.device_put(ready[i])
    loss = small(W, xb)
loss.block_until_ready()
loop = time.perf_counter() - t
mb = ready[0].nbytes / 1e6
print(f"oracle: {STEPS} steps, each jax.device_put of {mb:.0f} MB loop={loop:.3f} s")
"""

PUT = Kind(
    "device_put",
    "the transfer kind with an explicit large jax.device_put of each batch in the step",
    _TRANSFER_SETUP,
    _PUT_CELL,
    _transfer_truth,
    TRANSFER.sizes,
    _TRANSFER_COMPARE,
)

# 6. per-step read-back --------------------------------------------------------------------

_SYNC_SETUP = """\
import time, jax, jax.numpy as jnp

@jax.jit
def mid(Ws, x):
    for w in Ws:
        x = jnp.tanh(x @ w)
    return x.mean()

key = jax.random.PRNGKey(0)
Ws = [jax.random.normal(jax.random.fold_in(key, i), (N, N), jnp.float32) / N**0.5
      for i in range(4)]
xs = [jax.random.normal(jax.random.fold_in(key, 10 + i), (B, N), jnp.float32) for i in range(4)]
mid(Ws, xs[0]).block_until_ready()
"""

_SYNC_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    l = float(mid(Ws, xs[i % 4]))
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps, float() of each loss, loop={loop:.3f} s")
"""

_SYNC_COMPARE = """\
t = time.perf_counter()
for i in range(STEPS):
    l = mid(Ws, xs[i % 4])
l.block_until_ready()
print(f"oracle: the same steps without the read-back unsynced={time.perf_counter() - t:.3f} s")
"""


def _sync_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    loop, unsynced = oracle.get("loop", 0.0), oracle.get("unsynced", 0.0)
    ratio = loop / unsynced if unsynced else 0.0
    checks = [at_line(_SYNC_CELL, "float(")]
    if ratio >= READ_BACK_COSTS:
        checks.append(READ_BACK_NAMED)
        text = (
            f"device-bound with the per-step read-back named, or sync-bound: the loop with the "
            f"read-back takes {ratio:.2f}× the loop without"
        )
    else:
        text = (
            f"device: the read-back costs nothing measurable here (the loop with it takes "
            f"{ratio:.2f}× the loop without); where it costs (an accelerator), device-bound "
            "with the read-back named, or sync-bound"
        )
    return Truth(("device", "sync"), text, tuple(checks))


_SYNC_FIXED = """\
t = time.perf_counter()
for i in range(STEPS):
    l = mid(Ws, xs[i % 4])
    if i % 50 == 49:
        l = float(l)
jax.block_until_ready(l)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps, float() every 50th, loop={loop:.3f} s")
"""

SYNC = Kind(
    "readback",
    "float() of a jitted 4-matmul step's loss each step",
    _SYNC_SETUP,
    _SYNC_CELL,
    _sync_truth,
    {
        "cpu": {"N": 384, "B": 256, "STEPS": 60},
        "accelerator": {"N": 2048, "B": 2048, "STEPS": 60},
    },
    _SYNC_COMPARE,
    fixed=_SYNC_FIXED,
)

# 7. healthy training loop with prefetch ---------------------------------------------------

_TRAIN_SETUP = """\
import time, numpy as np, jax, jax.numpy as jnp

def init(key, sizes):
    params = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params.append((jax.random.normal(jax.random.fold_in(key, i), (a, b)) / a**0.5,
                       jnp.zeros(b)))
    return params

def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b

def loss_fn(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    return params, loss

rng = np.random.default_rng(0)
data = [(rng.standard_normal((BATCH, WIDTH), np.float32), rng.integers(0, 10, BATCH))
        for _ in range(4)]
params = init(jax.random.PRNGKey(0), [WIDTH, HIDDEN, HIDDEN, 10])
params, loss = train_step(params, *jax.device_put(data[0]))
loss.block_until_ready()
"""

_TRAIN_CELL = """\
t = time.perf_counter()
nxt = jax.device_put(data[0])
for i in range(STEPS):
    x, y = nxt
    nxt = jax.device_put(data[(i + 1) % 4])
    params, loss = train_step(params, x, y)
loss.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} training steps loop={loop:.3f} s, loss {float(loss):.3f}")
"""


def _train_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("device",),
        "device (healthy): a jitted value_and_grad + SGD step, the next batch put on the "
        "device while this one trains",
        (NO_ALARM, _fix_never("jax.jit")),
    )


TRAIN = Kind(
    "train",
    "an MLP (WIDTH→HIDDEN→HIDDEN→10) trained by a jitted value_and_grad + SGD step, the next "
    "batch device_put one step ahead",
    _TRAIN_SETUP,
    _TRAIN_CELL,
    _train_truth,
    {
        "cpu": {"WIDTH": 256, "HIDDEN": 512, "BATCH": 256, "STEPS": 40},
        "accelerator": {"WIDTH": 1024, "HIDDEN": 8192, "BATCH": 4096, "STEPS": 40},
    },
)

# 8. a cell whose time is mostly outside its loop ------------------------------------------

_AFTER_EVAL_SETUP = """\
import time, jax, jax.numpy as jnp

@jax.jit
def tiny(w, x):
    return w - 0.1 * jnp.mean(x @ w)

@jax.jit
def evaluate(W, X):
    for _ in range(DEPTH):
        X = jnp.tanh(X @ W)
    return X

key = jax.random.PRNGKey(0)
w = jnp.zeros(16); x = jnp.ones((32, 16))
W = jax.random.normal(key, (N, N)) / N**0.5
BIG = jax.random.normal(key, (N, N))
tiny(w, x).block_until_ready(); evaluate(W, BIG).block_until_ready()
"""

_AFTER_EVAL_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    w = tiny(w, x)
w.block_until_ready()
loop = time.perf_counter() - t
ev = evaluate(W, BIG).block_until_ready()
after = time.perf_counter() - t - loop
print(f"oracle: {STEPS} loop steps loop={loop:.4f} s, then the evaluation after={after:.3f} s")
"""


def _after_eval_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("device",),
        "device, at the evaluation's line: the jitted evaluation after the loop is most of "
        "the cell; the loop's steps are tiny",
        (at_line(_AFTER_EVAL_CELL, "ev = evaluate"), STEPS_IN_LOOP),
    )


AFTER_EVAL = Kind(
    "after_eval",
    "a short loop of a tiny jitted step, then a big jitted evaluation (DEPTH N×N matmuls)",
    _AFTER_EVAL_SETUP,
    _AFTER_EVAL_CELL,
    _after_eval_truth,
    {
        "cpu": {"N": 1024, "DEPTH": 8, "STEPS": 8},
        "accelerator": {"N": 8192, "DEPTH": 16, "STEPS": 8},
    },
)

_AFTER_COMPILE_SETUP = """\
import time, jax, jax.numpy as jnp

key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (64, HIDDEN)) * 0.1,
          "w2": jax.random.normal(k2, (HIDDEN, 10)) * 0.1}
inputs = jax.random.normal(k3, (STEPS, 32, 64))
targets = jnp.arange(STEPS * 32).reshape(STEPS, 32) % 10
wide_x, wide_y = inputs.reshape(-1, 64), targets.reshape(-1)

def loss_fn(params, x, y):
    logits = jax.nn.relu(x @ params["w1"]) @ params["w2"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss
"""

# Before each run of the cell: the step compiled for the loop's batches only, as in a
# notebook where the loop ran before (the wider batch compiles again each time).
_AFTER_COMPILE_BEFORE = """\
train_step.clear_cache()
train_step(params, inputs[0], targets[0])[1].block_until_ready()
"""

_AFTER_COMPILE_CELL = """\
t = time.perf_counter()
for x, y in zip(inputs, targets):
    params, loss = train_step(params, x, y)
loss.block_until_ready()
loop = time.perf_counter() - t
params, loss = train_step(params, wide_x, wide_y)
loss.block_until_ready()
after = time.perf_counter() - t - loop
print(f"oracle: {STEPS} loop steps loop={loop:.4f} s, then the wider batch after={after:.3f} s")
"""

_AFTER_COMPILE_COMPARE = """\
t = time.perf_counter()
loss = train_step(params, wide_x, wide_y)[1]
loss.block_until_ready()
print(f"oracle: the wider batch again, compiled already again={time.perf_counter() - t:.4f} s")
"""


def _after_compile_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    loop, after, again = (oracle.get(k, 0.0) for k in ("loop", "after", "again"))
    share = max(after - again, 0.0) / (loop + after) if loop + after else 0.0
    line = "params, loss = train_step(params, wide_x, wide_y)"
    return Truth(
        ("compile",) if share >= 0.5 else ("device", "compile"),
        f"compile, at the wider batch's line: compiling `train_step` for the wider batch "
        f"after the loop is {share:.0%} of the cell (after − again); the loop's steps are "
        "tiny (the JAX quickstart's `# xprof: wider batch`)",
        (at_line(_AFTER_COMPILE_CELL, line), STEPS_IN_LOOP),
    )


AFTER_COMPILE = Kind(
    "after_compile",
    "a short loop of a small jitted train_step, then the same step on a wider batch (a new "
    "shape: it compiles), as in the JAX quickstart",
    _AFTER_COMPILE_SETUP,
    _AFTER_COMPILE_CELL,
    _after_compile_truth,
    {
        "cpu": {"HIDDEN": 128, "STEPS": 8},
        "accelerator": {"HIDDEN": 1024, "STEPS": 8},
    },
    _AFTER_COMPILE_COMPARE,
    _AFTER_COMPILE_BEFORE,
)


JAX_KINDS = (DEVICE, INPUT, EAGER, SHAPES, TRANSFER, PUT, SYNC, TRAIN, AFTER_EVAL, AFTER_COMPILE)
