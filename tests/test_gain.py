"""Mixed steps said as mixed, and what the fix would gain, predicted and then measured.

Two tiers. Breakdowns written here (no torch) pin the rules exactly: when a step has no
single bottleneck and which category is then named, and the gain model (a step without the
verdict's time, never shorter than the device's busy time in it). Then real torch_xla and
JAX loops on the CPU, each after an unprofiled warm-up run of the same cell, under
``%%xprof --steps``: a step that copies as much as it computes, and four bottlenecks fixed
the way the verdict says (workers for a slow ``__getitem__``, padding for changing shapes, a
sync for a growing graph, ``jax.jit`` for eager JAX), the run after the fix compared with the
run before it. The prediction must land within :data:`FACTOR` of the measured speed-up:
a ratio of two captures on the same machine, with costs of tens to hundreds of
milliseconds a step, so that a neighbour's load moves both runs alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests._said import said, worded
from tests.test_diagnosis import headline
from xprof_magic._analysis import Summary, compare
from xprof_magic._analysis.diagnosis.breakdown import breakdown
from xprof_magic._analysis.diagnosis.gain import gain_of, step_time
from xprof_magic._analysis.diagnosis.verdict import FEW_CORES, diagnose
from xprof_magic._analysis.model.categories import BREAKDOWN as BREAKDOWN_CATEGORIES
from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, Gain, StepBreakdown
from xprof_magic._analysis.render.headline import speedup
from xprof_magic._analysis.timeline.read import read_planes
from xprof_magic._backends.torch_xla_vocabulary import VOCABULARY as TORCH_XLA_WORDS
from xprof_magic._capture.run_record import usable_cpus

FACTOR = 2.0
"""How far the predicted speed-up may be from the measured one, either way."""
FUSED_FACTOR = 2.5
"""The same for eager JAX made ``jax.jit``: the prediction takes away the host's time only,
while the compiled program also fuses the device's 400 small ops, so the measured speed-up
is the larger, by 1.7–2× in our runs (predicted 4.17×, measured 8.21×; 5.30×, 9.23×)."""

# --- the rules, on breakdowns written here --------------------------------------------------


def _steps(*rows: dict[str, float], busy: float = 0.0, n: int = 4) -> Breakdown:
    """``n`` steps of each row (seconds per category), the device ``busy`` in each."""
    steps = []
    for row in rows:
        for _ in range(n):
            parts = tuple(row.get(c, 0.0) for c in BREAKDOWN_CATEGORIES)
            steps.append(StepBreakdown(len(steps), sum(parts), parts, busy))
    cell = tuple(sum(s.seconds[i] for s in steps) for i in range(len(BREAKDOWN_CATEGORIES)))
    return Breakdown(BREAKDOWN_CATEGORIES, cell, sum(cell), tuple(steps), len(steps))


def _diagnosed(parts: Breakdown) -> Any:
    """The diagnosis of ``parts`` with its words, in torch_xla's."""
    s = Summary(run="r", run_dir="/r", backend="torch_xla")
    return worded(replace(s, diagnosis=diagnose(s, TORCH_XLA_WORDS, parts)))


def test_a_step_with_no_majority_names_the_cheapest_category_to_remove() -> None:
    d = _diagnosed(_steps({"device": 0.39, "transfer": 0.34, "host": 0.27}))
    assert (d.mixed, d.verdict, d.runner_up) == (True, "transfer", "device")
    assert d.share == pytest.approx(0.34)
    assert d.headline.startswith(
        "No single bottleneck: device 39%, transfers 34%, host 27% of each step. "
        "Cheapest to remove: the transfers"
    ), d.headline
    assert "most" not in d.headline and d.fix == TORCH_XLA_WORDS.advice.fixes["transfer"]
    # the cheapest by the fix's kind: a loader's workers, then a sync, before a transfer;
    # the host's own code after them, the device's own compute last
    d = _diagnosed(_steps({"device": 0.40, "host": 0.30, "sync": 0.30}))
    assert (d.mixed, d.verdict) == (True, "sync")
    d = _diagnosed(_steps({"device": 0.45, "transfer": 0.25, "input": 0.30}))
    assert (d.mixed, d.verdict) == (True, "input")
    assert "Cheapest to remove: the input wait" in d.headline


