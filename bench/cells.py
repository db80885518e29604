"""The bench's training cells: the setup, the loop, and the same loop profiled by hand with
torch_xla's own API; the overhead, stop and memory-sampling benches run them."""

from __future__ import annotations

__all__ = ["MANUAL", "SETUP", "TRAIN"]

SETUP = """
import time, torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
xs = [torch.randn(256, 512, device=dev) for _ in range(4)]
ys = [torch.randint(0, 10, (256,), device=dev) for _ in range(4)]
torch_xla.sync()
"""

TRAIN = """
for i in range(STEPS):
    # xprof: forward
    loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    # xprof: backward
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""

MANUAL = """
xp.start_trace(MANUAL_DIR)
for i in range(STEPS):
    with xp.Trace("forward"):
        loss = loss_fn(model(xs[i % 4]), ys[i % 4])
    with xp.Trace("backward"):
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch_xla.sync()
xm.wait_device_ops()
xp.stop_trace()
"""
