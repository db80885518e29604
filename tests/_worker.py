"""A worker process for on-demand capture tests: a torch_xla loop with labels, and a server.

``python tests/_worker.py PORT LABEL [SLEEP_MS]``: starts torch_xla's profiler server on
``PORT`` (all interfaces, as torch_xla does), prints ``ready`` once it listens, then trains a
tiny model forever with each step inside a ``TraceMe`` named ``LABEL`` (which also waits
``SLEEP_MS`` per step, to make a slow host), until killed.
"""

from __future__ import annotations

import sys
import time

import torch
import torch_xla
import torch_xla.debug.profiler as xp
from torch_xla import _XLAC


def main() -> None:
    port, label = int(sys.argv[1]), sys.argv[2]
    sleep_s = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
    server = xp.start_server(port, only_on_master=False)
    device = torch_xla.device()
    weight = torch.randn(64, 64, device=device, requires_grad=True)
    data = torch.randn(32, 64, device=device)
    step = 0
    while True:
        with _XLAC.profiler.TraceMe(label):
            loss = (data @ weight).relu().sum()
            loss.backward()
            with torch.no_grad():
                weight -= 0.001 * weight.grad
                weight.grad = None
            torch_xla.sync()
            time.sleep(sleep_s)
        if step == 0:
            print("ready", flush=True)
        step += 1
    del server


if __name__ == "__main__":
    main()