def test_a_runner_up_within_ten_points_makes_a_step_mixed_a_clear_leader_does_not() -> None:
    close = _diagnosed(_steps({"device": 0.54, "host": 0.45, "sync": 0.01}))
    assert (close.mixed, close.verdict, close.runner_up) == (True, "host", "device")
    clear = _diagnosed(_steps({"device": 0.56, "host": 0.44}))
    assert (clear.mixed, clear.verdict, clear.runner_up) == (False, "device", "host")
    assert clear.headline.startswith("Device-bound: 56% of each step runs on the device")
    assert "most of the time" not in clear.headline
    # XProf's input rule is kept where a step has a clear leader: 25% input is the verdict
    fed = _diagnosed(_steps({"device": 0.70, "input": 0.25, "host": 0.05}))
    assert (fed.mixed, fed.verdict) == (False, "input")
    # with a leader under half and nothing else at 15%, the device is named as the largest
    spread = _diagnosed(_steps({"device": 0.45, "host": 0.14, "transfer": 0.14, "sync": 0.27}))
    assert (spread.mixed, spread.verdict) == (True, "sync")
    alone = _diagnosed(
        _steps({"device": 0.46, "host": 0.14, "transfer": 0.14, "sync": 0.13, "input": 0.13})
    )
    assert (alone.mixed, alone.verdict) == (True, "device")
    assert "the largest is the device's own compute" in alone.headline


def test_the_gain_is_the_step_without_the_verdicts_time_bounded_by_the_device() -> None:
    # 80 ms of each 100 ms step waits for the batch, but the device was busy 70 ms of the
    # step (it ran under the wait): without the wait a step still takes 70 ms, not 20.
    waits = _steps({"input": 0.08, "device": 0.01, "host": 0.01}, busy=0.07)
    d = _diagnosed(waits)
    assert d.verdict == "input" and d.gain == Gain("input", 0.1, 0.07)
    assert d.gain.speedup == pytest.approx(0.1 / 0.07)
    said = "Without the input wait a step would take about 70.0 ms instead of 100.0 ms on average"
    assert f"{said} (1.4×)" in d.headline
    # nothing under the wait: the step is left with what is not input
    idle = _diagnosed(_steps({"input": 0.08, "device": 0.01, "host": 0.01}, busy=0.01))
    assert idle.gain == Gain("input", 0.1, 0.02) and "(5.0×)" in idle.headline
    assert ("without input", "20.0 ms instead of 100.0 ms (5.0×)") in idle.evidence


def test_workers_for_a_batch_made_on_the_cpu_gain_no_more_than_the_machines_cores_allow() -> None:
    """A loop waits 70 ms of each 100 ms step while its loader decodes on the cell's thread.

    Workers take that work to other cores, but it is still done: with the step's own 10 ms of
    host work it needs 40 ms of a 2-core machine each step, not the 30 ms left without the
    wait, and the one core the step leaves them takes 70 ms: 1.4×, not 3.3×. On 4 cores or
    64, or for a wait on a store's latency (no CPU), the wait's bound stands.
    """
    parts = _steps({"input": 0.07, "device": 0.02, "host": 0.01}, busy=0.02)
    assert gain_of(parts, "input") == Gain("input", 0.1, 0.03)
    assert gain_of(parts, "input", cores=2) == Gain("input", 0.1, 0.07, 2)
    assert gain_of(parts, "input", cores=4) == Gain("input", 0.1, 0.03)
    assert gain_of(parts, "input", cores=64) == Gain("input", 0.1, 0.03)
    assert gain_of(parts, "input", cores=2, on_cpu=0.1) == Gain("input", 0.1, 0.03)
    assert gain_of(parts, "input", "making batches", cores=2) == Gain("input", 0.1, 0.03)
    s = Summary(run="r", run_dir="/r", backend="torch_xla")
    diagnosis = replace(diagnose(s, TORCH_XLA_WORDS, parts), gain=gain_of(parts, "input", cores=2))
    bound = worded(replace(s, diagnosis=diagnosis))
    assert (
        "still need this machine's 2 cores beside the step: a step would take about 70.0 ms"
        " instead of 100.0 ms on average (1.4×)" in bound.headline
    ), bound.headline


