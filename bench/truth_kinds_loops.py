"""More loop kinds of :mod:`bench.device_truth`, drawn from the training loops people write,
each with a ``fixed`` cell that applies the verdict's own advice (which must save at least
half the time the verdict promised, :data:`bench.truth_kinds.FIX_KEEPS`):

- ``grad_accum``: gradient accumulation, the micro-steps' gradients summed with a
  ``jax.tree.map`` outside any jitted function (an eager add per parameter), the update
  and a read of the loss every ACCUM micro-steps; fixed: the sum under ``jax.jit``;
- ``eval_between``: an evaluation loop between training epochs that counts the correct
  predictions with jax.numpy outside ``jax.jit`` and reads each batch's count back
  (``int(...)``); fixed: the evaluation step jitted, the counts summed on the device and
  read once per epoch;
- ``print_tensor``: ``print`` of a device array (the model's outputs for a few samples)
  each step; fixed: every 50 steps;
- ``xla_workers``: the tokenizing ``collate_fn`` of ``xla_loader`` in a DataLoader with
  workers, each batch slow to read (a file store's latency), and a torch_xla step; without
  workers it waits; fixed: ``num_workers=4``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.truth_kinds import Check, Kind, Truth, at_line

__all__ = ["LOOP_KINDS"]


def _says(what: str, key: str, words: str) -> Check:
    return (f"{what} says {words}", lambda r: words in r[key])


def _never(words: str) -> Check:
    return (f"the fix never says {words}", lambda r: words not in r["fix"])


_ACCUM_SETUP = """\
import time, jax, jax.numpy as jnp

key = jax.random.PRNGKey(0)
params = {}
for k in range(LAYERS):  # a weight, a bias and a norm's scale per layer, as models have
    params[f"w{k}"] = jax.random.normal(jax.random.fold_in(key, k), (WIDTH, WIDTH)) * 0.05
    params[f"b{k}"] = jnp.zeros((WIDTH,))
    params[f"g{k}"] = jnp.ones((WIDTH,))
xs = [jax.random.normal(jax.random.fold_in(key, 100 + k), (BATCH, WIDTH)) for k in range(4)]

def loss_fn(params, x):
    for k in range(LAYERS):
        x = jnp.tanh(x @ params[f"w{k}"] + params[f"b{k}"]) * params[f"g{k}"]
    return jnp.mean(x ** 2)

grad_fn = jax.jit(jax.value_and_grad(loss_fn))

@jax.jit
def apply(params, acc):
    return jax.tree.map(lambda p, g: p - 0.01 * g / ACCUM, params, acc)

@jax.jit
def accumulate(acc, grads):
    return jax.tree.map(jnp.add, acc, grads)

zeros = jax.tree.map(jnp.zeros_like, params)
loss, grads = grad_fn(params, xs[0])
acc = jax.tree.map(lambda a, g: a + g, zeros, grads)
jax.block_until_ready((apply(params, acc), accumulate(zeros, grads)))
"""

_ACCUM_CELL = """\
t = time.perf_counter()
acc, losses = zeros, []
for i in range(STEPS):
    loss, grads = grad_fn(params, xs[i % 4])
    acc = jax.tree.map(lambda a, g: a + g, acc, grads)
    if (i + 1) % ACCUM == 0:
        params = apply(params, acc)
        acc = zeros
        losses.append(float(loss))
jax.block_until_ready(params)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} micro-steps loop={loop:.3f} s")
"""


def _accum_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("host",),
        "host: the gradients summed by an eager jax.tree.map (one dispatch per parameter) "
        "each micro-step, outside jax.jit: put it under jax.jit",
        (
            ("cause eager", lambda r: r["cause"] == "eager"),
            at_line(_ACCUM_CELL, "acc = jax.tree.map("),
            _says("the fix", "fix", "jax.jit"),
        ),
    )


GRAD_ACCUM = Kind(
    "grad_accum",
    "gradient accumulation: a jitted value_and_grad of a LAYERS-layer MLP per micro-step, "
    "the gradients summed by jax.tree.map outside jit, the update and a read of the loss "
    "every ACCUM micro-steps",
    _ACCUM_SETUP,
    _ACCUM_CELL,
    _accum_truth,
    {
        "cpu": {"WIDTH": 32, "LAYERS": 16, "BATCH": 32, "ACCUM": 4, "STEPS": 400},
        "accelerator": {"WIDTH": 512, "LAYERS": 16, "BATCH": 256, "ACCUM": 4, "STEPS": 400},
    },
    fixed=_ACCUM_CELL.replace(
        "acc = jax.tree.map(lambda a, g: a + g, acc, grads)", "acc = accumulate(acc, grads)"
    ),
)

_EVAL_SETUP = """\
import time, jax, jax.numpy as jnp

