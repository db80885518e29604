"""The host's time that is the user's own Python and NumPy, told from the framework's, and
the line inside the loop that holds it.

Real JAX and real torch_xla on the CPU: a jitted (or torch_xla) step fed by batches that a
NumPy ``augment(raw)`` makes inside the loop, or in a list before it, is "making batches in
your own Python and NumPy" at that line, with the data path's fix, never jit, scan or
compile advice; a loop of many tiny framework ops stays the framework's; a script's capture
started and stopped by hand names that line too. The last tests pin the sampler, the sorting
of looks and the words on their own.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._said import said, worded
from tests.conftest import names_of
from tests.test_idioms import diagnosed
from xprof_magic import summarize
from xprof_magic._analysis.diagnosis import own as _own
from xprof_magic._analysis.diagnosis.own import Sampled, feeds_the_step, moves_data, own_python
from xprof_magic._cell.sampler import SPARSE, STALLED, WEIGHT, LineSampler
from xprof_magic._runs import metadata as _metadata

JAX = """
import numpy as np
import jax, jax.numpy as jnp

@jax.jit
def train(W, x):
    for _ in range(3):
        W = jnp.tanh(W @ x) * 0.5 + W * 0.5
    return W

def augment(raw):
    out = raw
    for _ in range(200):
        out = np.tanh(out @ raw.T) * 0.5 + np.flip(out, 0) * 0.5
    return out.astype(np.float32)

W = jnp.full((128, 128), 0.01)
raw = np.full((128, 128), 0.001, np.float32)
"""

TORCH = """
import numpy as np
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(0)
own_model = torch.nn.Sequential(
    torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128)).to(dev)
own_opt = torch.optim.SGD(own_model.parameters(), lr=0.01)

def augment(raw):
    out = raw
    for _ in range(200):
        out = np.tanh(out @ raw.T) * 0.5 + np.flip(out, 0) * 0.5
    return out.astype(np.float32)

raw = np.full((128, 128), 0.001, np.float32)

def own_step(x):
    own_opt.zero_grad()
    loss = (own_model(x) ** 2).mean()
    loss.backward()
    own_opt.step()
    torch_xla.sync()
"""

IDLE_ON_THE_FRAMEWORK = (
    r", and while the host runs the framework's dispatch and graph building at line \d+ \(\d+%\)"
)
"""The second part of the idle time's words, where the step's own dispatch holds a fifth."""
NO_FRAMEWORK_FIX = ("jax.jit, lax.scan", "torch_xla.compile would not")


@pytest.fixture(scope="module")
def jax_own(ip: Any) -> Iterator[None]:
    with names_of(ip, JAX):
        yield


def making_batches(s: Any, statement: str, line: int, advice: str) -> None:
    """The verdict: the input pipeline, the host's own Python making batches at ``line``,
    the data path's fix; the breakdown (table and chart) holds that time as input."""
    d = worded(s)
    assert d.verdict == "input" and d.cause == "making batches", d.evidence
    assert d.where[-1] == statement and d.line == line, (d.where, d.line)
    assert d.headline.startswith("Input-bound"), d.headline
    assert "making batches in your own Python and NumPy" in d.headline
    assert f"(`{statement}`, line {line})" in d.headline
    assert f"while the host makes batches in your Python at line {line}" in d.headline
    basis = d.basis()
    made = basis.made(bool(basis.steps))
    assert made > 0.5 * basis.seconds("input", bool(basis.steps)), d.breakdown
    assert basis.share("input", bool(basis.steps)) >= 0.5
    assert "Without making those batches on the step's path" in d.headline
    # The framework's share of the device's idle time may be said second (the step's own
    # dispatch, a fifth of it or more on a busy machine); it is never blamed otherwise.
    second = re.sub(IDLE_ON_THE_FRAMEWORK, "", d.headline)
    assert "graph building" not in second and advice in d.fix
    assert "it is the input pipeline" in d.fix
    assert "background thread" in d.fix or "num_workers" in d.fix
    assert d.own is not None and d.own.of_host >= 0.5 and d.own.batches