_UNDECIDED = {"input": 0.09, "host": 0.16} | dict.fromkeys(
    ("compile", "transfer", "sync", "device", "collective"), 0.15
)
"""No category reaches 20%: no verdict."""


def test_a_growing_graph_would_cost_each_step_what_its_least_step_costs() -> None:
    """The steps re-run the graph of the steps before them: without compiles and with a sync
    each would cost what the first one does, not the mean of the growing ones."""
    rows = [{"compile": 0.5, "device": 0.01 * (i + 1), "host": 0.01} for i in range(4)]
    steps = _steps(*rows, n=1)
    growing = gain_of(steps, "compile", "growing graph")
    assert growing is not None and growing.without_s == pytest.approx(0.02)
    plain = gain_of(steps, "compile")
    assert plain is not None and plain.without_s == pytest.approx(0.035)


@pytest.mark.parametrize(
    ("row", "verdict"),
    [
        ({"input": 0.6, "device": 0.4}, "input"),
        ({"host": 0.7, "device": 0.3}, "host"),
        ({"compile": 0.8, "host": 0.2}, "compile"),
        ({"transfer": 0.7, "device": 0.3}, "transfer"),
        ({"sync": 0.7, "host": 0.3}, "sync"),
        ({"collective": 0.7, "device": 0.3}, "collective"),
        ({"device": 0.9, "host": 0.1}, "device"),
        (_UNDECIDED, "unknown"),
    ],
)
def test_every_verdict_carries_what_its_fix_would_gain(row: dict[str, float], verdict: str) -> None:
    d = _diagnosed(_steps(row))
    assert d.verdict == verdict and d.gain is not None
    largest = max(row, key=lambda c: row[c])
    assert d.gain.category == (largest if verdict == "unknown" else verdict)
    assert d.gain.step_s == pytest.approx(sum(row.values()))
    if verdict == "device":
        # the healthy case: the step reduced to the device's own work, the gain in the model
        assert d.gain.without_s == pytest.approx(0.9)
        assert "Everything else is 10% of a step" in d.headline
        assert "the gain lies in the model" in d.headline
    elif verdict != "unknown":
        assert d.gain.without_s == pytest.approx(sum(row.values()) - row[verdict])
        assert f"a step would take about {_ms(d.gain.without_s)}" in d.headline
    named = "device alone" if verdict == "device" else f"without {d.gain.category}"
    assert named in dict(d.evidence), d.evidence


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def test_a_cell_too_short_for_a_verdict_still_carries_a_gain() -> None:
    d = _diagnosed(_steps({"host": 0.001, "device": 0.0005}, n=2))
    assert d.verdict == "unknown" and not d.headline
    assert d.gain == Gain("host", 0.0015, 0.0005)


def test_each_step_keeps_the_devices_busy_time_whichever_category_holds_it() -> None:
    """A written timeline: in each 100 ms step the loop waits 60 ms for its batch while the
    XLA CPU client runs an execution of 50 ms, 30 of them under the wait. Those 30 ms are the
    device's, not input (a next() is input only while it waits for data: test_idioms), so
    without the input a step takes 70 ms, and never less than the device's 50."""

    class Event:
        def __init__(self, name: str, start_ms: float, ms: float, **stats: str) -> None:
            self.name, self.start_ns, self.duration_ns = name, start_ms * 1e6, ms * 1e6
            self.stats = tuple(stats.items())

    class Line:
        def __init__(self, name: str, events: list[Event]) -> None:
            self.name, self.events = name, events

    class Plane:
        def __init__(self, name: str, lines: list[Line]) -> None:
            self.name, self.lines, self.stats = name, lines, ()

    python, client = [], []
    for i in range(3):
        at = 100.0 * i
        python.append(Event("step", at, 100, step_num=str(i), _r="1"))
        python.append(Event("next(batches)", at, 60))
        client.append(Event("ExecuteHelper", at + 30, 50))
    host = Plane("/host:CPU", [Line("python", python), Line("tf_XLAPjRtCpuClient/1", client)])
    facts = read_planes([host], label_names=frozenset({"next(batches)"}))
    parts = breakdown(facts, "python", frozenset())
    assert [s.busy_s for s in parts.steps] == pytest.approx([0.05] * 3)
    assert parts.busy_s == pytest.approx(0.15)
    d = _diagnosed(parts)
    assert d.verdict == "input" and d.gain == Gain("input", 0.1, 0.07)
    assert d.gain.without_s >= parts.busy_s / len(parts.steps)


