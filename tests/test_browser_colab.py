"""Acceptance on Colab's stack: ``%%xprof`` in classic Notebook 6.5 with ipywidgets 7, the
kernel seeing a ``google.colab`` module and the page a ``google.colab.kernel.proxyPort``.

Only what cannot exist here is faked, and honestly: the kernel imports a stub
``google.colab`` (tests/colab_stub; its ``output.eval_js`` never returns, as with no browser
attached, so a kernel that called it would hang the cell), and an init script gives the page
``google.colab.kernel.proxyPort``, which maps a kernel port to another origin than the
notebook's (``http://localhost:PORT/`` for a notebook on 127.0.0.1), as Colab's proxy does.
A second variant maps every port to a server that answers 403, as Colab's proxy does when
the browser blocks third-party cookies.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests._browser import (
    CHROMIUM_ARGS,
    TOKEN,
    DataFetches,
    JupyterLab,
    ToolView,
    check_every_tool,
    find_chromium,
    offline,
    select_run,
    shut_down,
    start_classic_notebook,
    wait_until,
    write_notebook,
)
from tests._kernel import free_port
from tests.conftest import ARTIFACTS, missing
from xprof_magic._notebook import colab

pytestmark = [pytest.mark.browser, pytest.mark.pinned]

STUB = Path(__file__).resolve().parent / "colab_stub"
KERNEL = "python3-colab"
RUN_TIMEOUT_S = 300.0
LOAD_TIMEOUT_S = 90.0

# ``target`` null: a port maps to the same port on localhost; a number: every port maps there.
FAKE_PROXY = """
(() => {
  const target = %s;
  window.xprofProxyCalls = [];
  window.google = window.google || {};
  window.google.colab = window.google.colab || {};
  window.google.colab.kernel = {
    proxyPort: async (port, options) => {
      window.xprofProxyCalls.push({port, options});
      return `http://localhost:${target === null ? port : target}/`;
    },
  };
})();
"""

SETUP = "%load_ext xprof_magic\nimport torch, torch_xla\ndevice = torch_xla.device()"
TRAIN = (
    "%%xprof --name colab-train\n"
    "x = torch.randn(64, 64, device=device)\n"
    "# xprof: forward\n"
    "y = (x @ x).relu().sum()\n"
    "torch_xla.sync()\n"
    "y.item()"
)
EVALUATE = (
    "%%xprof --name colab-eval\n# xprof: evaluate\nz = (x * 2).sum()\ntorch_xla.sync()\nz.item()"
)
JAX = (
    "%%xprof --name colab-jax --steps\n"
    "import jax, jax.numpy as jnp\n"
    "step = jax.jit(lambda w, x: w - 0.1 * (x @ w))\n"
    "w = jnp.ones((64, 64))\n"
    "for i in range(3):\n"
    "    # xprof: update\n"
    "    w = step(w, jnp.full((64, 64), 0.01))\n"
    "float(w.sum())"
)


def colab_kernel() -> dict[str, Any]:
    """This Python with the stub first on its path, imported at start as Colab's kernel
    imports ``google.colab``."""
    path = os.pathsep.join(p for p in (str(STUB), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.exec_lines=['import google.colab']",
        ],
        "display_name": "Python 3 (fake Colab)",
        "language": "python",
        "env": {"PYTHONPATH": path},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    home = tmp_path_factory.mktemp("notebook6")
    started = start_classic_notebook(home, kernels={KERNEL: colab_kernel()})
    try:
        yield started
    finally:
        shut_down(started, home)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Any]]:
    """Opens Chromium on a profile of its own that allows third-party cookies: in Colab the
    proxy answers 403 otherwise (the other variant), and an iframe of another site than the
    page's, as Colab's proxied one is, gets no storage without them (XProf's trace viewer
    then stops at ``localStorage``)."""
    chromium = find_chromium()
    if chromium is None:
        missing("Chromium not found at /usr/bin/chromium: run `make browser-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        opened: list[Any] = []

        def open_profile(init_script: str) -> Any:
            profile = tmp_path_factory.mktemp("chromium-profile")
            (profile / "Default").mkdir()
            allow = {"profile": {"cookie_controls_mode": 0, "block_third_party_cookies": False}}
            (profile / "Default" / "Preferences").write_text(json.dumps(allow))
            context = playwright.chromium.launch_persistent_context(
                str(profile),
                executable_path=chromium,
                args=CHROMIUM_ARGS,
                env={**os.environ, "HOME": str(profile)},
                viewport={"width": 1400, "height": 1000},
            )
            context.add_init_script(init_script)
            opened.append(context)
            return context

        try:
            yield open_profile
        finally:
            for context in opened:
                with contextlib.suppress(Exception):
                    context.close()


@pytest.fixture(scope="module")
def forbidden() -> Iterator[int]:
    """A server answering 403 to everything: Colab's proxy when third-party cookies are
    blocked."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"Forbidden"
            self.send_response(403)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Refuse)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield port
    httpd.shutdown()
    httpd.server_close()


