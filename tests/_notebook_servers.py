"""A real JupyterLab, Notebook 7 or classic Notebook 6 for the browser tests, each in a home of
its own.

Everything a server and its kernels write (runtime files, settings, workspaces, IPython's
history, the viewers' info files, the captures) goes under one temporary folder, so that a
run leaves nothing behind but its artifacts.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._kernel import free_port
from tests._wait import wait_until

__all__ = [
    "PROXY_KERNEL",
    "TOKEN",
    "JupyterLab",
    "isolated",
    "leftover_processes",
    "machine_environment",
    "shut_down",
    "start_classic_notebook",
    "start_jupyterlab",
    "stop_viewers",
]

TOKEN = "xprof-magic-browser-test"


PROXY_KERNEL = "python3-proxy"


_LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


_SERVER_CONFIG = {
    "LabApp": {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
    },
}


@dataclass
class JupyterLab:
    """A JupyterLab server on a loopback port, with the test's token."""

    process: subprocess.Popen[bytes]
    port: int
    home: Path
    root: Path
    env: dict[str, str]
    log_path: Path
    base_url: str = "/"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def notebook_url(self, name: str, workspace: str) -> str:
        """A notebook in a workspace of its own, so that no other tab is restored with it."""
        return f"{self.origin}{self.base_url}lab/workspaces/{workspace}/tree/{name}?token={TOKEN}"

    def request(self, method: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        """``method`` on an absolute ``path`` of the server, with the token."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, headers={"Authorization": f"token {TOKEN}"})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, body

    def api(self, method: str, route: str, timeout: float = 10.0) -> Any:
        """A REST call below the base URL (``route`` like ``/api/sessions``), as JSON."""
        path = self.base_url.rstrip("/") + route
        status, body = self.request(method, path, timeout)
        if status >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {status} {body[:200]!r}")
        return json.loads(body) if body else None

    def answers(self) -> bool:
        try:
            return bool(self.api("GET", "/api/status", timeout=2.0))
        except (OSError, RuntimeError, ValueError, http.client.HTTPException):
            return False

    def shutdown_kernels(self) -> None:
        """End every session (which shuts its kernel down), then any kernel left."""
        for session in self.api("GET", "/api/sessions"):
            with contextlib.suppress(RuntimeError):
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=30.0)
        for kernel in self.api("GET", "/api/kernels"):
            with contextlib.suppress(RuntimeError):
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30.0)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kernels first (through the API, as a user would), then the server itself."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError, ValueError, http.client.HTTPException):
                self.shutdown_kernels()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def _write_json(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def _proxy_kernelspec(share: Path, python: str) -> None:
    """A kernel whose environment routes the viewer through jupyter-server-proxy.

    One JupyterLab serves both scenarios, and kernels inherit the server's environment, so
    the proxy setting comes from the kernelspec's ``env``: the kernel sees exactly what it
    would under a server started with the variable set (as binder/start does).
    """
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (XProf through the proxy)",
        "language": "python",
        "env": {"XPROF_MAGIC_PROXY_URL": "/proxy/%PORT%/"},
    }
    _write_json(share / "kernels" / PROXY_KERNEL / "kernel.json", spec)


def isolated(home: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with every folder that Jupyter, IPython, Matplotlib and the viewer write to
    moved under ``home``, captures in ``home/logs``, and no torch_xla profiler server (it
    binds a fixed port on all interfaces)."""
    (home / "home").mkdir(parents=True, exist_ok=True)
    return {
        **base,
        "XPROF_MAGIC_NO_SERVER": "1",
        "XPROF_MAGIC_VIEWER_DIR": str(home / "viewers"),
        "XPROF_MAGIC_LOGDIR": str(home / "logs"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_PATH": str(home / "share"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "HOME": str(home / "home"),
        "IPYTHONDIR": str(home / "ipython"),
        "MPLCONFIGDIR": str(home / "matplotlib"),
    }


def machine_environment() -> dict[str, str]:
    """This machine's environment, on the CPU, without any proxy setting of its own."""
    env = {**os.environ, "PJRT_DEVICE": "CPU", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name in ("XPROF_MAGIC_PROXY_URL", "TENSORBOARD_PROXY_URL", "JUPYTERHUB_SERVICE_PREFIX"):
        env.pop(name, None)
    return env


def start_jupyterlab(
    home: Path,
    *,
    base_env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    launcher: Sequence[str] = (),
    base_url: str = "/",
    app: str = "jupyterlab",
    timeout: float = 120.0,
) -> JupyterLab:
    """JupyterLab on a free loopback port serving ``home/notebooks``, all its state in ``home``.

    ``python`` runs the server (and the proxy kernel), started through ``launcher`` (such as
    binder/start) in ``base_env`` (default: :func:`machine_environment`). ``app``: the
    module the server runs, ``jupyterlab`` or ``notebook`` (Notebook 7: JupyterLab's
    components, settings and server options, with its own pages).
    """
    root = home / "notebooks"
    root.mkdir(parents=True)
    env = isolated(home, machine_environment() if base_env is None else base_env)
    _write_json(Path(env["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json", _SERVER_CONFIG)
    for name, content in _LAB_SETTINGS.items():
        _write_json(Path(env["JUPYTERLAB_SETTINGS_DIR"]) / name, content)
    _proxy_kernelspec(Path(env["JUPYTER_PATH"]), python)
    port = free_port()
    log_path = home / f"{app}.log"
    command = [
        *launcher,
        python,
        "-m",
        app,
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.token={TOKEN}",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.base_url={base_url}",
    ]
    return _launch(
        command,
        root,
        env,
        log_path,
        lambda process: JupyterLab(process, port, home, root, env, log_path, base_url),
        timeout,
        "JupyterLab" if app == "jupyterlab" else "Notebook 7",
    )


def start_classic_notebook(
    home: Path,
    *,
    kernels: Mapping[str, Mapping[str, Any]] = {},
    python: str = sys.executable,
    timeout: float = 120.0,
) -> JupyterLab:
    """Classic Notebook (6.x, the ipywidgets 7 frontend closest to Colab's) on a free loopback
    port serving ``home/notebooks``, all its state in ``home``, with extra ``kernels``
    (kernelspecs by name). Its REST API is JupyterLab's, so the same handle serves."""
    root = home / "notebooks"
    root.mkdir(parents=True)
    env = isolated(home, machine_environment())
    for name, spec in kernels.items():
        _write_json(Path(env["JUPYTER_PATH"]) / "kernels" / name / "kernel.json", spec)
    port = free_port()
    log_path = home / "notebook.log"
    command = [
        python,
        "-m",
        "notebook",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--NotebookApp.port_retries=0",
        f"--NotebookApp.token={TOKEN}",
        f"--NotebookApp.notebook_dir={root}",
    ]
    return _launch(
        command,
        root,
        env,
        log_path,
        lambda process: JupyterLab(process, port, home, root, env, log_path),
        timeout,
        "Notebook",
    )


def _launch(
    command: list[str],
    root: Path,
    env: dict[str, str],
    log_path: Path,
    handle: Callable[[subprocess.Popen[bytes]], JupyterLab],
    timeout: float,
    what: str,
) -> JupyterLab:
    """Start a notebook server from ``command``, logging to ``log_path``, until it answers."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=env,
            start_new_session=True,
        )
    server = handle(process)
    with contextlib.suppress(AssertionError):  # a timeout: said below, with the server's log
        wait_until(lambda: process.poll() is not None or server.answers(), timeout, what)
    if not server.answers():
        server.stop()
        raise RuntimeError(f"{what} did not start; its log:\n{server.log_tail()}")
    return server


def shut_down(server: JupyterLab, home: Path) -> None:
    """Stop the server and the viewers its kernels started; fail if anything is left."""
    server.stop()
    stopped = stop_viewers(server.env)
    left = leftover_processes(home)
    for line in left:
        os.kill(int(line.split(":", 1)[0]), 9)
    assert not left, f"still running after teardown ({stopped}):\n" + "\n".join(left)


def stop_viewers(env: Mapping[str, str], python: str = sys.executable) -> str:
    """Stop every XProf viewer recorded in ``env``'s viewer folder (viewers outlive kernels)."""
    code = (
        "from xprof_magic import _viewer\n"
        "print([_viewer.stop_viewer(v) for v in _viewer.list_viewers()])"
    )
    done = subprocess.run(
        [python, "-c", code],
        env=dict(env),
        cwd=env.get("HOME"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


def leftover_processes(marker: Path) -> list[str]:
    """Live processes whose command line names ``marker`` (Linux): what teardown missed."""
    found = []
    needle = str(marker).encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[:1]
        except OSError:
            continue
        if needle in cmdline and state != ["Z"] and int(entry.name) != os.getpid():
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command}")
    return found
