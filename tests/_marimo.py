"""Helpers for the marimo tiers: a notebook file from cells, a ``marimo run`` app on a
loopback port with a fixed token, or behind JupyterLab's jupyter-server-proxy (as on
JupyterHub), and the frames of a run's view in its page.

Everything the servers and the kernel write (marimo's state, the viewers' info files, the
captures) goes under one temporary folder, as for JupyterLab (:mod:`tests._browser`).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._kernel import free_port
from tests._notebook_servers import TOKEN as LAB_TOKEN
from tests._notebook_servers import JupyterLab, start_jupyterlab
from tests._wait import wait_until

__all__ = [
    "MARIMO",
    "PROXIED",
    "TOKEN",
    "MarimoServer",
    "start_marimo",
    "start_marimo_behind_jupyterlab",
    "view_frames",
    "write_marimo_notebook",
]

TOKEN = "xprof-magic-marimo-test"
MARIMO = str(Path(sys.executable).with_name("marimo"))


def write_marimo_notebook(path: Path, cells: Sequence[str]) -> None:
    """A marimo notebook of ``cells``. marimo reads each cell's names from its code, so the
    cell functions need no parameters or returns of their own."""
    parts = ["import marimo\n\napp = marimo.App(width='full')\n"]
    for code in cells:
        body = textwrap.indent(code.strip("\n") + "\nreturn", "    ")
        parts.append(f"\n@app.cell\ndef _():\n{body}\n")
    parts.append('\n\nif __name__ == "__main__":\n    app.run()\n')
    path.write_text("\n".join(parts))


@dataclass
class MarimoServer:
    """``marimo run NOTEBOOK`` on a loopback port, authenticated by :data:`TOKEN`."""

    process: subprocess.Popen[bytes]
    port: int
    home: Path
    env: dict[str, str]
    log_path: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/?access_token={TOKEN}"

    def answers(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2.0)
        try:
            connection.request("GET", "/health")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """The server and its kernel (one process group), politely first."""
        if self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def start_marimo(
    notebook: Path, home: Path, env: Mapping[str, str], timeout: float = 120.0
) -> MarimoServer:
    """``marimo run`` serving ``notebook`` on a free loopback port, its state in ``home``."""
    port = free_port()
    log_path = home / "marimo.log"
    command = [
        MARIMO,
        "run",
        str(notebook),
        "--headless",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--token-password",
        TOKEN,
        "--no-sandbox",
        "--no-skew-protection",
    ]
    full_env = {**env, "HOME": str(home / "home"), "XDG_CONFIG_HOME": str(home / "config")}
    (home / "home").mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=notebook.parent,
            env=full_env,
            start_new_session=True,
        )
    server = MarimoServer(process, port, home, full_env, log_path)
    with contextlib.suppress(AssertionError):  # a timeout: said below, with the server's log
        wait_until(lambda: process.poll() is not None or server.answers(), timeout, "marimo")
    if not server.answers():
        server.stop()
        raise RuntimeError(f"marimo did not start; its log:\n{server.log_tail()}")
    return server


PROXIED = "marimo"
"""The path JupyterLab serves the marimo app under (jupyter-server-proxy's ``servers``)."""


def start_marimo_behind_jupyterlab(
    notebook: Path, home: Path, env: Mapping[str, str]
) -> tuple[JupyterLab, str, str]:
    """JupyterLab on a free loopback port, serving ``marimo run notebook`` at ``/marimo/``
    through jupyter-server-proxy, which also serves the viewer's port at ``/proxy/<port>/``:
    one origin, as on JupyterHub. Returns the server, the URL that logs the browser in, and
    the app's URL. ``notebook`` must not be under ``home/notebooks``."""
    command = [MARIMO, "run", str(notebook), "--headless", "--host", "127.0.0.1"]
    command += ["--port", "{port}", "--base-url", "{base_url}" + PROXIED, "--no-token"]
    command += ["--no-sandbox", "--no-skew-protection"]
    servers = {PROXIED: {"command": command, "absolute_url": True, "timeout": 120}}
    # start_jupyterlab writes the server's JSON config; Jupyter also reads a Python one.
    config = home / "config" / "jupyter_server_config.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"c.ServerProxy.servers = {servers!r}\n")
    lab = start_jupyterlab(home, base_env=env)
    return lab, f"{lab.origin}/lab?token={LAB_TOKEN}", f"{lab.origin}/{PROXIED}/"


def view_frames(page: Any, index: int) -> tuple[Any, Any]:
    """The ``index``-th run view in ``page`` and a locator of its XProf page's frame (the
    inner frame of its wrapper); locators resolve again on each use, so a frame that loads a
    new page is found as it is now."""
    view = page.locator(".xprof-view").nth(index)
    inner = view.frame_locator("iframe.xprof-outer").frame_locator("iframe.xprof-inner")
    return view, inner