def test_a_summary_saved_before_the_gain_loads_without_it(tmp_path: Path) -> None:
    d = _diagnosed(_steps({"device": 0.39, "transfer": 0.34, "host": 0.27}))
    s = Summary(run="r", run_dir="/r", backend="torch_xla", diagnosis=d.diagnosis)
    data = s.to_json()
    assert Summary.from_json(data) == s
    for key in ("mixed", "runner_up", "gain", "changed", "changed_in"):
        del data["diagnosis"][key]
    for step in data["diagnosis"]["breakdown"]["steps"]:
        del step["busy_s"]
    del data["diagnosis"]["breakdown"]["busy_s"]
    # as such a summary was saved: schema 2, with its words
    data["schema"] = 2
    data["diagnosis"].update(headline=d.headline, fix=d.fix, evidence=[*map(list, d.evidence)])
    old = worded(Summary.from_json(data))
    assert (old.mixed, old.runner_up, old.gain, old.changed) == (False, "", None, ())
    assert old.headline == d.headline
    # a comparison with such a run predicts nothing, nor one with a run that fixed nothing
    assert compare(Summary.from_json(data), s).predicted is None
    assert compare(s, s).predicted is None and compare(s, s).notes == ()


# --- real loops: a mixed step, and four fixes compared with their prediction ---------------

SETUP = """
import time
import torch, torch_xla
import torch_xla.core.xla_model as xm
dev = torch_xla.device()
W = torch.randn(512, 512, device=dev) / 23
W2 = torch.randn(1024, 1024, device=dev) / 32
table = torch.randn(100, 512, device=dev)
torch_xla.sync()

class SlowItems(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.015)  # decoding, reading: a batch of 4 takes 60 ms to make
        return torch.arange(64) % 100  # token ids: small, so the workers' copies are cheap

def block(h):
    for _ in range(3):
        h = torch.tanh(h @ W)
    return h
"""


@pytest.fixture(scope="module")
def torch_ready(ip: Any) -> None:
    assert ip.run_cell(SETUP).success


def profiled(
    ip: Any,
    logdir: Path,
    name: str,
    body: str,
    *,
    warm: bool = True,
    wait: str = "xm.wait_device_ops()",
) -> Summary:
    """Run ``body`` unprofiled (``warm``), let the device finish what it queued (``wait``:
    the backends dispatch asynchronously, and a warm-up's work must not run inside the
    capture), then profiled under ``--steps``; its summary."""
    if warm:
        assert ip.run_cell(body).success
    assert ip.run_cell(wait).success
    backend = "jax" if "jax" in wait else "torch_xla"
    options = f"--steps --backend {backend} --name {name} --logdir {logdir} --no-display"
    assert ip.run_cell(f"%%xprof {options}\n{body}").success
    summary = xprof_magic.summarize(logdir / "plugins" / "profile" / name)
    assert summary.complete, summary.missing
    return summary


Attempt = Callable[[int], tuple[Summary, Summary]]
"""Capture the run before the fix and the run after it, the ``k``-th time (names and any
fresh shapes made unique by ``k``)."""


