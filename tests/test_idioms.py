"""The verdict on the idioms the frameworks' own guides recommend, and the line it names.

Real torch_xla on the CPU and real JAX, each loop run under ``%%xprof --steps`` in the
in-process shell after an unprofiled warm-up run of the same cell (compiled first), then
summarized from its stored run:

- a data loader that syncs or waits for the device inside its ``next()`` (MpDeviceLoader's
  step-end sync, a JAX iterator reading device arrays) is not waiting for data: the loop is
  device-bound, not input-bound; a loader that makes the step wait for its batches still is;
- loops shaped like pytorch/xla's ``examples/train_decoder_only_base.py`` and
  ``train_resnet_base.py`` (MpDeviceLoader over ``xu.SampleGenerator``, a
  ``torch_xla.compile``d step, ``xm.add_step_closure`` logging), in the cell and as the
  example's class called from it, are device-bound;
- with JAX's asynchronous dispatch the device's time is the launching statement's
  (``W = train(W, x)``, the program ``PjitFunction(train)``), not the one that waited for it
  (``jax.block_until_ready``, ``float(loss)``).

The last tests build timelines by hand, to pin each rule on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xprof_magic
from tests._said import notes_of, said, worded
from tests.conftest import names_of, run
from xprof_magic._analysis import Summary, summarize
from xprof_magic._analysis.diagnosis.breakdown import breakdown
from xprof_magic._analysis.diagnosis.launches import callable_name, launcher
from xprof_magic._analysis.summary.where import call_line
from xprof_magic._analysis.timeline.facts import LABEL, LAUNCH, STEP, STEP_END, Block, TraceFacts
from xprof_magic._analysis.timeline.intervals import subtract

TORCH = """
import itertools, time
import numpy as np
import torch, torch_xla, torch.nn as nn
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl
import torch_xla.utils.utils as xu
dev = torch_xla.device()
torch.manual_seed(0)

def mlp(width):
    return nn.Sequential(
        nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 256)).to(dev)

big = mlp(2048)
big_opt = torch.optim.SGD(big.parameters(), lr=0.01)
ready = [(torch.randn(128, 256), torch.randn(128, 256)) for _ in range(6)]

class Decoding(torch.utils.data.Dataset):
    '''Items that take 5 ms each to make (a decode in Python, off the CPU).'''
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.005)
        return np.ones(256, np.float32), np.zeros(256, np.float32)

logged = []
def log(step, loss):
    logged.append((step, loss.item()))
"""

EXAMPLES = """
loss_fn = nn.CrossEntropyLoss()

class Decoder(nn.Module):
    '''A small decoder-only model: embeddings, attention-like mixing, MLP blocks, a head.'''
    def __init__(self, vocab, hidden=256, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 4 * hidden), nn.GELU(),
                          nn.Linear(4 * hidden, hidden))
            for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)
    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks:
            mixed = torch.softmax(h @ h.transpose(1, 2) / 16.0, dim=-1) @ h
            h = h + mixed + block(h)
        return self.head(h)

B, L, V = 8, 64, 1024
tokens = xu.SampleGenerator(
    data=(torch.zeros(B, L, dtype=torch.int64), torch.zeros(B, L, dtype=torch.int64)),
    sample_count=6)
decoder = Decoder(V).to(dev)
adam = torch.optim.Adam(decoder.parameters(), lr=1e-4)
def decoder_step(data, target):
    adam.zero_grad()
    loss = loss_fn(decoder(data).view(-1, V), target.view(-1))
    loss.backward()
    adam.step()
    return loss
compiled_step_fn = torch_xla.compile(decoder_step, full_graph=True, name="decoder_step_fn")

