"""The loop kinds of :mod:`bench.device_truth` whose cost is the user's own Python and NumPy
on the host, not the framework's: each drawn from real training code, each with a ``fixed``
cell that applies the verdict's own advice, which must save at least half the time the
verdict promised (:data:`bench.truth_kinds.FIX_KEEPS`).

- ``augment_step``: a per-sample NumPy augmentation (a flip, a shift, a normalisation, as a
  Dataset's transform does) inside the loop, before a small jitted step; fixed: the same
  augmentation vectorized over the batch (the advice: "vectorize the NumPy over the whole
  batch");
- ``batches_before``: the same batches all made in a list before the loop; fixed the same way;
- ``xla_augment``: ``augment_step`` with a torch_xla step (``torch_xla.sync()`` each step).
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.truth_kinds import Check, Kind, Truth, at_line

__all__ = ["HOST_KINDS"]

_AUGMENT = """\
import time, numpy as np

rng = np.random.default_rng(0)
raws = [rng.standard_normal((BATCH, FEAT)).astype(np.float32) for _ in range(4)]

def augment(raw):
    # per sample, as a Dataset's transform does: a flip, a shift, a normalisation
    out = np.empty_like(raw)
    for k, row in enumerate(raw):
        row = row[::-1] if k % 2 else row
        row = np.roll(row, k % 7)
        out[k] = (row - row.mean()) / (row.std() + 1e-6)
    return out

def augment_batch(raw):
    # the same, over the whole batch at once
    flip = np.arange(len(raw)) % 2 == 1
    rows = np.where(flip[:, None], raw[:, ::-1], raw)
    shift = np.arange(len(raw)) % 7
    index = (np.arange(raw.shape[1])[None, :] - shift[:, None]) % raw.shape[1]
    rows = np.take_along_axis(rows, index, axis=1)
    return (rows - rows.mean(1, keepdims=True)) / (rows.std(1, keepdims=True) + 1e-6)

assert np.allclose(augment(raws[0]), augment_batch(raws[0]), atol=1e-5)
"""

_JAX_SETUP = (
    _AUGMENT
    + """\
import jax, jax.numpy as jnp

@jax.jit
def train(W, x):
    return W - 0.01 * (x.T @ jnp.tanh(x @ W)) / x.shape[0]

W = jnp.zeros((FEAT, 16), jnp.float32)
train(W, augment(raws[0])).block_until_ready()
"""
)

_STEP_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    x = augment(raws[i % 4])
    W = train(W, x)
W.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_BEFORE_CELL = """\
t = time.perf_counter()
batches = [augment(raws[i % 4]) for i in range(STEPS)]
for x in batches:
    W = train(W, x)
W.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_XLA_SETUP = (
    _AUGMENT
    + """\
import torch, torch_xla

dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(FEAT, 16), torch.nn.Tanh()).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def step(x):
    opt.zero_grad()
    loss = (model(x) ** 2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()

step(torch.from_numpy(augment(raws[0])).to(dev))
"""
)

_XLA_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    x = torch.from_numpy(augment(raws[i % 4])).to(dev)
    step(x)
torch_xla.sync(wait=True)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_SIZES = {
    "cpu": {"FEAT": 512, "BATCH": 256, "STEPS": 20},
    "accelerator": {"FEAT": 1024, "BATCH": 512, "STEPS": 20},
}


def _says(what: str, key: str, words: str) -> Check:
    return (f"{what} says {words}", lambda r: words in r[key])


def _making_batches(cell: str, statement: str, framework_fix: str) -> Truth:
    return Truth(
        ("host",),
        "host, the user's own NumPy making the batches (no framework op): the data path's fix",
        (
            ("cause making batches", lambda r: r["cause"] == "making batches"),
            at_line(cell, statement),
            _says("the headline", "headline", "making batches in your own Python and NumPy"),
            _says("the fix", "fix", "vectorize the NumPy over the whole batch"),
            (
                f"the fix never advises {framework_fix}",
                lambda r: f"so {framework_fix}" in r["fix"] and "would not shorten" in r["fix"],
            ),
        ),
    )


def _step_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return _making_batches(_STEP_CELL, "x = augment(", "jax.jit")


def _before_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return _making_batches(_BEFORE_CELL, "batches = [augment(", "jax.jit")


def _xla_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return _making_batches(_XLA_CELL, "x = torch.from_numpy(augment(", "torch_xla.compile")


AUGMENT_STEP = Kind(
    "augment_step",
    "a per-sample NumPy augmentation of a BATCH×FEAT batch inside the loop, then a small "
    "jitted step",
    _JAX_SETUP,
    _STEP_CELL,
    _step_truth,
    _SIZES,
    fixed=_STEP_CELL.replace("augment(", "augment_batch("),
)

BATCHES_BEFORE = Kind(
    "batches_before",
    "the same batches, all made in a list before the loop of small jitted steps",
    _JAX_SETUP,
    _BEFORE_CELL,
    _before_truth,
    _SIZES,
    fixed=_BEFORE_CELL.replace("augment(", "augment_batch("),
)

XLA_AUGMENT = Kind(
    "xla_augment",
    "the per-sample NumPy augmentation inside the loop, then a small torch_xla step (synced)",
    _XLA_SETUP,
    _XLA_CELL,
    _xla_truth,
    _SIZES,
    backend="torch_xla",
    fixed=_XLA_CELL.replace("augment(", "augment_batch("),
)

HOST_KINDS = (AUGMENT_STEP, BATCHES_BEFORE, XLA_AUGMENT)