key = jax.random.PRNGKey(0)
W = jax.random.normal(key, (WIDTH, 10)) * 0.1
train_x = [jax.random.normal(jax.random.fold_in(key, k), (BATCH, WIDTH)) for k in range(4)]
eval_x = [jax.random.normal(jax.random.fold_in(key, 50 + k), (BATCH, WIDTH)) for k in range(4)]
eval_y = [jnp.arange(BATCH) % 10 for _ in range(4)]

@jax.jit
def train(W, x):
    return W - 0.01 * x.T @ jnp.tanh(x @ W) / x.shape[0]

@jax.jit
def eval_step(W, x, y):
    logits = x @ W
    loss = -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])
    return jnp.sum(jnp.argmax(logits, axis=1) == y), loss

W = train(W, train_x[0])
x, y = eval_x[0], eval_y[0]
logits = x @ W
float(-jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(BATCH), y]))
int((jnp.argmax(logits, axis=1) == y).sum()), eval_step(W, x, y)
"""

_EVAL_CELL = """\
t = time.perf_counter()
for epoch in range(EPOCHS):
    for i in range(STEPS):
        W = train(W, train_x[i % 4])
    correct, total = 0, 0.0
    for i in range(EVALS):
        x, y = eval_x[i % 4], eval_y[i % 4]
        logits = x @ W
        total += float(-jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(BATCH), y]))
        correct += int((jnp.argmax(logits, axis=1) == y).sum())
    print(f"epoch {epoch}: eval loss {total / EVALS:.3f}, accuracy {correct / (EVALS * BATCH):.2f}")
loop = time.perf_counter() - t
print(f"oracle: {EPOCHS} epochs loop={loop:.3f} s")
"""

_EVAL_FIXED = (
    _EVAL_CELL.replace(
        "    correct, total = 0, 0.0\n", "    correct, total = jnp.zeros(()), jnp.zeros(())\n"
    )
    .replace("        logits = x @ W\n", "        c, l = eval_step(W, x, y)\n")
    .replace(
        "        total += float(-jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(BATCH), y]))\n"
        "        correct += int((jnp.argmax(logits, axis=1) == y).sum())\n",
        "        correct, total = correct + c, total + l\n",
    )
    .replace("{total / EVALS:.3f}", "{float(total) / EVALS:.3f}")
    .replace("{correct / (EVALS * BATCH):.2f}", "{int(correct) / (EVALS * BATCH):.2f}")
)
_EVAL_LINES = ("logits = x @ W", "total += float(", "correct += int(")


def _eval_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    lines = [at_line(_EVAL_CELL, text) for text in _EVAL_LINES]
    return Truth(
        ("host", "sync"),
        "host: the evaluation between epochs runs jax.numpy ops outside jax.jit (a matmul, "
        "log_softmax, argmax, ==, sum: one dispatch each) and reads each batch's loss and "
        "count back: jit the evaluation step, sum on the device, read once per epoch",
        (
            (
                "named at an evaluation line",
                lambda r: any(check(r) for _, check in lines),
            ),
            _says("the fix", "fix", "jax.jit"),
        ),
    )


EVAL_BETWEEN = Kind(
    "eval_between",
    "EPOCHS epochs of STEPS small jitted training steps, each followed by an evaluation "
    "loop of EVALS batches whose loss and correct predictions are computed eagerly and read "
    "back per batch",
    _EVAL_SETUP,
    _EVAL_CELL,
    _eval_truth,
    {
        "cpu": {"WIDTH": 64, "BATCH": 64, "EPOCHS": 3, "STEPS": 40, "EVALS": 60},
        "accelerator": {"WIDTH": 1024, "BATCH": 1024, "EPOCHS": 3, "STEPS": 20, "EVALS": 40},
    },
    fixed=_EVAL_FIXED,
)

_PRINT_SETUP = """\
import time, jax, jax.numpy as jnp