class TrainDecoder:
    '''The example's shape: the loop inside its own methods, one statement in the cell.'''
    def __init__(self, num_steps=6):
        self.num_steps = num_steps
        self.train_device_loader = pl.MpDeviceLoader(tokens, dev)
        self.compiled_step_fn = compiled_step_fn
    def _train_update(self, step, loss):
        logged.append((step, loss.item()))
    def train_loop_fn(self, loader):
        decoder.train()
        loader = itertools.islice(loader, self.num_steps)
        for step, (data, target) in enumerate(loader):
            loss = self.compiled_step_fn(data, target)
            if step % 2 == 0:
                xm.add_step_closure(self._train_update, args=(step, loss))
    def start_training(self):
        self.train_loop_fn(self.train_device_loader)
        xm.wait_device_ops()

trainer = TrainDecoder()

class ConvNet(nn.Module):
    '''A small convolutional classifier, for the ResNet example's loop.'''
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(64, 10)
    def forward(self, x):
        return self.fc(self.features(x))

images = xu.SampleGenerator(
    data=(torch.zeros(16, 3, 48, 48), torch.zeros(16, dtype=torch.int64)), sample_count=6)
convnet = ConvNet().to(dev)
sgd = torch.optim.SGD(convnet.parameters(), lr=0.01, weight_decay=1e-4)
def convnet_step(data, target):
    sgd.zero_grad()
    loss = loss_fn(convnet(data), target)
    loss.backward()
    sgd.step()
    return loss
compiled_convnet_step = torch_xla.compile(convnet_step, full_graph=True, name="resnet_step_fn")
"""


def diagnosed(
    ip: Any, logdir: Path, name: str, body: str, options: str = "", steps: str = ""
) -> Summary:
    """Run ``body`` unprofiled (the warm-up: it compiles), then under ``%%xprof --steps``
    (``--steps steps``, a window, when given), and summarize the run."""
    assert ip.run_cell(body).success
    assert run(ip, logdir, body, f"--steps {steps} --name {name} {options}").success
    summary = xprof_magic.summarize(logdir / "plugins" / "profile" / name)
    assert summary.complete, summary.missing
    return summary


def no_input_alarm(s: Summary) -> None:
    """The verdict is the device's, and no note says the loop waits for its input."""
    d = worded(s)
    assert d.verdict == "device", d.evidence
    assert d.headline.startswith("Device-bound: ") and d.level == "info"
    assert d.share_of("input") < 0.2, d.evidence
    assert not [
        n.text for n in notes_of(s) if "nput-bound" in n.text or "for the next batch" in n.text
    ]


@pytest.fixture(scope="module")
def torch_ready(ip: Any) -> None:
    assert ip.run_cell(TORCH).success


@pytest.fixture(scope="module")
def examples_ready(ip: Any, torch_ready: None) -> None:
    assert ip.run_cell(EXAMPLES).success


def test_mpdeviceloader_waits_for_the_device_not_for_data(
    ip: Any, logdir: Path, torch_ready: None
) -> None:
    body = (
        "for x, y in pl.MpDeviceLoader(ready, dev):\n"
        "    big_opt.zero_grad()\n"
        "    loss = ((big(x) - y) ** 2).mean()\n"
        "    loss.backward()\n"
        "    big_opt.step()\n"
    )
    s = diagnosed(ip, logdir, "mp", body)
    no_input_alarm(s)
    d = s.diagnosis
    assert d.where == ("for x, y in pl.MpDeviceLoader(ready, dev)",) and d.line == 2
    # the loader's next() is still most of the loop's host time: its sync waits there
    rows = {r.path[-1]: r.total_s for r in s.labels if not r.thread}
    assert rows["next(pl.MpDeviceLoader(ready, dev))"] > 0.5 * rows[d.where[0]]
    # before the timeline is read (a pending summary), the executions' time is not input
    quick = summarize(s.run_dir, budget_s=0.0)
    assert quick.pending and quick.diagnosis.verdict == "device", said(quick).evidence


