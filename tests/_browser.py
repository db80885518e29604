"""Helpers for the slow tiers (browser, Binder): a real JupyterLab, Chromium, XProf's fetches.

Everything a server and its kernels write (runtime files, settings, workspaces, IPython's
history, the viewers' info files, the captures) goes under one temporary folder, so that a
run leaves nothing behind but its artifacts.

:class:`NotebookPage` is the one way the browser tests drive a notebook, in JupyterLab or in
classic Notebook 6: open it, run its cells, wait for the kernel, and find a widget's XProf
page; the marimo tests watch their app's page through its base, :class:`BrowserPage`. The XProf
page is found through Playwright's frame tree, by the name the widget gives its iframe,
each time it is asked for, and every element through a locator: no test holds an element
handle, which a re-rendered output or a frame's next document would leave behind. Every
wait is for a condition; Playwright's ``wait_for_timeout`` appears only as the interval
between two looks at one (:func:`wait_until`).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import nbformat

from tests._kernel import free_port
from tests.conftest import ARTIFACTS
from xprof_magic._notebook.frame import frame_name

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "LAB",
    "NOTEBOOK6",
    "PROXY_KERNEL",
    "TOKEN",
    "BrowserPage",
    "DataFetch",
    "DataFetches",
    "JupyterLab",
    "NotebookPage",
    "ToolView",
    "check_every_tool",
    "find_chromium",
    "in_frame",
    "isolated",
    "leftover_processes",
    "machine_environment",
    "offline",
    "page_of",
    "run_of",
    "select_run",
    "shown_text",
    "shut_down",
    "start_classic_notebook",
    "start_jupyterlab",
    "stop_viewers",
    "tool_page",
    "wait_until",
    "write_notebook",
]

TOKEN = "xprof-magic-browser-test"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PROXY_KERNEL = "python3-proxy"
DATA_ROUTE = "/data/plugin/profile/data"

# JupyterLab's user settings: every cell stays in the DOM (no windowing), no news toasts.
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


LOOPBACK = ("http://127.0.0.1", "http://localhost", "ws://127.0.0.1", "ws://localhost")
_EXECUTION_STATE = re.compile(r'"execution_state":\s*"(\w+)"')
BACKDROP = ".mat-drawer-backdrop.mat-drawer-shown"
MENU_PLACED = (
    ".mat-drawer.mat-drawer-side, .mat-drawer.mat-drawer-over, .mat-drawer.mat-drawer-push"
)
FRAME_LOOK_MS = 10_000
"""The longest one look into an XProf frame's document may take (:func:`in_frame`)."""
V2_KEY = "use_trace_viewer_v2"
CHARTS_NOTE_CLASS = "xprof-charts-note"


def offline(context: Any) -> None:
    """Abort every request of ``context`` that leaves this machine (Google's chart library,
    fonts, graphviz): the tests see the firewalled case, deterministically, and never touch
    the internet."""
    context.route(lambda url: not url.startswith(LOOPBACK), lambda route: route.abort())


def find_chromium() -> str | None:
    """Debian's Chromium (Playwright's own download is not reachable here)."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


@contextlib.contextmanager
def launch_chromium(home: Path) -> Iterator[Any]:
    """Debian's Chromium, headless, through Playwright, with ``home`` as its HOME; closed
    when the block ends."""
    from tests.conftest import missing

    chromium = find_chromium()
    if chromium is None:
        missing("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, env={**os.environ, "HOME": str(home)}
        )
        try:
            yield launched
        finally:
            launched.close()


def select_run(widget: Any, run: str) -> None:
    """Choose ``run`` in the widget's runs dropdown (its labels carry a time too; ipywidgets
    7 and 8 both show each label with non-breaking spaces)."""
    dropdown = widget.locator(".xprof-runs select")
    labels: list[str] = dropdown.evaluate("s => Array.from(s.options).map(o => o.textContent)")
    chosen = [t for t in labels if t.replace("\xa0", " ").split(" ")[0] == run]
    assert chosen, f"run {run!r} is not in the runs dropdown: {labels}"
    dropdown.select_option(label=chosen[0])


def wait_until(
    check: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str],
    pause: Callable[[float], None] = time.sleep,
) -> Any:
    """Poll ``check`` until it returns something truthy; fail describing ``what`` after timeout.

    With Playwright's sync API, pass ``pause=lambda s: page.wait_for_timeout(s * 1000)``:
    events (responses, navigations) are only delivered while a Playwright call runs.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {detail}")
        pause(0.25)