key = jax.random.PRNGKey(0)
W = jax.random.normal(key, (WIDTH, 10)) * 0.1
xs = [jax.random.normal(jax.random.fold_in(key, k), (BATCH, WIDTH)) for k in range(4)]

@jax.jit
def train(W, x):
    W = W - 0.01 * x.T @ jnp.tanh(x @ W) / x.shape[0]
    return W, jax.nn.softmax(x @ W)

W, probs = train(W, xs[0])
"""

_PRINT_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    W, probs = train(W, xs[i % 4])
    print(f"step {i}: first predictions {probs[:SHOWN]}")
jax.block_until_ready(W)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""


def _print_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("host", "sync"),
        "host: printing a device array each step (a read-back and NumPy's formatting of it) "
        "is most of the step: print less often",
        (at_line(_PRINT_CELL, 'print(f"step {i}'), _says("the fix", "fix", "less often")),
    )


PRINT_TENSOR = Kind(
    "print_tensor",
    "a small jitted step, then print of the model's outputs for SHOWN samples (a device "
    "array) each step",
    _PRINT_SETUP,
    _PRINT_CELL,
    _print_truth,
    {
        "cpu": {"WIDTH": 64, "BATCH": 64, "SHOWN": 16, "STEPS": 60},
        "accelerator": {"WIDTH": 1024, "BATCH": 1024, "SHOWN": 16, "STEPS": 60},
    },
    fixed=_PRINT_CELL.replace('    print(f"step', '    if i % 50 == 49:\n        print(f"step'),
)

_STORE_SETUP = """\
import time, numpy as np, torch, torch_xla
import torch_xla.distributed.parallel_loader as pl

rng = np.random.default_rng(0)
words = [f"w{k}" for k in range(2000)]
texts = [" ".join(rng.choice(words, 48)) for _ in range(BATCH * STEPS)]
vocab = {w: k for k, w in enumerate(words)}

def collate(batch):
    # read the batch's records from a network store (its latency), tokenize, pad
    time.sleep(READ_S)
    ids = np.zeros((len(batch), 64), np.int64)
    for k, text in enumerate(batch):
        row = [vocab.get(w, 0) for w in text.lower().split()][:64]
        ids[k, : len(row)] = row
    return torch.from_numpy(ids)

dev = torch_xla.device()
torch.manual_seed(0)
embed = torch.nn.Embedding(2000, WIDTH).to(dev)
head = torch.nn.Linear(WIDTH, WIDTH).to(dev)
opt = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=0.01)