def test_a_steptrace_loop_and_a_dataloader_with_workers_are_device_bound(
    ip: Any, logdir: Path, torch_ready: None
) -> None:
    steptrace = (
        "for step, (x, y) in enumerate(pl.MpDeviceLoader(ready, dev)):\n"
        "    with xp.StepTrace('train_step', step_num=step):\n"
        "        big_opt.zero_grad()\n"
        "        loss = ((big(x) - y) ** 2).mean()\n"
        "        loss.backward()\n"
        "        xm.optimizer_step(big_opt)\n"
    )
    s = diagnosed(ip, logdir, "steptrace", steptrace)
    assert s.steps is not None and s.steps.name == "train_step"
    no_input_alarm(s)
    # launched in the step marker's exit: the statement is the loop, the marker no label
    assert s.diagnosis.where == ("for step, (x, y) in enumerate(pl.MpDeviceLoader(ready, dev))",)
    ip.run_cell(
        "workers = torch.utils.data.DataLoader(\n"
        "    Decoding(), batch_size=8, num_workers=2, persistent_workers=True)"
    )
    workers = (
        "for x, y in itertools.islice(workers, 8):\n"
        "    big_opt.zero_grad()\n"
        "    loss = ((big(x.to(dev)) - y.to(dev)) ** 2).mean()\n"
        "    loss.backward()\n"
        "    xm.optimizer_step(big_opt, barrier=True)\n"
    )
    # The steps after the first two: the workers' first batches are the loader's start-up.
    s = diagnosed(ip, logdir, "workers", workers, steps="2:8")
    assert s.steps is not None and s.steps.count == 6
    no_input_alarm(s)


def test_a_dataloader_without_workers_still_makes_the_step_wait(
    ip: Any, logdir: Path, torch_ready: None
) -> None:
    ip.run_cell(
        "small = mlp(64)\n"
        "small_opt = torch.optim.SGD(small.parameters(), lr=0.01)\n"
        "inline = torch.utils.data.DataLoader(Decoding(), batch_size=8, num_workers=0)"
    )
    body = (
        "for x, y in itertools.islice(inline, 6):\n"
        "    small_opt.zero_grad()\n"
        "    loss = ((small(x.to(dev)) - y.to(dev)) ** 2).mean()\n"
        "    loss.backward()\n"
        "    xm.optimizer_step(small_opt, barrier=True)\n"
    )
    d = worded(diagnosed(ip, logdir, "inline", body))
    assert d.verdict == "input" and d.share is not None and d.share > 0.5, d.evidence
    assert d.where == ("for x, y in itertools.islice(inline, 6)",) and d.line == 2
    assert "num_workers > 0" in d.fix and d.level == "warning"


def test_the_decoder_examples_loop_in_the_cell_is_device_bound(
    ip: Any, logdir: Path, examples_ready: None
) -> None:
    body = (
        "loader = itertools.islice(pl.MpDeviceLoader(tokens, dev), 6)\n"
        "for step, (data, target) in enumerate(loader):\n"
        "    loss = compiled_step_fn(data, target)\n"
        "    if step % 2 == 0:\n"
        "        xm.add_step_closure(log, args=(step, loss))\n"
    )
    ip.run_cell("logged.clear()")
    s = diagnosed(ip, logdir, "decoder", body)
    no_input_alarm(s)
    assert s.diagnosis.where == ("for step, (data, target) in enumerate(loader)",)
    assert s.diagnosis.line == 3
    assert [step for step, _ in ip.user_ns["logged"]] == [0, 2, 4] * 2, "closures ran"


def test_the_decoder_examples_class_called_from_the_cell_is_device_bound(
    ip: Any, logdir: Path, examples_ready: None
) -> None:
    s = diagnosed(ip, logdir, "decoder-class", "trainer.start_training()\n")
    assert s.steps is not None and s.steps.count >= 6, "a step ends at each sync"
    no_input_alarm(s)
    assert s.diagnosis.where == ("trainer.start_training()",) and s.diagnosis.line == 2


def test_the_resnet_examples_loop_in_the_cell_is_device_bound(
    ip: Any, logdir: Path, examples_ready: None
) -> None:
    body = (
        "loader = itertools.islice(pl.MpDeviceLoader(images, dev), 6)\n"
        "for step, (data, target) in enumerate(loader):\n"
        "    loss = compiled_convnet_step(data, target)\n"
        "    if step % 2 == 0:\n"
        "        xm.add_step_closure(log, args=(step, loss))\n"
    )
    no_input_alarm(diagnosed(ip, logdir, "resnet", body))


