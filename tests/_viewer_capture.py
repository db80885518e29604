"""Make real torch_xla captures for the viewer tests: ``python _viewer_capture.py OUT NAME...``.

Each NAME becomes ``OUT/<NAME>/<host>.xplane.pb`` (+ ``.trace.json.gz``): one small XLA step
inside a ``TraceMe("my_label")``. Run in a subprocess so that the test process never imports
torch_xla (about 10 s, and a second copy of XLA's threads).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["LABEL", "main"]

LABEL = "my_label"


def main(out: Path, names: list[str]) -> None:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.profiler as xp

    device = torch_xla.device()
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        scratch = Path(tempfile.mkdtemp(dir=out))
        xp.start_trace(str(scratch))
        with torch_xla._XLAC.profiler.TraceMe(LABEL):  # type: ignore[attr-defined]
            a = torch.ones(64, 64, device=device)
            (a @ a).sum()
            torch_xla.sync()
        xm.wait_device_ops()
        xp.stop_trace()
        (session,) = (scratch / "plugins" / "profile").iterdir()
        os.rename(session, out / name)
        for leftover in sorted(scratch.rglob("*"), reverse=True):
            leftover.rmdir()
        scratch.rmdir()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
