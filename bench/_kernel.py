"""A real ipykernel driven through jupyter_client, for benchmarks."""

from __future__ import annotations

import os
import time
from typing import Any

from jupyter_client.manager import KernelManager


class BenchKernel:
    """Runs cells in a real kernel; ``run`` returns the reply, the outputs and the wall time
    from the request to the kernel going idle."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env={**os.environ, **(env or {})})
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 600) -> tuple[dict[str, Any], list[Any], float]:
        started = time.perf_counter()
        msg_id = self.client.execute(code)
        outputs: list[Any] = []
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind in ("stream", "execute_result", "error", "display_data"):
                outputs.append(content)
        elapsed = time.perf_counter() - started
        reply = self.client.get_shell_msg(timeout=timeout)["content"]
        if reply["status"] != "ok":
            raise RuntimeError(f"cell failed: {reply.get('ename')}: {reply.get('evalue')}\n{code}")
        return reply, outputs, elapsed

    def value(self, expression: str) -> Any:
        """Evaluate an expression in the kernel and return its repr, parsed as a literal."""
        import ast

        _, outputs, _ = self.run(expression)
        for out in outputs:
            if "data" in out and "text/plain" in out["data"]:
                return ast.literal_eval(out["data"]["text/plain"])
        raise RuntimeError(f"no value for {expression!r}")

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