JAX = """
import numpy as np
import jax, jax.numpy as jnp

@jax.jit
def train(W, x):
    for _ in range(6):
        W = jnp.tanh(W @ x) * 0.5 + W * 0.5
    return W

@jax.jit
def train_step(W, x):
    W = train(W, x)
    return W, (W ** 2).mean()

@jax.jit
def make(i):
    return jnp.full((512, 512), 0.001) * i

W = jnp.full((512, 512), 0.01)
x = jnp.full((512, 512), 0.01)
# Enough batches that the first, which no prefetch can hide, is a small part of the loop.
host_batches = [np.full((512, 512), 0.001, np.float32) for _ in range(24)]

def made_on_the_device(n):
    '''Batches computed by a jitted function, read back on the host: each next() waits
    for the device, which is still running the step before.'''
    for i in range(n):
        yield np.asarray(make(i))

def prefetched(batches):
    '''jax.device_put of the next batch before the step needs it.'''
    it = iter(batches)
    ahead = jax.device_put(next(it))
    for b in it:
        current, ahead = ahead, jax.device_put(b)
        yield current
    yield ahead
"""


@pytest.fixture(scope="module")
def jax_ready(ip: Any) -> Iterator[None]:
    with names_of(ip, JAX):
        yield


def launched_by(s: Summary, statement: str, line: int, program: str) -> None:
    """The device's time is the launching statement's, with the program it launched."""
    d = worded(s)
    assert d.verdict == "device", d.evidence
    assert d.where[-1] == statement and d.line == line, (d.where, d.line)
    assert d.program == program
    assert f"(`{program}`, launched by `{statement}`, line {line})" in d.headline
    internal = {"np.asarray(jax.Array)", "ArrayImpl.copy_to_host_async"}
    assert not [r.path for r in s.labels if internal & set(r.path)], "JAX's own waits"


def test_jax_async_steps_then_block_until_ready_are_the_loops(
    ip: Any, logdir: Path, jax_ready: None
) -> None:
    body = "for i in range(20):\n    W = train(W, x)\njax.block_until_ready(W)\n"
    s = diagnosed(ip, logdir, "jbur", body, "--backend jax")
    # the wait holds nearly all the host's time, yet only waited
    rows = {r.path[-1]: r.total_s for r in s.labels}
    assert rows["jax.block_until_ready(W)"] > rows["for i in range(20)"]
    launched_by(s, "W = train(W, x)", 3, "PjitFunction(train)")
    assert s.diagnosis.where == ("for i in range(20)", "W = train(W, x)")


def test_jax_float_loss_each_step_is_the_steps(ip: Any, logdir: Path, jax_ready: None) -> None:
    body = (
        "losses = []\n"
        "for i in range(16):\n"
        "    W, loss = train_step(W, x)\n"
        "    losses.append(float(loss))\n"
    )
    s = diagnosed(ip, logdir, "jfloat", body, "--backend jax")
    launched_by(s, "W, loss = train_step(W, x)", 4, "PjitFunction(train_step)")


def test_jax_loaders_that_wait_for_the_device_or_prefetch_are_not_input(
    ip: Any, logdir: Path, jax_ready: None
) -> None:
    body = "for b in made_on_the_device(8):\n    W = train(W, b)\n    W.sum().item()\n"
    s = diagnosed(ip, logdir, "jiter", body, "--backend jax")
    no_input_alarm(s)
    launched_by(s, "W = train(W, b)", 3, "PjitFunction(train)")
    body = "for b in prefetched(host_batches):\n    W = train(W, b)\njax.block_until_ready(W)\n"
    s = diagnosed(ip, logdir, "jprefetch", body, "--backend jax")
    no_input_alarm(s)
    launched_by(s, "W = train(W, b)", 3, "PjitFunction(train)")