def step(ids):
    opt.zero_grad()
    h = embed(ids)
    for _ in range(DEPTH):
        h = torch.tanh(head(h))
    loss = h.pow(2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()

loader = torch.utils.data.DataLoader(texts, batch_size=BATCH, collate_fn=collate)
workers = torch.utils.data.DataLoader(
    texts, batch_size=BATCH, collate_fn=collate, num_workers=WORKERS,
    persistent_workers=True, prefetch_factor=4)
device_loader = pl.MpDeviceLoader(workers, dev)
for ids in device_loader:  # the workers started, the step compiled
    step(ids)
step(collate(texts[:BATCH]).to(dev))
"""

_STORE_CELL = """\
t = time.perf_counter()
for ids in loader:
    step(ids.to(dev))
torch_xla.sync(wait=True)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_DEVICE_LOADER_CELL = """\
t = time.perf_counter()
for ids in device_loader:
    step(ids)
torch_xla.sync(wait=True)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_STORE_SIZES = {
    "cpu": {"BATCH": 32, "STEPS": 24, "READ_S": 0.02, "WORKERS": 4, "WIDTH": 64, "DEPTH": 4},
    "accelerator": {
        "BATCH": 64,
        "STEPS": 24,
        "READ_S": 0.02,
        "WORKERS": 4,
        "WIDTH": 512,
        "DEPTH": 8,
    },
}


def _store_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("input",),
        "input: the loop waits in next() while the DataLoader, without workers, reads each "
        "batch from the store and tokenizes it: workers",
        (
            at_line(_STORE_CELL, "for ids in loader"),
            _says("the fix", "fix", "num_workers"),
            ("not making batches", lambda r: r["cause"] != "making batches"),
        ),
    )


def _device_loader_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("host", "device", "sync", "input"),
        "the loader's workers read and tokenize ahead and MpDeviceLoader copies ahead: "
        "whatever bounds the step, the verdict never says 'use MpDeviceLoader' nor blames "
        "batches made in the user's Python",
        (
            _never("load through MpDeviceLoader"),
            ("not making batches", lambda r: r["cause"] != "making batches"),
        ),
    )


XLA_STORE_LOADER = Kind(
    "xla_store_loader",
    "a DataLoader without workers whose collate_fn reads each batch from a store (READ_S "
    "latency) and tokenizes it, then a small torch_xla step (synced)",
    _STORE_SETUP,
    _STORE_CELL,
    _store_truth,
    _STORE_SIZES,
    backend="torch_xla",
    fixed=_STORE_CELL.replace("in loader", "in workers"),
)

XLA_DEVICE_LOADER = Kind(
    "xla_device_loader",
    "the same batches read by WORKERS DataLoader workers through MpDeviceLoader (the idiom "
    "torch_xla's guide recommends), then the torch_xla step",
    _STORE_SETUP,
    _DEVICE_LOADER_CELL,
    _device_loader_truth,
    _STORE_SIZES,
    backend="torch_xla",
)

_XLA_PRINT_SETUP = """\
import time, torch, torch_xla
import torch_xla.core.xla_model as xm

dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
xs = [torch.randn(BATCH, 64, device=dev) for _ in range(4)]
ys = [torch.randint(0, 10, (BATCH,), device=dev) for _ in range(4)]
for i in range(3):
    logits = model(xs[i % 4])
    loss = loss_fn(logits, ys[i % 4])
    opt.zero_grad(); loss.backward(); opt.step()
    torch_xla.sync()
print(logits[:SHOWN].softmax(1))
"""

_XLA_PRINT_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    logits = model(xs[i % 4])
    loss = loss_fn(logits, ys[i % 4])
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch_xla.sync()
    print(f"step {i}: loss {loss}, first predictions {logits[:SHOWN].softmax(1)}")
xm.wait_device_ops()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""


def _xla_print_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("host", "sync"),
        "host or sync at the print: printing device tensors each step reads them back and "
        "torch formats them on the host (no device op): print less often, never "
        "torch_xla.compile",
        (
            at_line(_XLA_PRINT_CELL, 'print(f"step {i}'),
            _says("the fix", "fix", "less often"),
            (
                "the fix never advises torch_xla.compile",
                lambda r: "torch_xla.compile" not in r["fix"] or "would not" in r["fix"],
            ),
        ),
    )


XLA_PRINT = Kind(
    "xla_print",
    "torch_xla: a small MLP's training step, then print of the loss and of the outputs for "
    "SHOWN samples (device tensors) each step",
    _XLA_PRINT_SETUP,
    _XLA_PRINT_CELL,
    _xla_print_truth,
    {
        "cpu": {"WIDTH": 64, "BATCH": 64, "SHOWN": 32, "STEPS": 40},
        "accelerator": {"WIDTH": 1024, "BATCH": 1024, "SHOWN": 32, "STEPS": 40},
    },
    backend="torch_xla",
    fixed=_XLA_PRINT_CELL.replace('    print(f"step', '    if i % 50 == 49:\n        print(f"step'),
)

LOOP_KINDS = (
    XLA_PRINT,
    GRAD_ACCUM,
    EVAL_BETWEEN,
    PRINT_TENSOR,
    XLA_STORE_LOADER,
    XLA_DEVICE_LOADER,
)