def predicted_and_measured(
    ip: Any, capsys: pytest.CaptureFixture[str], attempt: Attempt, factor: float = FACTOR
) -> None:
    """A's prediction lands within ``factor`` of the measured speed-up of B over A.

    A neighbour's burst of load can slow one capture and not the other, so while the ratio
    is outside the factor both runs are captured again, up to three times, and the fastest
    capture of each (the least disturbed) is compared. A wrong model stays outside on every
    attempt. The comparison says both, in its data and in ``%xprof compare A B``."""
    before: list[Summary] = []
    after: list[Summary] = []
    for k in range(3):
        a, b = attempt(k)
        assert a.diagnosis.gain is not None, a.diagnosis
        before.append(a)
        after.append(b)
        a = min(before, key=lambda s: step_time(s.diagnosis) or 0.0)
        b = min(after, key=lambda s: step_time(s.diagnosis) or 0.0)
        c = compare(a, b)
        assert c.predicted == a.diagnosis.gain and c.measured is not None
        ratio = c.predicted.speedup / c.measured
        with capsys.disabled():
            print(f"{a.run}: predicted {c.predicted.speedup:.2f}x, measured {c.measured:.2f}x")
        if 1 / factor <= ratio <= factor:
            break
    assert 1 / factor <= ratio <= factor, (c.predicted, c.measured)
    capsys.readouterr()
    ip.run_line_magic("xprof", f"compare {a.run} {b.run}")
    out = capsys.readouterr().out
    assert f"Predicted {speedup(c.predicted.speedup)}, measured {speedup(c.measured)}" in out