def write_notebook(path: Path, cells: list[str], kernel: str = "python3") -> None:
    """A notebook of code cells with a kernelspec, so that JupyterLab asks no question."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": kernel,
        "display_name": f"Python 3 ({kernel})",
        "language": "python",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(notebook, str(path))


@dataclass(frozen=True)
class Frontend:
    """What differs between the notebook frontends the tests drive: the notebook's URL, how
    the page says it is ready, how Run All is asked for and when cells are done, where
    outputs and widgets sit."""

    name: str
    url: Callable[[JupyterLab, str, str], str]
    """The notebook's URL: ``(server, notebook file, workspace)``."""
    ready: str
    """A JavaScript predicate, true once the notebook and its kernel are connected."""
    run_all: Callable[[Any], None]
    prompts: Callable[[Any], list[Any]]
    """Each code cell's execution count (None, or JupyterLab's prompt text, until run)."""
    ran: Callable[[Any], bool]
    """Whether one entry of :attr:`prompts` says the cell ran."""
    outputs: str
    """The selector of one output."""
    widgets: str
    """The selector of the widgets' viewer boxes in the notebook."""


def _lab_run_all(page: Any) -> None:
    """Run → Run All Cells, past the kernel chooser if JupyterLab asks for a kernel."""
    chooser = page.get_by_role("button", name="Select", exact=True)
    if chooser.count() and chooser.first.is_visible():
        chooser.first.click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def _lab_prompts(page: Any) -> list[Any]:
    found: list[str] = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return [p.strip() for p in found]


LAB = Frontend(
    name="JupyterLab",
    url=lambda server, name, workspace: server.notebook_url(name, workspace),
    ready="() => document.querySelector('.jp-NotebookPanel .jp-CodeCell') !== null",
    run_all=_lab_run_all,
    prompts=_lab_prompts,
    ran=lambda prompt: bool(re.fullmatch(r"\[\d+\]:", str(prompt))),
    outputs=".jp-OutputArea-output",
    widgets=".jp-NotebookPanel .xprof-viewer",
)
NOTEBOOK6 = Frontend(
    name="Notebook 6",
    url=lambda server, name, _: f"{server.origin}/notebooks/{name}?token={TOKEN}",
    ready=(
        "() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
        " && Jupyter.notebook.kernel.is_connected()"
    ),
    run_all=lambda page: page.evaluate("() => Jupyter.notebook.execute_all_cells()"),
    prompts=lambda page: list(
        page.evaluate("() => Jupyter.notebook.get_cells().map(c => c.input_prompt_number ?? null)")
    ),
    ran=lambda prompt: isinstance(prompt, int),
    outputs=".output_area",
    widgets=".xprof-viewer",
)


def page_of(url: str) -> str:
    """The XProf page a URL opens: the last part of its path (``trace_viewer_index.html``,
    ``overview_page``, ``trace_viewer@``)."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def run_of(url: str) -> str:
    """The run a URL of XProf's shows: its ``run``, or its trace data URL's."""
    query = parse_qs(urlsplit(url).query)
    for data_url in query.get("trace_data_url", []):
        query = {**parse_qs(urlsplit(data_url).query), **query}
    return query.get("run", [""])[0]


def tool_page(tool: str) -> str:
    """The page the widget embeds for ``tool``: the trace viewer's is the bare timeline."""
    return "trace_viewer_index.html" if tool.startswith("trace_viewer") else tool


