"""The loop kinds of :mod:`bench.device_truth` whose cost is the user's own Python and NumPy
on the host, not the framework's: each drawn from real training code, each with a ``fixed``
cell that applies the verdict's own advice, which must save at least half the time the
verdict promised (:data:`bench.truth_kinds.FIX_KEEPS`).

- ``augment_step``: a per-sample NumPy augmentation (a flip, a shift, a normalisation, as a
  Dataset's transform does) inside the loop, before a small jitted step; fixed: the same
  augmentation vectorized over the batch (the advice: "vectorize the NumPy over the whole
  batch");
- ``batches_before``: the same batches all made in a list before the loop; fixed the same way;
- ``xla_augment``: ``augment_step`` with a torch_xla step (``torch_xla.sync()`` each step);
- ``xla_compiled_augment``: the same with the step under ``torch_xla.compile``;
- ``tokenize_step``: a Python tokenizer and collate inside the loop, the same batches each
  epoch; fixed: tokenized once, before the loop (the advice: "make them once");
- ``checkpoint``: the parameters pickled to a file every step; fixed: every 50 steps (the
  advice: "do it less often");
- ``xla_loader``: a DataLoader without workers whose ``collate_fn`` tokenizes, read by a
  torch_xla loop: input, the time waiting on the loader; fixed: ``num_workers=2``, or on a
  machine of at most 2 cores (whose workers share them with the step: two slowed this loop
  by 5 to 48% here) the batches tokenized once, before the loop (cause ``few cores``).
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.truth_kinds import Check, Kind, Truth, at_line
from xprof_magic._analysis.diagnosis.verdict import FEW_CORES
from xprof_magic._capture.run_record import usable_cpus

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
        ("input",),
        "input, the user's own NumPy making the batches (no framework op; the input "
        "pipeline): the data path's fix",
        (
            ("cause making batches", lambda r: r["cause"] == "making batches"),
            (
                "the breakdown holds it as input",
                lambda r: r["made_s"] > 0.5 * r["input_s"] > 0,
            ),
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

_TOKENIZE_SETUP = """\
import time, numpy as np, jax, jax.numpy as jnp

rng = np.random.default_rng(0)
words = [f"w{k}" for k in range(VOCAB)]
texts = [
    [" ".join(rng.choice(words, 48)) for _ in range(BATCH)] for _ in range(4)
]
vocab = {w: k for k, w in enumerate(words)}

def tokenize(batch):
    # a word-level tokenizer and collate: split, look up, pad to a fixed length
    ids = np.zeros((len(batch), 64), np.int32)
    for k, text in enumerate(batch):
        row = [vocab.get(w, 0) for w in text.lower().split()][:64]
        ids[k, : len(row)] = row
    return ids

@jax.jit
def train(E, ids):
    return E - 0.01 * jnp.tanh(E[ids[:4]].mean((0, 1)))

E = jnp.zeros((VOCAB, 32), jnp.float32)
train(E, tokenize(texts[0])).block_until_ready()
"""

_TOKENIZE_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    ids = tokenize(texts[i % 4])
    E = train(E, ids)
E.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""

_TOKENIZE_FIXED = """\
t = time.perf_counter()
tokens = [tokenize(batch) for batch in texts]
for i in range(STEPS):
    ids = tokens[i % 4]
    E = train(E, ids)
E.block_until_ready()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""


def _tokenize_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("input",),
        "input, the user's own Python tokenizing each batch again every epoch (the input "
        "pipeline): make them once",
        (
            ("cause making batches", lambda r: r["cause"] == "making batches"),
            at_line(_TOKENIZE_CELL, "ids = tokenize("),
            _says("the fix", "fix", "make them once before the loop"),
        ),
    )


TOKENIZE_STEP = Kind(
    "tokenize_step",
    "a Python word tokenizer and collate of BATCH texts inside the loop (4 batches cycled, as "
    "epochs do), then a small jitted step",
    _TOKENIZE_SETUP,
    _TOKENIZE_CELL,
    _tokenize_truth,
    {
        "cpu": {"VOCAB": 2000, "BATCH": 768, "STEPS": 24},
        "accelerator": {"VOCAB": 8000, "BATCH": 1024, "STEPS": 24},
    },
    fixed=_TOKENIZE_FIXED,
)

_CHECKPOINT_SETUP = """\
import os, pickle, tempfile, time, numpy as np, jax, jax.numpy as jnp

folder = tempfile.mkdtemp()
params = {"w": jnp.full((N, N), 0.01, jnp.float32), "b": jnp.zeros((N,), jnp.float32)}
x = jnp.ones((64, N), jnp.float32)

@jax.jit
def train(params, x):
    return jax.tree.map(lambda p: p * 0.999 + 0.001 * jnp.tanh(x.mean()), params)

def save(params, i):
    # a checkpoint: the parameters on the host, pickled to a file
    with open(os.path.join(folder, "checkpoint.pkl"), "wb") as f:
        pickle.dump({k: np.asarray(v) for k, v in params.items()}, f)

params = train(params, x)
save(params, 0)
"""