def test_jax_numpy_augment_in_the_loop_is_making_batches_at_its_line(
    ip: Any, logdir: Path, jax_own: None
) -> None:
    body = (
        "for i in range(8):\n    x = augment(raw)\n    W = train(W, x)\njax.block_until_ready(W)\n"
    )
    s = diagnosed(ip, logdir, "jaugment", body, "--backend jax")
    making_batches(s, "x = augment(raw)", 3, NO_FRAMEWORK_FIX[0])
    assert "larger batch" in said(s).fix and "would not shorten it" in said(s).fix
    assert s.diagnosis.where[0] == "for i in range(8)"


def test_jax_batches_made_before_the_loop_are_making_batches(
    ip: Any, logdir: Path, jax_own: None
) -> None:
    body = (
        "batches = [augment(raw) for _ in range(8)]\n"
        "for x in batches:\n"
        "    W = train(W, x)\n"
        "jax.block_until_ready(W)\n"
    )
    s = diagnosed(ip, logdir, "jbefore", body, "--backend jax")
    making_batches(s, "batches = [augment(raw) for _ in range(8)]", 2, NO_FRAMEWORK_FIX[0])


def test_torch_xla_augment_in_the_loop_and_before_it_are_making_batches(
    ip: Any, logdir: Path
) -> None:
    assert ip.run_cell(TORCH).success
    body = "for i in range(8):\n    x = torch.from_numpy(augment(raw)).to(dev)\n    own_step(x)\n"
    s = diagnosed(ip, logdir, "xaugment", body)
    making_batches(s, "x = torch.from_numpy(augment(raw)).to(dev)", 3, NO_FRAMEWORK_FIX[1])
    body = (
        "batches = [torch.from_numpy(augment(raw)) for _ in range(8)]\n"
        "for b in batches:\n"
        "    own_step(b.to(dev))\n"
    )
    s = diagnosed(ip, logdir, "xbefore", body)
    making_batches(
        s, "batches = [torch.from_numpy(augment(raw)) for _ in range(8)]", 2, NO_FRAMEWORK_FIX[1]
    )


def test_torch_xla_tiny_ops_traced_from_the_cells_line_stay_the_frameworks(
    ip: Any, logdir: Path
) -> None:
    """``x = x * 1.0001`` runs no Python frame of torch's, yet traces an op each time: the
    ops counter says so, and the verdict keeps the framework's words and fix."""
    assert ip.run_cell(TORCH).success
    body = (
        "x = torch.ones(4, 4, device=dev)\n"
        "for i in range(8):\n"
        "    for j in range(600):\n"
        "        x = x * 1.0001\n"
        "    torch_xla.sync()\n"
    )
    s = diagnosed(ip, logdir, "xtiny", body)
    d = worded(s)
    assert d.verdict == "host" and d.cause not in ("own code", "making batches"), d
    assert d.own is None and "graph building" in d.headline
    assert d.framework is not None and d.framework.line == 5 and d.line == 5


HAND = (
    "import sys\nimport xprof_magic\n"
    + JAX
    + """
for i in range(2):  # compiled before the capture
    W = train(W, augment(raw))
cap = xprof_magic.capture(logdir=sys.argv[1], name="hand", steps=True, server=False)
cap.start()
for i in range(8):
    with xprof_magic.step():
        x = augment(raw)
        W = train(W, x)
jax.block_until_ready(W)
cap.stop()


def stop(capture):
    capture.stop()


elsewhere = xprof_magic.capture(logdir=sys.argv[1], name="elsewhere", server=False)
elsewhere.start()
W = train(W, augment(raw))
stop(elsewhere)
unread = xprof_magic.capture(logdir=sys.argv[1], name="unread", server=False)
exec(compile("unread.start()\\nW = train(W, augment(raw))\\nunread.stop()\\n", "<hand>", "exec"))
"""
)