def _facts(blocks: list[Block], spans: dict[str, list[tuple[float, float]]]) -> TraceFacts:
    """A timeline's facts, built by hand: its blocks, and spans by key (ns from 0 to 100)."""
    facts = TraceFacts(host="h", window=(0.0, 100.0), blocks=blocks)
    for key, pieces in spans.items():
        facts.spans[key] = [([a for a, _ in pieces], [b for _, b in pieces])]
    return facts


def test_a_next_is_input_only_while_it_waits_for_data() -> None:
    """A ``next()`` from 0 to 60: 10 to 30 the runtime ends the step and waits at its
    barrier, 30 to 50 the device computes, 50 to 60 the loader is still busy: 10 + 10 of
    input. The step's own work, 60 to 100, is host."""
    blocks = [
        Block("for x in loader", LABEL, 0.0, 100.0, -1, "python"),
        Block("step", STEP, 0.0, 100.0, 0, "python", step_num=0),
        Block("next(loader)", LABEL, 0.0, 60.0, 1, "python"),
    ]
    spans = {STEP_END: [(10.0, 30.0)], "sync": [(20.0, 30.0)], "device": [(30.0, 50.0)]}
    facts = _facts(blocks, spans)
    parts = breakdown(facts, "python", frozenset())
    seconds = dict(zip(parts.categories, parts.steps[0].seconds, strict=True))
    assert seconds["input"] == pytest.approx(20e-9)
    assert seconds["device"] == pytest.approx(20e-9)
    assert seconds["sync"] == pytest.approx(10e-9)
    assert seconds["host"] == pytest.approx(50e-9)


def test_the_device_time_is_the_first_launch_since_it_was_idle() -> None:
    """A loop fetches a batch made on the device (``make``, 4), launches ``train`` (10) and
    a tiny ``reduce`` (20), then waits: the device's stretch from 30 to 90 ran ``train``,
    the first launch since the device went idle at 8, not the ``reduce`` launched just
    before it. The batch's ``next()`` stands for its loop."""
    blocks = [
        Block("for b in batches()", LABEL, 0.0, 25.0, -1, "python"),
        Block("next(batches())", LABEL, 3.0, 6.0, 0, "python"),
        Block("jax.block_until_ready(W)", LABEL, 25.0, 95.0, -1, "python"),
    ]
    facts = _facts(blocks, {"device": [(5.0, 8.0), (30.0, 90.0)]})
    facts.spans[LAUNCH + "PjitFunction(make)"] = [([4.0], [5.0])]
    facts.spans[LAUNCH + "PjitFunction(train)"] = [([10.0], [11.0])]
    facts.spans[LAUNCH + "PjitFunction(reduce)"] = [([20.0], [21.0])]
    found = launcher(facts, "python", frozenset())
    assert found is not None
    assert found.path == ("for b in batches()",) and found.program == "PjitFunction(train)"
    assert found.share == pytest.approx(1.0)
    assert callable_name("PjitFunction(Model.apply)") == "apply"
    assert callable_name("PjitFunction(<lambda>)") == ""


def test_the_launching_line_is_found_inside_its_block() -> None:
    cell = (
        "for i in range(3):\n"
        "    def train(w):\n"
        "        return w\n"
        "    w = pretrain(w)\n"
        "    w = model.train(w)  # the call\n"
        "jax.block_until_ready(w)\n"
        "# xprof: again\n"
        "w = 2\n"
        "w = train(w)\n"
        "# xprof: other\n"
        "train(w)\n"
    )
    assert call_line(cell, 1, "train") == (5, "w = model.train(w)")
    assert call_line(cell, 6, "train") == (0, "")
    assert call_line(cell, 7, "train") == (9, "w = train(w)")
    assert call_line(cell, 1, "<lambda>") == (0, "")


def test_spans_subtract() -> None:
    spans = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))
    cut = (np.array([2.0, 12.0]), np.array([3.0, 30.0]))
    lo, hi = subtract(spans, cut)
    assert lo.tolist() == [0.0, 3.0, 10.0] and hi.tolist() == [2.0, 5.0, 12.0]