_CHECKPOINT_CELL = """\
t = time.perf_counter()
for i in range(STEPS):
    params = train(params, x)
    if i % EVERY == 0:
        save(params, i)
jax.block_until_ready(params)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""


def _checkpoint_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    return Truth(
        ("host",),
        "host, the user's own Python pickling a checkpoint: save less often",
        (
            ("cause own code", lambda r: r["cause"] == "own code"),
            at_line(_CHECKPOINT_CELL, "save(params, i)"),
            _says("the fix", "fix", "less often"),
        ),
    )


CHECKPOINT = Kind(
    "checkpoint",
    "a checkpoint of N×N parameters pickled every EVERY steps of a small jitted step",
    _CHECKPOINT_SETUP,
    _CHECKPOINT_CELL,
    _checkpoint_truth,
    {
        "cpu": {"N": 1024, "EVERY": 1, "STEPS": 20},
        "accelerator": {"N": 4096, "EVERY": 1, "STEPS": 20},
    },
    fixed=_CHECKPOINT_CELL.replace("i % EVERY == 0", "i % 50 == 49"),
)

_LOADER_SETUP = """\
import time, numpy as np, torch, torch_xla

rng = np.random.default_rng(0)
words = [f"w{k}" for k in range(VOCAB)]
texts = [" ".join(rng.choice(words, 48)) for _ in range(BATCH * STEPS)]
vocab = {w: k for k, w in enumerate(words)}

def collate(batch):
    # a word-level tokenizer and collate: split, look up, pad to a fixed length
    ids = np.zeros((len(batch), 64), np.int64)
    for k, text in enumerate(batch):
        row = [vocab.get(w, 0) for w in text.lower().split()][:64]
        ids[k, : len(row)] = row
    return torch.from_numpy(ids)

dev = torch_xla.device()
torch.manual_seed(0)
embed = torch.nn.Embedding(VOCAB, 16).to(dev)
opt = torch.optim.SGD(embed.parameters(), lr=0.01)

def step(ids):
    opt.zero_grad()
    loss = embed(ids[:4]).pow(2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()

loader = torch.utils.data.DataLoader(texts, batch_size=BATCH, collate_fn=collate)
workers = torch.utils.data.DataLoader(
    texts, batch_size=BATCH, collate_fn=collate, num_workers=2, persistent_workers=True,
    prefetch_factor=4)
step(collate(texts[:BATCH]).to(dev))
tokenized = [collate(texts[k : k + BATCH]) for k in range(0, len(texts), BATCH)]
"""

_LOADER_CELL = """\
t = time.perf_counter()
for ids in loader:
    step(ids.to(dev))
torch_xla.sync(wait=True)
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s")
"""


def _loader_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    few = usable_cpus() <= FEW_CORES
    return Truth(
        ("input",),
        "input: the loop waits in next() while the DataLoader (no workers) tokenizes and "
        "collates each batch"
        + (
            f"; on {usable_cpus()} cores, fixed by tokenizing once (workers share them)"
            if few
            else ""
        ),
        (
            at_line(_LOADER_CELL, "for ids in loader"),
            _says("the fix", "fix", "once, before the loop" if few else "num_workers"),
        ),
    )


XLA_LOADER = Kind(
    "xla_loader",
    "a DataLoader without workers whose collate_fn tokenizes BATCH texts, then a small "
    "torch_xla step (synced)",
    _LOADER_SETUP,
    _LOADER_CELL,
    _loader_truth,
    {
        "cpu": {"VOCAB": 2000, "BATCH": 768, "STEPS": 16},
        "accelerator": {"VOCAB": 8000, "BATCH": 1024, "STEPS": 16},
    },
    backend="torch_xla",
    fixed=_LOADER_CELL.replace("in loader", "in workers"),
    fixed_for={"few cores": _LOADER_CELL.replace("in loader", "in tokenized")},
)

XLA_COMPILED_AUGMENT = Kind(
    "xla_compiled_augment",
    "the per-sample NumPy augmentation inside the loop, then a torch_xla step under "
    "torch_xla.compile",
    _XLA_SETUP.replace(
        "step(torch.from_numpy(", "step = torch_xla.compile(step)\nstep(torch.from_numpy("
    ),
    _XLA_CELL,
    _xla_truth,
    _SIZES,
    backend="torch_xla",
    fixed=_XLA_CELL.replace("augment(", "augment_batch("),
)

HOST_KINDS = (
    XLA_COMPILED_AUGMENT,
    AUGMENT_STEP,
    BATCHES_BEFORE,
    XLA_AUGMENT,
    TOKENIZE_STEP,
    CHECKPOINT,
    XLA_LOADER,
)