class ClassicNotebook:
    """One notebook open in classic Notebook, and what its page fetched."""

    def __init__(self, page: Any, server: JupyterLab, name: str) -> None:
        self.page = page
        self.server = server
        self.name = name
        self.data = DataFetches()
        self.errors: list[str] = []
        page.on("response", self.data.on_response)
        self.comm_info = False
        page.on("websocket", lambda ws: ws.on("framereceived", self._received))
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.console: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text} ({m.location})"))

    def _received(self, payload: str | bytes) -> None:
        text = payload if isinstance(payload, str) else payload.decode(errors="replace")
        self.comm_info = self.comm_info or '"comm_info_reply"' in text

    def pause(self, seconds: float) -> None:
        self.page.wait_for_timeout(seconds * 1000)

    def open(self) -> None:
        url = f"{self.server.origin}/notebooks/{self.name}?token={TOKEN}"
        self.page.goto(url, timeout=LOAD_TIMEOUT_S * 1000)
        self.page.wait_for_function(
            "() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
            " && Jupyter.notebook.kernel.is_connected()",
            timeout=LOAD_TIMEOUT_S * 1000,
        )

    def prompts(self) -> list[Any]:
        found: list[Any] = self.page.evaluate(
            "() => Jupyter.notebook.get_cells().map(c => c.input_prompt_number ?? null)"
        )
        return found

    def outputs(self) -> str:
        texts: list[str] = self.page.locator(".output_area").all_inner_texts()
        return "\n---\n".join(texts)

    def kernel_idle(self) -> bool:
        sessions = self.server.api("GET", "/api/sessions")
        return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)

    def run_all(self) -> None:
        """Run every cell once the widget manager has restored the kernel's widgets.

        Notebook 6's manager (ipywidgets 7) asks the kernel for its comms when it connects;
        a widget created before that answer can be left unrendered, which a user who opens
        a notebook and then runs it never meets."""
        wait_until(
            lambda: self.comm_info,
            LOAD_TIMEOUT_S,
            "the widget manager's comm_info_reply",
            self.pause,
        )
        self.page.evaluate("() => Jupyter.notebook.execute_all_cells()")
        wait_until(
            lambda: all(isinstance(p, int) for p in self.prompts()) and self.kernel_idle(),
            RUN_TIMEOUT_S,
            lambda: f"cells still running: {self.prompts()}\n{self.outputs()}",
            self.pause,
        )

    def frame(self, box: Any, previous: Any = None) -> Any:
        """The XProf page's frame in an ``.xprof-colab`` output, once not ``previous``."""

        def find() -> Any:
            handle = box.locator("iframe.xprof-inner").element_handle(timeout=1000)
            found = handle.content_frame() if handle else None
            if found is None or found == previous or found.url in ("", "about:blank"):
                return None  # Not yet the new frame, or not yet navigated to its page.
            return found

        return wait_until(find, LOAD_TIMEOUT_S, "the output's XProf frame", self.pause)

    def wait_for_data(self, box: Any, run: str, label: str) -> Any:
        """The output's frame once it has fetched ``run``'s trace with an event ``label``;
        in view, as a user would see it (Chromium throttles frames out of view)."""
        box.scroll_into_view_if_needed()
        return wait_until(
            lambda: (
                (frame := self.frame(box))
                and self.data.find(run, "trace_viewer", frame, label)
                and frame
            ),
            LOAD_TIMEOUT_S,
            lambda: f"no trace of {run!r} with {label!r} fetched\n{self.data.describe()}",
            self.pause,
        )

    def every_tool(self, widget: Any, box: Any, run: str, label: str) -> list[str]:
        """:func:`check_every_tool` on one widget and the output frame under it."""
        box.scroll_into_view_if_needed()
        view = ToolView(
            widget=widget,
            box=box.locator("iframe.xprof-inner"),
            frame=lambda previous: self.frame(box, previous),
            data=self.data,
            pause=self.pause,
            screenshot=lambda shot: box.screenshot(
                path=str(ARTIFACTS / f"browser-colab-{run}-{shot}.png")
            ),
        )
        return check_every_tool(view, run, label, "tools")

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"browser-colab-{name}.png"), full_page=True)


def run_of(frame: Any) -> str:
    found = re.search(r"[?&]run=([^&]+)", unquote(unquote(frame.url)))
    return found.group(1) if found else ""