class BrowserPage:
    """One browser page a test watches: what its frames fetched from XProf's data route,
    where its own frame went, what it logged; the waits between looks at a condition, and
    its screenshots (``test-artifacts/<shots>-<name>.png``)."""

    def __init__(self, page: Any, shots: str = "browser") -> None:
        self.page = page
        self.shots = shots
        self.data = DataFetches()
        self.navigations: list[str] = []
        self.errors: list[str] = []
        self.console: list[str] = []
        page.on("response", self.data.on_response)
        page.on("framenavigated", self._navigated)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text} ({m.location})"))

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.navigations.append(frame.url)

    def pause(self, seconds: float) -> None:
        """Let Playwright deliver events (responses, navigations) for ``seconds``: only the
        interval between two looks at a condition (:func:`wait_until`)."""
        self.page.wait_for_timeout(seconds * 1000)

    def wait(self, check: Callable[[], Any], what: str | Callable[[], str], timeout: float) -> Any:
        return wait_until(check, timeout, what, self.pause)

    def screenshot(self, name: str, shot: Any = None) -> Path:
        """``shot`` (a locator), else the whole page, into test-artifacts/.

        A picture for a person, never an assertion: an element that the frontend replaces
        while it is taken (Colab's output frame, re-rendered through its display id) is
        looked up again, and a picture that still cannot be taken is left out, said on
        stdout, rather than failing the test."""
        from playwright.sync_api import Error

        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{self.shots}-{name}.png"
        for attempt in range(3):
            try:
                if shot is None:
                    self.page.screenshot(path=str(path), full_page=True)
                else:
                    shot.screenshot(path=str(path), timeout=30_000)
                return path
            except Error as error:
                failed = error
                self.pause(0.5 * (attempt + 1))
        print(f"screenshot {name} left out: {str(failed).splitlines()[0]}")
        return path

    def xprof_frame(self, owner: Any) -> Any:
        """The XProf page's frame that ``owner`` (a widget, or Colab's output box) holds,
        from Playwright's frame tree, or None while there is none: the frame named after the
        ``data-xprof-frame`` id that ``owner`` (or an element in it) carries."""
        frame_id = owner.evaluate(
            "e => (e.closest('[data-xprof-frame]') || e.querySelector('[data-xprof-frame]'))"
            "?.dataset.xprofFrame ?? null"
        )
        name = frame_name(frame_id) if frame_id else None
        found = [f for f in self.page.frames if f.name == name and not f.is_detached()]
        return found[-1] if found else None

    def wait_for_page(self, owner: Any, run: str, page: str, timeout: float) -> Any:
        """``owner``'s XProf frame once it shows ``page`` (:func:`page_of`) of ``run``."""

        def shown() -> Any:
            frame = self.xprof_frame(owner)
            ok = frame is not None and (page_of(frame.url), run_of(frame.url)) == (page, run)
            return frame if ok else None

        def state() -> str:
            frame = self.xprof_frame(owner)
            return f"{page} of {run} in the frame; it shows {frame.url if frame else None}"

        return self.wait(shown, state, timeout)

    def wait_for_data(
        self, frame: Any, run: str, tag: str, timeout: float, label: str | None = None
    ) -> Any:
        """Until ``frame``, looked at (:func:`look_at`), has fetched ``run``'s data for
        ``tag`` (with event ``label``)."""
        wanted = f"{tag} data of run {run!r}" + (f" with an event {label!r}" if label else "")
        look_at(frame)
        return self.wait(
            lambda: self.data.find(run, tag, frame, label),
            lambda: f"the widget's page fetched no {wanted}\n{self.data.describe()}",
            timeout,
        )


