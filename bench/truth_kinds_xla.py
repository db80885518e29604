"""The torch_xla kinds of :mod:`bench.device_truth` (``--backend torch_xla``, on
``$PJRT_DEVICE``): an MLP's training with ``torch_xla.sync()`` each step, and the same with
``loss.item()`` each step. Their cells time the graph building and the calls that wait for the
device apart; the truth follows those figures.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.truth_kinds import (
    NO_ALARM,
    READ_BACK_COSTS,
    READ_BACK_NAMED,
    Check,
    Kind,
    Truth,
    at_line,
)

__all__ = ["XLA_KINDS"]


_XLA_SETUP = """\
import time, torch, torch_xla
import torch_xla.core.xla_model as xm

dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
    torch.nn.Linear(WIDTH, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
xs = [torch.randn(BATCH, 512, device=dev) for _ in range(4)]
ys = [torch.randint(0, 10, (BATCH,), device=dev) for _ in range(4)]
for i in range(3):  # the step's graph compiled, as after a first run of the loop
    loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    opt.zero_grad(); loss.backward(); opt.step()
    torch_xla.sync()
loss.item()
"""

_XLA_TRAIN_CELL = """\
trace = synced = 0.0
t = time.perf_counter()
for i in range(STEPS):
    h = time.perf_counter()
    loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    opt.zero_grad()
    loss.backward()
    opt.step()
    s = time.perf_counter()
    torch_xla.sync()
    trace += s - h; synced += time.perf_counter() - s
xm.wait_device_ops()
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s, of it trace={trace:.3f} s building the graph "
      f"and sync={synced:.3f} s in torch_xla.sync()")
"""


def _split(oracle: Mapping[str, float], device: float) -> tuple[tuple[str, ...], str]:
    """What bounds a torch_xla loop by the oracle: the graph building on the host (``trace``)
    against ``device``, the seconds of the calls that wait for the step's program
    (``torch_xla.sync()``, ``.item()``)."""
    host = oracle.get("trace", 0.0)
    if device >= 2 * host:
        return (
            "device",
        ), f"device: the execution ({device:.3f} s) ≥ 2× the tracing ({host:.3f} s)"
    if host >= 2 * device:
        return ("host",), f"host: the tracing ({host:.3f} s) ≥ 2× the execution ({device:.3f} s)"
    return ("device", "host"), f"mixed: tracing {host:.3f} s, execution {device:.3f} s"


def _xla_train_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    verdicts, text = _split(oracle, oracle.get("sync", 0.0))
    return Truth(
        verdicts,
        f"{text}: the time in torch_xla.sync() is the wait for the device (the step's program "
        "starts once the last one is done with the parameters)",
        (NO_ALARM,) if verdicts == ("device",) else (),
    )


XLA_TRAIN = Kind(
    "xla_train",
    "torch_xla: an MLP (512→WIDTH→WIDTH→10) trained with SGD, torch_xla.sync() each step",
    _XLA_SETUP,
    _XLA_TRAIN_CELL,
    _xla_train_truth,
    {
        "cpu": {"WIDTH": 1024, "BATCH": 256, "STEPS": 20},
        "accelerator": {"WIDTH": 8192, "BATCH": 4096, "STEPS": 40},
    },
    backend="torch_xla",
)

_XLA_ITEM_CELL = """\
losses = []
trace = synced = read = 0.0
t = time.perf_counter()
for i in range(STEPS):
    h = time.perf_counter()
    loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    opt.zero_grad()
    loss.backward()
    opt.step()
    s = time.perf_counter()
    torch_xla.sync()
    r = time.perf_counter()
    losses.append(loss.item())
    trace += s - h; synced += r - s; read += time.perf_counter() - r
loop = time.perf_counter() - t
print(f"oracle: {STEPS} steps loop={loop:.3f} s, of it trace={trace:.3f} s building the graph, "
      f"sync={synced:.3f} s in torch_xla.sync() and read={read:.3f} s in .item()")
"""

_XLA_ITEM_COMPARE = """\
t = time.perf_counter()
for i in range(STEPS):
    loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
unread = time.perf_counter() - t
print(f"oracle: the same steps without .item() unread={unread:.3f} s")
"""


def _xla_item_truth(platform: str, oracle: Mapping[str, float]) -> Truth:
    loop, unread = oracle.get("loop", 0.0), oracle.get("unread", 0.0)
    ratio = loop / unread if unread else 0.0
    verdicts, text = _split(oracle, oracle.get("sync", 0.0) + oracle.get("read", 0.0))
    checks: list[Check] = []
    if ratio >= READ_BACK_COSTS:
        verdicts = tuple(dict.fromkeys(("sync", *verdicts)))
        checks += [READ_BACK_NAMED, at_line(_XLA_ITEM_CELL, "loss.item()")]
        text += (
            f"; the loop with .item() takes {ratio:.2f}× the loop without: the read-back "
            "named, or sync-bound"
        )
    else:
        text += (
            f"; .item() costs little here (the loop with it takes {ratio:.2f}× the loop "
            "without); where it costs, the read-back named, or sync-bound"
        )
    return Truth(verdicts, text, tuple(checks))


XLA_ITEM = Kind(
    "xla_item",
    "torch_xla: the same MLP's training, torch_xla.sync() and loss.item() each step",
    _XLA_SETUP,
    _XLA_ITEM_CELL,
    _xla_item_truth,
    {
        "cpu": {"WIDTH": 256, "BATCH": 256, "STEPS": 30},
        "accelerator": {"WIDTH": 1024, "BATCH": 1024, "STEPS": 60},
    },
    _XLA_ITEM_COMPARE,
    backend="torch_xla",
    fixed=_XLA_ITEM_CELL.replace(
        "    losses.append(loss.item())", "    if i % 50 == 49:\n        losses.append(loss.item())"
    ).replace(
        "loop = time.perf_counter() - t", "xm.wait_device_ops()\nloop = time.perf_counter() - t"
    ),
)


XLA_KINDS = (XLA_TRAIN, XLA_ITEM)
