"""Helpers for the slow tiers (browser, Binder): a real JupyterLab, Chromium, XProf's fetches.

Everything a server and its kernels write (runtime files, settings, workspaces, IPython's
history, the viewers' info files, the captures) goes under one temporary folder, so that a
run leaves nothing behind but its artifacts.

:class:`NotebookPage` is the one way the browser tests drive a notebook, in JupyterLab,
Notebook 7 or classic Notebook 6 (:data:`LAB`, :data:`NOTEBOOK7`, :data:`NOTEBOOK6`): open
it, run its cells, wait for the kernel, and find a widget's XProf page; the marimo tests
watch their app's page through its base, :class:`BrowserPage`. The XProf page is found
through Playwright's frame tree, by the name the widget gives its iframe, each time it is
asked for, and every element through a locator: no test holds an element handle, which a
re-rendered output or a frame's next document would leave behind. Every wait is for a
condition; Playwright's ``wait_for_timeout`` appears only as the interval between two looks
at one (:func:`wait_until`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import nbformat

from tests._notebook_servers import TOKEN, JupyterLab
from tests._wait import wait_until
from tests.conftest import ARTIFACTS
from xprof_magic._notebook.frame import frame_name

__all__ = [
    "BACKDROP",
    "CHROMIUM_ARGS",
    "FRAME_LOOK_MS",
    "JAX_STEPS",
    "LAB",
    "MENU_PLACED",
    "NOTEBOOK6",
    "NOTEBOOK7",
    "V2_KEY",
    "BrowserPage",
    "DataFetch",
    "DataFetches",
    "NotebookPage",
    "find_chromium",
    "launch_chromium",
    "launch_profile",
    "offline",
    "select_run",
    "tool_page",
    "write_notebook",
]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DATA_ROUTE = "/data/plugin/profile/data"

# JupyterLab's user settings: every cell stays in the DOM (no windowing), no news toasts.


JAX_STEPS = (
    "step = jax.jit(lambda w, x: w - 0.1 * (x @ w))\n"
    "w = jnp.ones((64, 64))\n"
    "for i in range(3):\n"
    "    # xprof: update\n"
    "    w = step(w, jnp.full((64, 64), 0.01))\n"
    "float(w.sum())"
)
"""Three jitted JAX steps, each labelled ``update``: a cell under its ``%%xprof`` line, with
``jax`` and ``jnp`` imported."""
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


def launch_profile(chromium: Any, profile: Path, third_party_cookies: bool) -> Any:
    """Debian's Chromium on a profile of its own at ``profile`` (a persistent context, 1400 by
    1000), whose preferences allow or block third-party cookies; ``chromium`` is Playwright's
    browser type. The caller closes it."""
    (profile / "Default").mkdir(parents=True, exist_ok=True)
    cookies = {
        "cookie_controls_mode": 0 if third_party_cookies else 1,
        "block_third_party_cookies": not third_party_cookies,
    }
    (profile / "Default" / "Preferences").write_text(json.dumps({"profile": cookies}))
    return chromium.launch_persistent_context(
        str(profile),
        executable_path=find_chromium(),
        args=CHROMIUM_ARGS,
        env={**os.environ, "HOME": str(profile)},
        viewport={"width": 1400, "height": 1000},
    )


def select_run(widget: Any, run: str) -> None:
    """Choose ``run`` in the widget's runs dropdown (its labels carry a time too; ipywidgets
    7 and 8 both show each label with non-breaking spaces)."""
    dropdown = widget.locator(".xprof-runs select")
    labels: list[str] = dropdown.evaluate("s => Array.from(s.options).map(o => o.textContent)")
    chosen = [t for t in labels if t.replace("\xa0", " ").split(" ")[0] == run]
    assert chosen, f"run {run!r} is not in the runs dropdown: {labels}"
    dropdown.select_option(label=chosen[0])


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
# Notebook 7 is JupyterLab's components in a page of one notebook: the same menus, cells and
# outputs, at /notebooks/<name>.
NOTEBOOK7 = Frontend(
    name="Notebook 7",
    url=lambda server, name, _: f"{server.origin}{server.base_url}notebooks/{name}?token={TOKEN}",
    ready=LAB.ready,
    run_all=_lab_run_all,
    prompts=_lab_prompts,
    ran=LAB.ran,
    outputs=LAB.outputs,
    widgets=LAB.widgets,
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