def test_a_scripts_start_and_stop_by_hand_name_the_line_between_them(tmp_path: Path) -> None:
    """A script's ``cap.start()`` … ``cap.stop()``, in a process of its own: the code between
    them is the run's cell, at the script's lines, and the verdict names its statement that
    holds the time (making batches at ``x = augment(raw)``), as for a ``with`` block. Stopped
    in another function, or run from source that cannot be read, the run has no cell and no
    looks (never a wrong line), and its clock is the code's."""
    script = tmp_path / "train.py"
    script.write_text(HAND)
    logdir = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, str(script), str(logdir)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    source = HAND.splitlines()
    line = source.index("        x = augment(raw)") + 1
    meta = _metadata.read(logdir / "plugins" / "profile" / "hand")
    assert meta is not None and meta.cell_file == str(script)
    assert meta.first_line == source.index("cap.start()") + 1
    assert meta.cell is not None and meta.cell.splitlines()[-1] == "cap.stop()", meta.cell
    assert meta.wall_s is not None and 0 < meta.wall_s < 60
    s = summarize(logdir / "plugins" / "profile" / "hand")
    assert s.complete, s.missing
    making_batches(s, "x = augment(raw)", line, NO_FRAMEWORK_FIX[0])
    for name in ("elsewhere", "unread"):
        meta = _metadata.read(logdir / "plugins" / "profile" / name)
        assert meta is not None and meta.status == "ok", name
        assert meta.cell is None and meta.cell_file == "" and meta.lines == (), name
        assert meta.wall_s is not None and 0 < meta.wall_s < 60, (name, meta.wall_s)
        assert summarize(logdir / "plugins" / "profile" / name).diagnosis.line == 0, name


def _looks(
    cell: Path, frameworks: tuple[str, ...], ops: Any = None, fast: Any = None
) -> list[tuple[int, int, int, int]]:
    """Run a function defined in a file ``cell`` for 0.2 s on a thread, sampled."""
    source = (
        "def work():\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < 0.2:\n"
        "        pass\n"
        "\n"
        "work()\n"
    )
    return _sampled(source, cell, frameworks, ops=ops, fast=fast)


def _sampled(
    source: str,
    cell: Path,
    frameworks: tuple[str, ...],
    names: dict[str, Any] | None = None,
    **options: Any,
) -> list[tuple[int, int, int, int]]:
    """Run ``source``, compiled as the file ``cell``, on a thread of its own, sampled.

    ``names``: its globals (``time`` is added), which it leaves what it binds in.
    """
    code = compile(source, str(cell), "exec")
    glob = names if names is not None else {}
    glob["time"] = time
    ready = threading.Event()
    ident: list[int] = []

    def target() -> None:
        ident.append(threading.get_ident())
        ready.wait()
        exec(code, glob)

    worker = threading.Thread(target=target)
    worker.start()
    while not ident:
        time.sleep(0.001)
    sampler = LineSampler(ident[0], str(cell), frameworks, **options)
    sampler.start()
    ready.set()
    worker.join()
    return sampler.stop()