def test_a_step_that_copies_as_much_as_it_computes_has_no_single_bottleneck(
    ip: Any, logdir: Path, torch_ready: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """20 MB to the device and back each step, beside about as much compute and host work:
    no category has most of the step, and the transfers are the one to remove.

    The host's part is a wait (a step's logging or I/O): a Python loop of tensor ops had 27%
    of the step on an idle machine and 60% late in a ``make stress-test`` session. And the
    copies and the compute do not slow alike under load (XLA's CPU compute shares its
    threads with the hogs, a copy is one thread): the device had 50% and the copies 15%
    there. So a capture whose parts are not even sizes the next one's copy and wait from
    its own measured parts; the diagnosis is then checked on an even one."""
    cell = {"n": 5_000_000, "wait": 0.03}

    def body() -> str:
        return (
            "import time\n"
            f"big = torch.randn({cell['n']})\n"
            "h = torch.randn(1024, 512, device=dev)\n"
            "for i in range(4):\n"
            "    t = big.to(dev) * 2\n"
            "    for k in range(6):\n"
            "        h = torch.tanh(h @ W)\n"
            f"    time.sleep({cell['wait']:.4f})\n"
            "    torch_xla.sync()\n"
            "    back = t.cpu()\n"
            "    h.sum().item()\n"
        )

    def even_out(d: Diagnosis) -> None:
        step = step_time(d) or 0.0
        device, copies = d.share_of("device") * step, d.share_of("transfer") * step
        if device > 0 and copies > 0:
            n = cell["n"] * min(3.0, max(1 / 3, device / copies))
            cell["n"] = int(min(40_000_000, max(1_000_000, n)))
            cell["wait"] = min(0.3, device)  # the host waits as long as the device computes

    def attempt(k: int) -> tuple[Summary, Summary]:
        # A burst of load can still slow one part and make it the largest: up to six
        # captures find an even one (the first attempt's evening out holds for the others,
        # so that every attempt's pair measures the same cell).
        for again in range(6):
            a = profiled(ip, logdir, f"copies{k}-{again}", body())
            if a.diagnosis.mixed and a.diagnosis.verdict == "transfer":
                break
            if k == 0:
                even_out(a.diagnosis)
        d = worded(a)
        assert d.mixed and d.verdict == "transfer", (d.evidence, cell)
        assert headline(a).startswith("No single bottleneck: ")
        assert "Cheapest to remove: the transfers" in d.headline and "MB moved" in d.headline
        assert "most" not in d.headline and "most" not in d.fix
        assert "Without the transfers a step would take about" in d.headline
        # The fix: the data is copied once, in an earlier cell, and stays on the device.
        kept = f"bigd = torch.randn({cell['n']}).to(dev)\nxm.wait_device_ops()"
        assert ip.run_cell(kept).success
        fixed = body().replace(f"big = torch.randn({cell['n']})\n", "")
        fixed = fixed.replace("big.to(dev) * 2", "bigd * 2").replace("    back = t.cpu()\n", "")
        assert "big" not in fixed.replace("bigd", "")
        b = profiled(ip, logdir, f"kept{k}", fixed)
        assert b.diagnosis.share_of("transfer") < d.share_of("transfer") / 4
        return a, b

    predicted_and_measured(ip, capsys, attempt)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
# Forked after an earlier test started JAX's threads: the workers only sleep and make CPU
# tensors, never touching JAX, as a notebook's DataLoader does beside it.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called")
def test_workers_for_a_slow_getitem_gain_what_was_predicted(
    ip: Any, logdir: Path, torch_ready: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # A step computes for longer than 4 workers take to make a batch, and reads its loss,
    # so that the host waits for the device in both runs: on the CPU a host running ahead
    # would slow the device down, which it would not on a TPU.
    body = (
        "for x in loader:\n"
        "    loss = block(block(block(table[x.to(dev)]))).sum()\n"
        "    torch_xla.sync()\n"
        "    loss.item()\n"
    )

    def attempt(k: int) -> tuple[Summary, Summary]:
        assert ip.run_cell(
            "loader = torch.utils.data.DataLoader(SlowItems(), batch_size=4)"
        ).success
        a = profiled(ip, logdir, f"getitem{k}", body)
        assert a.diagnosis.verdict == "input"
        assert "Without the input wait a step would take about" in said(a).headline
        assert ip.run_cell(
            "loader = torch.utils.data.DataLoader(SlowItems(), batch_size=4, num_workers=4, "
            "persistent_workers=True)"
        ).success
        b = profiled(ip, logdir, f"workers{k}", body)
        assert b.diagnosis.share_of("input") < a.diagnosis.share_of("input")
        return a, b

    predicted_and_measured(ip, capsys, attempt)


def test_padding_for_changing_shapes_gains_what_was_predicted(
    ip: Any, logdir: Path, torch_ready: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each step reads its loss: its execution runs in the step, not under the next compile
    # (on the CPU the two share the cores, which a TPU's compile and compute would not).
    body = (
        "for L in lengths:\n"
        "    ids = torch.randint(0, 100, (16, L)).to(dev)\n"
        "    loss = block(table[ids]).sum()\n"
        "    torch_xla.sync()\n"
        "    loss.item()\n"
    )
    padded = body.replace(
        "torch.randint(0, 100, (16, L))",
        "torch.nn.functional.pad(torch.randint(0, 100, (16, L)), (0, 96 - L))",
    )

    def attempt(k: int) -> tuple[Summary, Summary]:
        fresh = tuple(n - 16 * k for n in (81, 85, 89, 93, 87, 91))  # never compiled
        assert ip.run_cell(f"lengths = {fresh}").success
        a = profiled(ip, logdir, f"unpadded{k}", body, warm=False)
        d = worded(a)
        assert (d.verdict, d.cause) == ("compile", "changing shapes")
        assert d.changed_in == "program inputs"
        assert "Without the compilations a step would take" in d.headline
        assert ip.run_cell(f"lengths = {tuple(n + 1 for n in fresh)}").success
        b = profiled(ip, logdir, f"padded{k}", padded)
        assert b.diagnosis.share_of("compile") < 0.05
        return a, b

    predicted_and_measured(ip, capsys, attempt)


def test_a_sync_for_a_growing_graph_gains_what_was_predicted(
    ip: Any, logdir: Path, torch_ready: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a sync each step's ``.item()`` compiles and runs the graph of every step so
    far; with one, a step is one matmul."""
    body = (
        "g = torch.ones(ROWS, 1024, device=dev)\n"
        "for i in range(4):\n"
        "    g = torch.tanh(g @ W2)\n"
        "    g.sum().item()\n"
    )
    synced = body.replace("    g.sum().item()\n", "    torch_xla.sync()\n    g.sum().item()\n")

    def attempt(k: int) -> tuple[Summary, Summary]:
        rows = str(1024 - 8 * k)  # graphs never compiled
        a = profiled(ip, logdir, f"unsynced{k}", body.replace("ROWS", rows), warm=False)
        d = a.diagnosis
        assert (d.verdict, d.cause) == ("compile", "growing graph")
        b = profiled(ip, logdir, f"synced{k}", synced.replace("ROWS", rows))
        assert b.diagnosis.share_of("compile") < 0.05
        return a, b

    predicted_and_measured(ip, capsys, attempt)


JAX_SETUP = """
import jax, jax.numpy as jnp
Wj = jnp.ones((64, 64)) / 64
def layers(v):
    for _ in range(400):
        v = jnp.maximum(v @ Wj, 0.0)
    return v
jitted = jax.jit(layers)
"""


def test_jit_for_eager_jax_gains_what_was_predicted(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ip.run_cell(JAX_SETUP).success
    body = "v = jnp.ones((64, 64))\nfor i in range(24):\n    v = layers(v)\n"
    wait = "jax.block_until_ready(v)"

    def attempt(k: int) -> tuple[Summary, Summary]:
        a = profiled(ip, logdir, f"eager{k}", body, wait=wait)
        assert a.diagnosis.verdict == "host", said(a).evidence
        b = profiled(ip, logdir, f"jitted{k}", body.replace("layers(v)", "jitted(v)"), wait=wait)
        assert b.diagnosis.share_of("host") < a.diagnosis.share_of("host")
        return a, b

    predicted_and_measured(ip, capsys, attempt, FUSED_FACTOR)


def test_a_tiny_cell_has_no_verdict_but_a_gain(ip: Any, logdir: Path, torch_ready: None) -> None:
    s = profiled(ip, logdir, "tiny", "ran = 1\n")
    assert s.diagnosis.verdict == "unknown" and not said(s).headline
    assert s.diagnosis.gain is not None and s.diagnosis.gain.step_s > 0


READ_SETUP = """
import numpy as np, jax, jax.numpy as jnp
hb = np.full((448, 448), 0.001, np.float32)
Wr = [jnp.ones((384, 384)) / 384 for _ in range(4)]
xr = [jnp.ones((256, 384)) * k for k in range(4)]
@jax.jit
def mid(Ws, x):
    for W in Ws:
        x = jnp.tanh(x @ W)
    return jnp.mean(x)
"""


def test_a_read_back_on_the_cpu_is_named_with_an_accelerators_estimate(
    ip: Any, logdir: Path
) -> None:
    """On the CPU the device's work and the host's share the cores, so the overlap a loop
    without its reads would get is an accelerator's: said so, never promised for the CPU
    (a torch_xla loop here ran slower without its ``.item()``)."""
    assert ip.run_cell(READ_SETUP).success
    # NumPy on the host then the jitted step: with its read each step the two take turns;
    # without it they would overlap, on an accelerator.
    body = "for i in range(60):\n    h = np.tanh(hb @ hb)\n    l = float(mid(Wr, xr[i % 4]))\n"
    s = profiled(ip, logdir, "cpu-reads", body, wait="jax.block_until_ready(Wr)")
    d = worded(s)
    assert s.device is not None and s.device.on_cpu
    r = s.diagnosis.read_back
    assert r is not None and r.shared and r.line == 4, d.headline
    assert "; on an accelerator, without the reads those steps would take about" in d.headline
    assert "but here the device is this machine's CPU" in d.headline, d.headline


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called")
def test_a_loop_fed_by_mpdeviceloader_is_never_told_to_load_through_it(
    ip: Any, logdir: Path, torch_ready: None
) -> None:
    """MpDeviceLoader copies ahead, the guide's idiom; when its DataLoader (no workers, a slow
    ``__getitem__``) cannot keep up, the loop still waits for its batches: cause ``device
    loader``, whose fix is the DataLoader's workers, never "load through MpDeviceLoader"."""
    assert ip.run_cell(
        "import torch_xla.distributed.parallel_loader as pl\n"
        "fed = pl.MpDeviceLoader(torch.utils.data.DataLoader(SlowItems(), batch_size=4), dev)"
    ).success
    body = "for x in fed:\n    loss = block(table[x]).sum()\n    torch_xla.sync()\n"
    s = profiled(ip, logdir, "fed", body)
    d = worded(s)
    assert (d.verdict, d.cause) == ("input", "device loader"), d.headline
    assert "load through MpDeviceLoader" not in d.fix and "num_workers" in d.fix, d.fix
    assert "already reads through MpDeviceLoader" in d.headline


def test_a_loader_tokenizing_on_the_loops_thread_takes_the_fix_this_machines_cores_allow(
    ip: Any, logdir: Path, torch_ready: None
) -> None:
    """A DataLoader without workers whose collate_fn tokenizes each batch on the loop's thread.

    On a machine of at most 2 cores the workers would share them with the step (two of them
    slowed such a loop here: ``bench device-truth``, kind ``xla_loader``): cause ``few cores``,
    whose fix makes the batches once, or cheaper. With more cores, the DataLoader's workers."""
    assert ip.run_cell(
        "vocab = {f'w{k}': k for k in range(2000)}\n"
        "texts = [' '.join(f'w{(7 * i + 13 * j) % 2000}' for j in range(48)) "
        "for i in range(1536 * 6)]\n"
        "def tokenize(batch):\n"
        "    rows = [[vocab.get(w, 0) % 100 for w in t.lower().split()][:64] for t in batch]\n"
        "    return torch.tensor([r + [0] * (64 - len(r)) for r in rows])\n"
        "tokenized = torch.utils.data.DataLoader(texts, batch_size=1536, collate_fn=tokenize)"
    ).success
    body = (
        "for ids in tokenized:\n"
        "    loss = block(table[ids[:4].to(dev)]).sum()\n"
        "    torch_xla.sync()\n"
    )
    s = profiled(ip, logdir, "tokenized", body)
    d = worded(s)
    assert d.verdict == "input", d.headline
    if usable_cpus() <= FEW_CORES:
        assert d.cause == "few cores", d.headline
        assert "workers would share this machine's" in d.headline, d.headline
        assert d.fix.startswith("Make the batches cheaper") and "num_workers" in d.fix, d.fix
    else:
        assert d.cause == "" and "num_workers > 0" in d.fix, d.headline
    # The same tokenizer in two workers: the loop waits on them, and they compute meanwhile.
    assert ip.run_cell(
        "texts = texts * 2\n"
        "working = torch.utils.data.DataLoader(texts, batch_size=1536, collate_fn=tokenize, "
        "num_workers=2, persistent_workers=True)"
    ).success
    s = profiled(ip, logdir, "working", body.replace("in tokenized", "in working"))
    d = worded(s)
    assert d.verdict == "input", d.headline
    if usable_cpus() <= FEW_CORES:
        assert d.cause == "busy workers", (d.headline, s.diagnosis.breakdown.cell)
        assert "The loader's workers keep the cores busy already" in d.headline, d.headline
        assert d.fix.startswith("Make the batches cheaper rather than by more workers"), d.fix
    else:
        assert d.cause == "" and "more of them" in d.fix, d.headline


def test_slow_steps_that_hold_most_of_the_loop_are_its_cost_not_exceptions() -> None:
    """Two steps of a loader's bursts (each 8 steps' batches) hold most of the steps' time:
    they stay in the verdict. One slow step (a fresh program's first run) is left out however
    long, and so are two that hold little."""
    from xprof_magic._analysis.diagnosis.steady import unlike

    def apart(durations: list[float]) -> list[int]:
        parts = _steps(*({"input": d * 0.9, "device": d * 0.1} for d in durations), n=1)
        return [a.step for a in unlike(parts, 0, ())]

    bursts = [0.48] + [0.004] * 7 + [0.47] + [0.004] * 7
    assert apart(bursts) == []
    assert apart([0.48] + [0.004] * 15) == [0]
    assert apart([0.02] + [0.004] * 7 + [0.02] + [0.004] * 7) == [0, 8]