def test_the_viewer_loads_through_the_fake_proxy_and_switches_runs(
    server: JupyterLab, browser: Callable[[str], Any]
) -> None:
    name = "colab.ipynb"
    write_notebook(server.root / name, [SETUP, TRAIN, EVALUATE, JAX], kernel=KERNEL)
    context = browser(FAKE_PROXY % "null")
    offline(context)
    page = context.pages[0] if context.pages else context.new_page()
    notebook = ClassicNotebook(page, server, name)
    try:
        notebook.open()
        notebook.run_all()
        outputs = notebook.outputs()
        assert "Traceback" not in outputs and "showing it failed" not in outputs, outputs
        for run in ("colab-train", "colab-eval", "colab-jax"):
            assert f"xprof: run {run} (ok)" in outputs, outputs
        widgets = page.locator(".xprof-viewer")
        boxes = page.locator(".xprof-colab")
        wait_until(
            lambda: widgets.count() == 3 and boxes.count() == 3,
            LOAD_TIMEOUT_S,
            lambda: f"{widgets.count()} widgets, {boxes.count()} frames:\n{notebook.outputs()}",
            notebook.pause,
        )
        assert page.locator("a.xprof-open").count() == 0, "Colab gets no new-tab link"

        # The frame comes from another origin than the notebook's, through proxyPort.
        first = boxes.nth(0)
        frame = notebook.frame(first)
        parts = urlsplit(frame.url)
        assert parts.hostname == "localhost" and parts.port != server.port, frame.url
        calls = page.evaluate("() => window.xprofProxyCalls")
        assert calls and all(c["options"] == {"cache": False} for c in calls), calls
        frame = notebook.wait_for_data(first, "colab-train", "forward")
        frame.get_by_text("/host:CPU").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        assert first.locator(".xprof-colab-hint").is_hidden()
        notebook.screenshot("trace-viewer")

        # The runs dropdown replaces the same output's frame, in place.
        select_run(widgets.nth(0), "colab-eval")
        frame = notebook.frame(first, previous=frame)
        assert run_of(frame) == "colab-eval", frame.url
        frame = notebook.wait_for_data(first, "colab-eval", "evaluate")
        assert boxes.count() == 3 and first.locator("iframe").count() == 1
        assert first.locator(".xprof-colab-hint").is_hidden()

        # XProf's full UI reads window.parent; cross-origin it must still render.
        widgets.nth(0).locator(".xprof-tools select").select_option(label="Overview")
        frame = notebook.frame(first, previous=frame)
        assert urlsplit(frame.url).path.endswith("/overview_page"), frame.url
        first.scroll_into_view_if_needed()
        frame.get_by_text("Performance Summary").filter(visible=True).first.wait_for(
            timeout=LOAD_TIMEOUT_S * 1000
        )
        notebook.screenshot("overview")
        # XProf's pages read window.parent (gtag, TENSORBOARD_ENV), which throws
        # cross-origin: what matters is that they render, as checked above.
        assert not [e for e in notebook.errors if "localStorage" in e], notebook.errors

        # Every tool offered, for torch_xla and for JAX, in Notebook 6's output width.
        for index, run, label in ((0, "colab-eval", "evaluate"), (2, "colab-jax", "update")):
            tools = notebook.every_tool(widgets.nth(index), boxes.nth(index), run, label)
            assert "graph_viewer" in tools and "memory_viewer" in tools, tools
        print("Page errors (XProf's, cross-origin):", *notebook.errors, sep="\n")
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("failure")
        print(f"Notebook's log, last lines:\n{server.log_tail()}")
        print("Console:", *notebook.console[-40:], sep="\n")
        with contextlib.suppress(Exception):
            areas = page.evaluate(
                "() => Array.from(document.querySelectorAll('.output_area'))"
                ".map(a => a.innerHTML.slice(0, 600))"
            )
            print("Output areas:", *areas, sep="\n")
        raise
    finally:
        context.close()
        server.shutdown_kernels()


def test_a_refusing_proxy_shows_the_one_line_hint(
    server: JupyterLab, browser: Callable[[str], Any], forbidden: int
) -> None:
    name = "colab-403.ipynb"
    write_notebook(server.root / name, [SETUP, TRAIN], kernel=KERNEL)
    context = browser(FAKE_PROXY % json.dumps(forbidden))
    page = context.pages[0] if context.pages else context.new_page()
    notebook = ClassicNotebook(page, server, name)
    try:
        notebook.open()
        notebook.run_all()
        box = page.locator(".xprof-colab")
        assert box.count() == 1, notebook.outputs()
        hint = box.locator(".xprof-colab-hint")
        hint.wait_for(state="visible", timeout=LOAD_TIMEOUT_S * 1000)
        assert hint.inner_text().strip() == colab.BLOCKED_HINT
        assert box.locator("iframe").count() == 0
        notebook.screenshot("403")
    except BaseException:
        with contextlib.suppress(Exception):
            notebook.screenshot("403-failure")
        print(f"Notebook's log, last lines:\n{server.log_tail()}")
        raise
    finally:
        context.close()
        server.shutdown_kernels()