class NotebookPage(BrowserPage):
    """One notebook open in a browser page, in JupyterLab or classic Notebook 6 (``ui``):
    its cells run, its kernel, its widgets' XProf pages, and what the page fetched, where
    it went and what it logged."""

    def __init__(
        self, page: Any, server: JupyterLab, name: str, ui: Frontend, workspace: str = ""
    ) -> None:
        super().__init__(page)
        self.server = server
        self.name = name
        self.ui = ui
        self.workspace = workspace or Path(name).stem
        self.comm_info = False
        self.page_state = ""
        """The kernel's last ``execution_state`` the page received (its iopub status)."""
        page.on("websocket", lambda ws: ws.on("framereceived", self._received))

    def _received(self, payload: str | bytes) -> None:
        text = payload if isinstance(payload, str) else payload.decode(errors="replace")
        self.comm_info = self.comm_info or '"comm_info_reply"' in text
        states = _EXECUTION_STATE.findall(text)
        if states:
            self.page_state = states[-1]

    def open(self, timeout: float) -> None:
        """Open the notebook and wait until its kernel is connected and idle, and the
        widget manager has asked the kernel for its widgets (a widget created before that
        answer can be left unrendered, which a user who opens a notebook and then runs it
        never meets)."""
        url = self.ui.url(self.server, self.name, self.workspace)
        self.page.goto(url, timeout=timeout * 1000)
        self.page.wait_for_function(self.ui.ready, timeout=timeout * 1000)
        self.wait(self.kernel_idle, self._kernel_story, timeout)
        self.wait(lambda: self.comm_info, "the widget manager's comm_info_reply", timeout)

    def _sessions(self) -> list[dict[str, Any]]:
        """This notebook's sessions (the server may hold other notebooks')."""
        sessions = self.server.api("GET", "/api/sessions") or []
        return [s for s in sessions if str(s.get("path", "")).split(":")[-1] == self.name]

    def kernel_idle(self) -> bool:
        """The server says the notebook's kernel is idle, or it still says ``starting``
        while the page has heard the kernel go idle: Notebook 6's server learns the state
        from an iopub subscription of its own, made as the kernel starts, and on a busy
        machine it can miss the first status messages and say ``starting`` until the next
        cell runs."""
        mine = self._sessions()
        states = [s["kernel"]["execution_state"] for s in mine]
        return bool(mine) and all(
            state == "idle" or (state == "starting" and self.page_state == "idle")
            for state in states
        )

    def _kernel_story(self) -> str:
        """What a kernel that did not start shows: its sessions' states, the page's errors
        and the server's log."""
        try:
            kernels = [s["kernel"] for s in self._sessions()]
            states = [(k["name"], k["execution_state"]) for k in kernels]
        except (OSError, RuntimeError, ValueError) as error:
            states = [("?", f"the sessions API failed: {error}")]
        return (
            f"the kernel to start; this notebook's sessions: {states or 'none'}; the page "
            f"heard: {self.page_state or 'no status'}"
            f"{', the comm_info_reply' if self.comm_info else ''}; page errors: "
            f"{self.errors[-5:]}; the server's log ends:\n{self.server.log_tail(60)}"
        )

    def prompts(self) -> list[Any]:
        return self.ui.prompts(self.page)

    def outputs(self) -> str:
        texts: list[str] = self.page.locator(self.ui.outputs).all_inner_texts()
        return "\n---\n".join(texts)

    def run_all(self, count: int, timeout: float) -> None:
        """Run every cell, then wait until all ``count`` have run and the kernel is idle."""
        self.ui.run_all(self.page)

        def done() -> bool:
            prompts = self.prompts()
            return len(prompts) == count and all(map(self.ui.ran, prompts)) and self.kernel_idle()

        self.wait(done, lambda: f"cells still running: {self.prompts()}\n{self.outputs()}", timeout)

    @property
    def widgets(self) -> Any:
        """The widgets' viewer boxes (a locator)."""
        return self.page.locator(self.ui.widgets)

    def report(self) -> None:
        """What a failure leaves to read: the server's log, the page's console and errors."""
        print(f"{self.ui.name}'s log, last lines:\n{self.server.log_tail()}")
        print("Console:", *self.console[-40:], sep="\n")
        print("Page errors:", *self.errors[-20:], sep="\n")


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
    timeout: float = 120.0,
) -> JupyterLab:
    """JupyterLab on a free loopback port serving ``home/notebooks``, all its state in ``home``.

    ``python`` runs the server (and the proxy kernel), started through ``launcher`` (such as
    binder/start) in ``base_env`` (default: :func:`machine_environment`).
    """
    root = home / "notebooks"
    root.mkdir(parents=True)
    env = isolated(home, machine_environment() if base_env is None else base_env)
    _write_json(Path(env["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json", _SERVER_CONFIG)
    for name, content in _LAB_SETTINGS.items():
        _write_json(Path(env["JUPYTERLAB_SETTINGS_DIR"]) / name, content)
    _proxy_kernelspec(Path(env["JUPYTER_PATH"]), python)
    port = free_port()
    log_path = home / "jupyterlab.log"
    command = [
        *launcher,
        python,
        "-m",
        "jupyterlab",
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
        "JupyterLab",
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


@dataclass(frozen=True)
class DataFetch:
    """One response of XProf's data route (``.../data/plugin/profile/data?run=&tag=``)."""

    url: str
    run: str
    tag: str
    status: int
    names: frozenset[str]
    frame: Any

    def describe(self) -> str:
        shown = sorted(self.names)[:25]
        what = f"run={self.run!r} tag={self.tag!r} HTTP {self.status}"
        return f"{what}: {len(self.names)} event names {shown}"


def _event_names(body: bytes) -> frozenset[str]:
    """Event names of a Chrome trace JSON (XProf's ``trace_viewer@`` data)."""
    try:
        data = json.loads(body)
    except ValueError:
        return frozenset()
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        return frozenset()
    return frozenset(str(e["name"]) for e in events if isinstance(e, dict) and "name" in e)


class DataFetches:
    """The responses of XProf's data route in a page, from any frame.

    Playwright's sync API runs handlers only while the test is inside a Playwright call, and
    a handler must not wait for a body; so the handler keeps the response and :meth:`all`
    reads the bodies later, once each.
    """

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self._read: list[DataFetch] = []
        self.urls: list[str] = []
        self.failed: list[str] = []

    def on_response(self, response: Any) -> None:
        """A Playwright ``response`` handler."""
        self.urls.append(response.url)
        if "/data/plugin/profile/" in response.url and response.status >= 400:
            self.failed.append(f"HTTP {response.status} {response.url}")
        if DATA_ROUTE in urlsplit(response.url).path:
            self._pending.append(response)

    def all(self) -> list[DataFetch]:
        while self._pending:
            response = self._pending.pop(0)
            query = parse_qs(urlsplit(response.url).query)
            tag = query.get("tag", [""])[0]
            names: frozenset[str] = frozenset()
            if tag.startswith("trace_viewer"):
                # A frame that went away before its body was read leaves no names.
                with contextlib.suppress(Exception):
                    names = _event_names(response.body())
            run = query.get("run", [""])[0]
            self._read.append(
                DataFetch(response.url, run, tag, response.status, names, response.frame)
            )
        return list(self._read)

    def find(self, run: str, tag: str, frame: Any, label: str | None = None) -> DataFetch | None:
        """A successful fetch by ``frame`` (None: any frame) of ``run``'s ``tag`` data (with
        event ``label``)."""
        for fetch in self.all():
            if (fetch.run, fetch.status) != (run, 200) or frame not in (None, fetch.frame):
                continue
            if fetch.tag.startswith(tag) and (label is None or label in fetch.names):
                return fetch
        return None

    def describe(self) -> str:
        lines = [f.describe() for f in self.all()] or ["nothing fetched from the data route"]
        profile = [u for u in self.urls if "/data/plugin/profile" in u][-12:]
        return "\n".join(["data fetched:", *lines, "last profile requests:", *profile])


@dataclass
class ToolView:
    """How one stack shows the widget's page: for :func:`check_every_tool`."""

    widget: Any
    """The widget (its ``.xprof-tools select``)."""
    box: Any
    """The element that holds the XProf frame: its bounds are what the user sees."""
    frame: Callable[[str], Any]
    """The XProf page's frame once it shows a tool (by its value in the dropdown)."""
    data: DataFetches
    pause: Callable[[float], None]
    screenshot: Callable[[str], Any]
    reason: Callable[[], str]
    """The line the frame shows in place of a tool that has nothing for the run ("" while
    it shows none)."""
    place: Any = None
    """The element the page, or the line in its place, takes on the page: it shrinks to the
    line (None: not checked)."""
    charts_note: Callable[[], str] | None = None
    """The line under a page that draws charts where the chart library cannot load ("" while
    it shows none; None: not checked)."""
    under: Callable[[], str] | None = None
    """The line under the page about XProf's page itself ("" while none shows; None: not
    checked): on these CPU captures, the memory viewer's (``survey.CPU_MEMORY_VIEWER``)."""
    charts_box: Any = None
    """The charts note's element, and ``page_box`` the one XProf's page is drawn in: the
    note shows outside the page, which keeps the height it has without it (None: not
    checked)."""
    page_box: Any = None
    thread: str = "python"
    """The name of the row that holds the labels in the trace viewer (marimo's: ``marimo``)."""
    timeout_s: float = 90.0
    idle_s: float = 30.0
    """How long after a tool is chosen its page may still show a loading indicator."""


def check_every_tool(view: ToolView, run: str, label: str, name: str) -> list[str]:
    """Select each tool the dropdown offers, in turn, and check what the user sees.

    A tool named with a reason ("(no device ops in a CPU capture)") shows that reason in
    place of XProf's page, which is not loaded; any other must fetch its data (the graph
    viewer: its graph, after "Search Graph") and show no loading indicator of XProf's
    ``idle_s`` after it was chosen. No profile request answers 4xx/5xx, XProf's toolbar and
    menu are not there (the dropdown is the navigation) and no backdrop covers the tool, and
    in the trace viewer the ``python`` row (``label``'s thread) is inside the frame without
    scrolling. The options are read once the widget says they are final. A reason's frame
    shrinks to its line (:attr:`ToolView.place`), and the charts note shows under the pages
    that draw charts, offline, and under no other. Returns the tools seen.
    """
    from tests._page_checks import nav_shown
    from xprof_magic._notebook.widget import SURVEYED
    from xprof_magic._viewer.survey import CPU_MEMORY_VIEWER
    from xprof_magic._viewer.tools import TOOL_NAMES, uses_charts

    # Until XProf has said which tools have data, the options (their order, their names)
    # and a per-program tool's page can still change.
    final = view.widget.locator(f".xprof-tools.{SURVEYED}")
    _wait(view, lambda: final.count() == 1, f"the tools of {run} surveyed")
    select = view.widget.locator(".xprof-tools select")
    labels: list[str] = select.evaluate("s => Array.from(s.options).map(o => o.textContent)")
    tools = {name: tool for tool, name in reversed(TOOL_NAMES.items())}
    offered = []
    for label_text in labels:
        text = label_text.replace("\xa0", " ")
        offered.append((tools[text.split(" (")[0]], text))
    assert offered and offered[0][1] == "Trace viewer", offered
    with_data = [v for v, text in offered if not text.endswith(")")]
    assert offered[: len(with_data)] == [(v, t) for v, t in offered if v in with_data], offered
    current = select.evaluate("s => s.options[s.selectedIndex].textContent")
    page_height = 0.0
    for (value, text), label_text in zip(offered, labels, strict=True):
        if label_text != current:
            select.select_option(label=label_text)
            current = label_text
        chosen = time.monotonic()
        if text.endswith(")"):
            why = text.rsplit("(", 1)[1].rstrip(")")
            assert len(why) > 8, text
            shown = _wait(view, functools.partial(_says, view, why), f"{value}: its reason")
            assert shown and not view.data.failed, (value, view.data.failed)
            if view.place is not None:
                height = _wait(view, functools.partial(_height, view.place, 0, 100), "a line")
                assert height, f"{value}: its reason takes {_height(view.place)} px"
            view.screenshot(f"{name}-{value.rstrip('@')}")
            continue
        frame = view.frame(value)
        view.box.scroll_into_view_if_needed()
        if value.startswith("trace_viewer"):
            found = functools.partial(view.data.find, run, "trace_viewer", frame, label)
            _wait(view, found, f"{value} data of {run} with {label!r}")
            row = frame.get_by_text(view.thread, exact=True).filter(visible=True).first
            row.wait_for(timeout=view.timeout_s * 1000)
            _inside(row.bounding_box(), view.box.bounding_box(), f"the {view.thread} row")
        else:
            if value == "graph_viewer":
                search = frame.get_by_role("button", name="Search Graph")
                search.wait_for(timeout=view.timeout_s * 1000)
                _wait(view, search.is_enabled, "the graph viewer's op to search")
                search.click()
                # The graph comes into a frame of its own, by a //prefix//data/... URL.
                graph = _wait(view, functools.partial(_graph, view.data, run), "the graph")
                drawn = functools.partial(_has_graph, graph.frame)
                _wait(view, drawn, f"a graph at {graph.url}")
            else:
                found = functools.partial(view.data.find, run, value, frame)
                _wait(view, found, f"{value} data of {run}")
            menu = _wait(view, functools.partial(_menu, frame), f"{value}: XProf's menu")
            assert menu != "covering", f"{value}: XProf's menu covers the tool"
        idle = wait_until(
            functools.partial(_idle, frame),
            max(0.0, chosen + view.idle_s - time.monotonic()),
            f"{value}: still loading {view.idle_s:g} s after it was chosen",
            view.pause,
        )
        assert idle and view.reason() == "", value
        assert nav_shown(frame) == [], f"{value}: XProf's menu is open: {nav_shown(frame)}"
        if view.place is not None:
            assert _height(view.place, 300), f"{value}: the page in {_height(view.place)} px"
        if view.under is not None:
            line = CPU_MEMORY_VIEWER if value == "memory_viewer" else ""
            said = functools.partial(_under_says, view, line)
            assert _wait(view, said, f"{value}: the line under it"), view.under()
        if view.page_box is not None and not page_height:
            page_height = view.page_box.bounding_box()["height"]
        if view.charts_note is not None:
            if uses_charts(value):  # offline: Google's chart library cannot load
                noted = functools.partial(_charts_noted, view.charts_note)
                _wait(view, noted, f"{value}: the charts note")
                if view.page_box is not None and page_height:
                    _beside(view.charts_box.bounding_box(), view.page_box.bounding_box(), value)
                    height = view.page_box.bounding_box()["height"]
                    assert abs(height - page_height) <= 1, f"{value}: {height} of {page_height} px"
            else:
                said = view.charts_note()
                assert said == "", f"{value} draws no charts, yet the frame says: {said}"
        if not value.startswith("trace_viewer"):
            # A Trace Viewer v2 choice saved here (no WebGPU adapter headless) is dropped by
            # the next XProf page this origin loads.
            saved = in_frame(frame, f"() => localStorage.getItem('{V2_KEY}')")
            assert saved is None, f"{value}: a saved Trace Viewer v2 choice was kept"
            in_frame(frame, f"() => localStorage.setItem('{V2_KEY}', 'true')")
        view.screenshot(f"{name}-{value.rstrip('@')}")
        assert not view.data.failed, (value, view.data.failed)
    return [v for v, _ in offered]


def _beside(note: Any, page: Any, tool: str) -> None:
    """The charts note's box lies above or below the page's, not over it."""
    apart = note["y"] >= page["y"] + page["height"] - 1 or note["y"] + note["height"] <= page["y"]
    assert apart, f"{tool}: the charts note {note} covers the page {page}"


def _under_says(view: ToolView, line: str) -> bool:
    return view.under is not None and view.under() == line


def _says(view: ToolView, why: str) -> bool:
    return why in view.reason()


def _charts_noted(note: Callable[[], str]) -> bool:
    return "Google's charts" in note()


def _height(place: Any, low: float = 0.0, high: float = float("inf")) -> float:
    """``place``'s height on the page, when it is from ``low`` to ``high`` px (else 0)."""
    box = place.bounding_box()
    height = float(box["height"]) if box else 0.0
    return height if low <= height <= high else 0.0


def look_at(frame: Any) -> None:
    """Scroll ``frame``, and the frames that hold it, into the page's view, as a person looks
    at it: the page said while a run is prepared loads the run's timeline only in view."""
    from playwright.sync_api import Error

    chain = []
    while frame is not None and frame.parent_frame is not None:
        chain.append(frame)
        frame = frame.parent_frame
    for one in reversed(chain):
        with contextlib.suppress(Error):
            one.frame_element().scroll_into_view_if_needed(timeout=10_000)


def shown_text(line: Any) -> str:
    """A locator's text while it is shown, else "" (for :attr:`ToolView.reason`)."""
    from playwright.sync_api import Error

    try:
        return str(line.inner_text()) if line.count() and line.first.is_visible() else ""
    except Error:
        return ""


def _idle(frame: Any) -> bool:
    """No loading indicator of XProf's shows (:func:`tests._page_checks.busy`)."""
    from playwright.sync_api import Error

    from tests._page_checks import busy

    try:
        return not busy(frame)
    except Error:
        return False


def in_frame(frame: Any, script: str) -> Any:
    """``script`` (a function of the root element) evaluated in ``frame``'s document, within
    :data:`FRAME_LOOK_MS`. ``Locator.evaluate`` waits for the document with a timeout, where
    ``Frame.evaluate`` and ``Locator.count`` wait without one: a cross-origin frame whose
    document never came back once held a test until the job was killed."""
    return frame.locator(":root").evaluate(script, timeout=FRAME_LOOK_MS)


_MENU_JS = f"""root => {{
  if (!root.querySelector({json.dumps(MENU_PLACED)})) return null;
  if (document.body && document.body.innerText.includes('Navigating.')) return null;
  return root.querySelector({json.dumps(BACKDROP)}) ? 'covering' : 'placed';
}}"""


def _menu(frame: Any) -> str | None:
    """Where XProf's full UI has put its menu, once it has: "placed" (docked, or closed) or
    "covering" (over the tool, with a backdrop, which XProf shows in the same update); None
    while its drawer has no mode yet or XProf is still navigating to the tool ("Navigating."),
    the moment its classic menu would open over a narrow frame."""
    from playwright.sync_api import Error

    try:
        found: str | None = in_frame(frame, _MENU_JS)
    except Error:
        return None
    return found


_GRAPH_JS = """root => ({
  drawn: root.querySelector('#graph-container svg g.node') !== null,
  notice: root.querySelector('.xprof-magic-graph-notice')?.textContent ?? null,
})"""


def _has_graph(frame: Any) -> bool:
    """The graph drawn: graphviz's SVG with its nodes in XProf's graph page, offline (the
    viewer serves the renderer), and no notice that it could not be."""
    from playwright.sync_api import Error

    try:
        found = in_frame(frame, _GRAPH_JS)
    except Error:
        return False
    assert found["notice"] is None, found["notice"]
    return bool(found["drawn"])


def _graph(data: DataFetches, run: str) -> DataFetch | None:
    """The graph viewer's graph of ``run``, fetched into a frame of its own."""
    found = [f for f in data.all() if f.run == run and f.status == 200 and "type=graph" in f.url]
    return found[-1] if found else None


def _wait(view: ToolView, condition: Callable[[], Any], what: str) -> Any:
    return wait_until(
        condition, view.timeout_s, lambda: f"{what}\n{view.data.describe()}", view.pause
    )


def _inside(inner: Any, outer: Any, what: str) -> None:
    assert inner and outer, (what, inner, outer)
    assert (
        outer["y"] <= inner["y"] and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    ), f"{what} at {inner} is outside the frame at {outer}"
