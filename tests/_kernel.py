"""A real ipykernel driven through jupyter_client: the one helper of the tests and the bench.

``run`` returns what the user would see (outputs with their message type) and the reply;
``timed`` also measures the wall time from the request to the kernel going idle and fails
loudly when the cell did, as a benchmark needs.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from jupyter_client.manager import KernelManager

__all__ = ["Kernel", "free_port", "plain", "text", "with_server"]


def plain(shown: str) -> str:
    """Terminal output without its colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", shown)


def text(outputs: list[dict[str, Any]]) -> str:
    """What the user reads of a cell's outputs: streams, tracebacks, text/plain."""
    parts = []
    for out in outputs:
        if out["type"] == "stream":
            parts.append(out["text"])
        elif out["type"] == "error":
            parts.append(plain("\n".join(out["traceback"])))
        else:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def with_server() -> dict[str, str]:
    """This environment, with the profiler server allowed (the tests turn it off elsewhere)."""
    return {k: v for k, v in os.environ.items() if k != "XPROF_MAGIC_NO_SERVER"}


class Kernel:
    """A real kernel and a way to run a cell in it and collect what the user would see."""

    def __init__(self, env: Mapping[str, str] | None = None, extra: Mapping[str, str] = {}) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env={**(os.environ if env is None else env), **extra})
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self._stacks = _stacks_file()
        self._ask_for_stacks()

    def _ask_for_stacks(self) -> None:
        """Have the kernel write its threads' stacks to a file on SIGUSR1 (``faulthandler``,
        in C: it answers while the main thread is stuck in native code), silently, binding no
        name in the user's namespace: a cell that hangs then says where (:meth:`stacks`)."""
        code = (
            "__import__('faulthandler').register(__import__('signal').SIGUSR1, "
            f"file=open({self._stacks!r}, 'w'), all_threads=True)"
        )
        msg_id = self.client.execute(code, silent=True, store_history=False)
        while self.client.get_shell_msg(timeout=120)["parent_header"].get("msg_id") != msg_id:
            pass

    def stacks(self, timeout: float = 10.0) -> str:
        """The kernel's threads' Python stacks now (for a cell that timed out), or a line."""
        from tests._wait import wait_until

        try:
            os.kill(self.manager.provisioner.pid, signal.SIGUSR1)  # type: ignore[union-attr]
        except (AttributeError, OSError, TypeError) as error:
            return f"(the kernel could not be asked: {error!r})"
        last = [""]

        def settled() -> str:
            with open(self._stacks, encoding="utf-8", errors="replace") as written:
                found = written.read()
            done = found if found and found == last[0] else ""
            last[0] = found
            return done

        try:
            return str(wait_until(settled, timeout, "the kernel's stacks"))
        except AssertionError:
            return f"(the kernel wrote no stacks in {timeout:g} s)"

    def run(
        self, code: str, timeout: float = 120, interrupt_after: float | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Run ``code``; the execute reply's content and the outputs, in order.

        After a cell fails, ipykernel aborts the execute requests that reach it before its
        own "stop aborting" callback runs (``_abort_queues``: ``call_later(0, ...)``, queued
        behind any request already received). On a busy machine the next request can win that
        race; the kernel then answers "aborted" without running it, so it is sent again, as a
        person would run the cell again.
        """
        for _ in range(5):
            content, outputs = self._run_once(code, timeout, interrupt_after)
            if content["status"] != "aborted":
                break
        return content, outputs

    def _run_once(
        self, code: str, timeout: float, interrupt_after: float | None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        msg_id = self.client.execute(code)
        outputs: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        interrupt_at = time.monotonic() + interrupt_after if interrupt_after else None
        while True:
            if interrupt_at is not None and time.monotonic() > interrupt_at:
                self.manager.interrupt_kernel()
                interrupt_at = None
            try:
                msg = self.client.get_iopub_msg(timeout=0.2)
            except Exception:
                if time.monotonic() > deadline:
                    threads = self.stacks()
                    raise TimeoutError(f"{code}\n--- the kernel's threads:\n{threads}") from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind in ("stream", "execute_result", "error", "display_data"):
                outputs.append({"type": kind, **content})
        # The shell channel may still hold replies to other requests: wait_for_ready sends
        # kernel_info requests until one is answered, so a slow start leaves extra replies.
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"], outputs

    def timed(
        self, code: str, timeout: float = 600
    ) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
        """Run ``code`` that must succeed; also the seconds until the kernel was idle again."""
        started = time.perf_counter()
        reply, outputs = self.run(code, timeout=timeout)
        elapsed = time.perf_counter() - started
        if reply["status"] != "ok":
            raise RuntimeError(f"cell failed: {reply.get('ename')}: {reply.get('evalue')}\n{code}")
        return reply, outputs, elapsed

    def value(self, expression: str) -> Any:
        """Evaluate an expression in the kernel and return its repr, parsed as a literal."""
        _, outputs, _ = self.timed(expression)
        for out in outputs:
            if "data" in out and "text/plain" in out["data"]:
                return ast.literal_eval(out["data"]["text/plain"])
        raise RuntimeError(f"no value for {expression!r}")

    def ok(self, code: str, timeout: float = 240) -> str:
        """Run ``code`` that must succeed; what the user reads of its outputs."""
        content, outputs = self.run(code, timeout=timeout)
        shown = text(outputs)
        assert content["status"] == "ok", shown
        return shown

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        os.unlink(self._stacks)


def _stacks_file() -> str:
    handle, path = tempfile.mkstemp(prefix="xprof-kernel-stacks-", suffix=".txt")
    os.close(handle)
    return path