def test_the_sampler_names_the_cells_line_and_the_frameworks_frames(tmp_path: Path) -> None:
    """A thread running code compiled at a cell's file: the outermost frame of that file
    gives the line (the statement, not a line inside the function it calls); a frame in a
    framework's folder, or ops made since the last look, make the look the framework's."""
    cell = tmp_path / "cell.py"
    looks = _looks(cell, ())
    assert len(looks) >= 10
    lines = [line for _, line, _, _ in looks if line]
    assert lines and set(lines) == {6}, lines
    assert {fw for _, _, fw, _ in looks} == {0}
    assert {fw for _, _, fw, _ in _looks(cell, (str(tmp_path) + "/",))} == {1}
    made = iter(range(100_000))
    grows = _looks(cell, (), ops=lambda: next(made) // 3 * 5)
    # (STALLED, 4, marks a look before which a busy machine gave the thread no core.)
    assert {fw & ~STALLED for _, _, fw, _ in grows} == {0, 2}, "grew by 5 every third look"
    made = iter(range(100_000))
    one = _looks(cell, (), ops=lambda: next(made) // 3)
    assert {fw & ~STALLED for _, _, fw, _ in one} == {0}, "one op (a .to(dev)) is no tracing"


def test_in_a_loop_recorded_in_c_each_look_stands_for_several(tmp_path: Path) -> None:
    """While the step tracker records a loop's steps in C, the looks come SPARSE times less
    often and each says it stands for SPARSE looks; the analysis counts it that many times."""
    looks = _looks(tmp_path / "cell.py", (), fast=lambda: True)
    assert len(looks) >= 2
    assert looks[0][2] // WEIGHT == 0, "the first look follows a wait of the full rate"
    assert {flags // WEIGHT for _, _, flags, _ in looks[1:]} == {SPARSE}
    assert {line for _, line, _, _ in looks if line} == {6}
    assert {flags % WEIGHT for _, _, flags, _ in looks} == {0}


def test_pure_python_between_calls_that_release_the_lock_gets_its_share_of_looks(
    tmp_path: Path,
) -> None:
    """A loop whose step is a call that gives up the interpreter's lock (a jitted call, here
    a sleep) and then pure Python holding it (a print's formatting) for 92% of the step: a
    look waits for the lock, so at the default switch interval nearly every look landed on
    the call; the sampler's shorter interval, and its waits drawn at random (no locking onto
    a step as long as its interval), give the Python line most of them.

    On a busy machine the sleep takes longer than asked (its thread waits for a core), so
    the Python's share of the time is measured in the loop, and the looks must give it at
    least :data:`FAIR` of it (at the default switch interval they gave it nearly none)."""
    source = (
        "def spin(s):\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < s:\n"
        "        pass\n"
        "start = time.perf_counter()\n"
        "end, slept = start + 1.2, 0.0\n"
        "while time.perf_counter() < end:\n"
        "    t0 = time.perf_counter(); time.sleep(0.0001); slept += time.perf_counter() - t0\n"
        "    spin(0.0018)\n"
        "spun = 1 - slept / (time.perf_counter() - start)\n"
    )
    names: dict[str, Any] = {}
    sampled = _sampled(source, tmp_path / "cell.py", (), names)
    looks = [line for _, line, _, _ in sampled if line in (8, 9)]
    assert len(looks) >= 100
    share, spun = looks.count(9) / len(looks), names["spun"]
    assert spun > 0.2, f"the machine left the Python {spun:.0%} of the loop: nothing to test"
    assert share >= FAIR * spun, (looks.count(8), looks.count(9), spun)


FAIR = 0.55
"""The least part of the pure Python's share of a loop's time that the looks must give it."""


@pytest.mark.skipif(
    not hasattr(time, "pthread_getcpuclockid"), reason="no other thread's CPU clock here"
)
def test_a_look_after_which_the_thread_ran_no_cpu_says_so(tmp_path: Path) -> None:
    """A thread that waits (as one waiting for a core on a busy machine does) runs no CPU
    between looks: where the framework counts its ops and they did not grow, each look after
    the first says the pair tells nothing (STALLED); where they grew, it does not."""
    source = "time.sleep(0.3)\n"
    still = _sampled(source, tmp_path / "cell.py", (), ops=lambda: 0)
    assert len(still) >= 10
    assert all(flags & STALLED for _, _, flags, _ in still[1:]), still
    made = iter(range(0, 10**9, 5))
    growing = _sampled(source, tmp_path / "cell.py", (), ops=lambda: next(made))
    assert {flags for _, _, flags, _ in growing} == {2}, "ops made: the look says so, not stalled"
    assert {flags & STALLED for _, _, flags, _ in _sampled(source, tmp_path / "cell.py", ())} == {
        0
    }, "without an ops counter, no look is flagged"


def test_pairs_of_looks_between_which_the_thread_had_no_core_do_not_vote() -> None:
    """A line tracing ops, seen in 8 pairs of looks of one step: in 6 the machine gave the
    thread no core (no CPU ran, no ops made), in 2 ops were made. Counted as they came, it
    read as the user's own code (2 of 8 grew); the 6 stalled pairs count for neither."""
    line = np.full(9, 5)
    step = np.zeros(9, np.int64)
    grew = np.array([False, True, False, False, True, False, False, False, False])
    ran = np.array([True, True, False, False, True, False, False, False, False])
    assert _own._made_ops(line, grew, step, ran).all()
    assert not _own._made_ops(line, grew, step, np.ones(9, bool)).any()
    frame = np.ones(9, bool)
    assert _own._frames(line, frame, grew, ran).all(), "2 of the 2 looks that ran grew"
    assert not _own._frames(line, frame, grew, np.ones(9, bool)).any(), "2 of 9 < TRACING"
    assert _own.STALLED == STALLED and _own.WEIGHT == WEIGHT, "the sampler's flags"


def test_a_statement_feeds_the_step_when_a_later_call_or_loop_takes_its_name() -> None:
    cell = (
        "\n"
        "for i in range(8):\n"
        "    x = augment(raw)\n"
        "    W = train(W, x)\n"
        "    print(i)\n"
        "batches = [augment(raw) for _ in range(8)]\n"
        "for b in batches:\n"
        "    W = train(W, b)\n"
        "log = []\n"
    )
    assert feeds_the_step(cell, 3)
    assert feeds_the_step(cell, 6)
    assert not feeds_the_step(cell, 5), "a print feeds nothing"
    assert not feeds_the_step(cell, 9), "a name nothing takes"
    assert not feeds_the_step("for x in\n", 1), "a cell that does not parse"


def test_a_statement_that_only_moves_data_to_the_device_is_the_frameworks_copy() -> None:
    """The quickstart's ``inputs.to(device)`` line feeds the step, yet makes no batch: its
    looks are the framework's transfer, never "making batches in your own Python"."""
    cell = (
        "for inputs, targets in batches:\n"
        "    inputs, targets = inputs.to(device), targets.to(device)\n"
        "    x = torch.from_numpy(augment(raw)).to(dev)\n"
        "    batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}\n"
        "    x = jax.device_put(x)\n"
        "    d = {k: v for k, v in b.items()}\n"
        "    try:\n"
        "        y = y.to(dev)\n"
        "    finally:\n"
        "        loss = loss_fn(model(inputs), targets)\n"
    )
    assert feeds_the_step(cell, 2), "it does feed the step"
    moving = [n for n in range(1, 11) if moves_data(cell, n)]
    assert moving == [2, 4, 5, 8], moving
    assert not moves_data("x = (\n", 1), "a cell that does not parse"


def test_own_python_counts_the_host_looks_of_the_steps_it_is_given() -> None:
    """Ten looks in step 0 and ten in step 1: step 1's host time is the user's own at line
    3 (and the device idle), step 0's the framework's."""
    step = np.array([0] * 10 + [1] * 10)
    host = np.ones(20, bool)
    own = np.array([False] * 10 + [True] * 8 + [False] * 2)
    device = np.array([False] * 18 + [True] * 2)
    line = np.array([4] * 10 + [3] * 8 + [4] * 2)
    found = Sampled(step=step, host=host, own=own, device=device, line=line)
    cell = "\nfor i in range(8):\n    x = augment(raw)\n    W = train(W, x)\n"
    assert own_python(found, (0,), cell) is None, "the framework's"
    one = own_python(found, (1,), cell)
    assert one is not None and one.line == 3 and one.statement == "x = augment(raw)"
    assert one.of_host == 0.8 and one.idle == 0.8 and one.batches
    both = own_python(found, (), cell)
    assert both is None, "8 of 20 host looks are under half"
    assert own_python(None, (1,), cell) is None
