"""Colab's TPU runtime: what installing xprof_magic there changes, and the Colab embedding.

The constraints are Colab's own pins (tests/colab-constraints.txt). Installing must leave the
notebook stack that Colab's kernel has already imported as it is; the only upgrades allowed
are the ones the docs' Colab page names, which XProf requires.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.conftest import missing

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "tests" / "colab-constraints.txt"
# What Colab's kernel has imported when a notebook's first cell runs: never to be replaced.
KERNEL_STACK = (
    "ipython",
    "ipykernel",
    "traitlets",
    "ipywidgets",
    "tornado",
    "pyzmq",
    "jupyter-client",
)
# XProf 2.24 requires absl-py>=2.1 and urllib3>=2.7; Colab has 1.4.0 and 2.5.0. The docs'
# Colab page and the quickstart's install cell name both.
ALLOWED_UPGRADES = {"absl-py", "urllib3"}
PYPI = "https://pypi.org/simple/pip/"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(PYPI, timeout=10):
            return True
    except (urllib.error.URLError, OSError):
        return False


pytestmark = pytest.mark.colab


def test_constraints_cover_the_notebook_stack() -> None:
    pins = colab_pins()
    assert {"ipython": "7.34.0", "ipywidgets": "7.7.1", "traitlets": "5.7.1"}.items() <= {
        k: pins[k] for k in ("ipython", "ipywidgets", "traitlets")
    }.items()
    assert all(name in pins for name in KERNEL_STACK)
    assert pins.keys() >= ALLOWED_UPGRADES


@pytest.mark.pinned
def test_install_on_colab_upgrades_only_what_the_readme_names(tmp_path: Path) -> None:
    """``pip install --dry-run`` of the project with Colab's pins as constraints, all but the
    two XProf forces: it resolves, keeps the kernel's stack, and changes only those two."""
    if not pypi_reachable():
        missing(f"PyPI is not reachable ({PYPI}): the resolution needs it")
    pins = colab_pins()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "\n".join(
            line
            for line in CONSTRAINTS.read_text().splitlines()
            if canonical(line.partition("==")[0]) not in ALLOWED_UPGRADES
        )
    )
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "-c",
            str(constraints),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"pip could not resolve on Colab's pins:\n{done.stderr[-4000:]}"
    chosen = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    for name in KERNEL_STACK:
        assert chosen.get(name, pins[name]) == pins[name], name
    changed = {
        name: (pins[name], version)
        for name, version in chosen.items()
        if name in pins and version != pins[name]
    }
    assert changed.keys() == ALLOWED_UPGRADES, changed
    page = (ROOT / "docs" / "guide" / "colab.md").read_text()
    for name in ALLOWED_UPGRADES:
        assert f"{name}" in page and pins[name] in page, name


STUB = ROOT / "tests" / "colab_stub"


@pytest.fixture
def colab_imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stub ``google.colab`` imported, as Colab's kernel imports the real one at start."""
    import importlib

    monkeypatch.syspath_prepend(str(STUB))
    importlib.import_module("google.colab")
    yield
    for name in [n for n in sys.modules if n.startswith("google.colab")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    import torch
    import torch_xla

    import xprof_magic
    from xprof_magic._viewer.process import manager

    root = tmp_path_factory.mktemp("colab")
    for name in ("older", "newer"):
        with xprof_magic.capture(logdir=root, name=name, server=False):
            (torch.ones(4, device=torch_xla.device()) * 2).sum().item()
    outcome = manager.ensure_viewer(root)
    assert isinstance(outcome, manager.Launched | manager.Reused), outcome
    yield root, outcome.viewer
    manager.stop_viewer(outcome.viewer)


def frame_args(source: str) -> dict[str, Any]:
    """The arguments the output's script was called with."""
    found = re.search(r"\}\)\((\{.*\})\);\s*$", source, re.S)
    assert found, source
    args: dict[str, Any] = json.loads(found.group(1))
    return args


def test_colab_frame_is_made_in_the_browser_and_updated_in_place(
    colab_imported: None, runs: tuple[Path, Any], ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Colab is detected from its module; the kernel builds paths only (the stub's eval_js
    would hang), the widget holds no iframe and no new-tab link, and a new selection
    replaces the frame's output through its display id."""
    import types

    from xprof_magic._analysis import summary_of
    from xprof_magic._notebook import colab, show
    from xprof_magic._notebook import context as _context
    from xprof_magic._notebook import widget as _widget

    logdir, viewer = runs
    context = _context.detect(shell=types.SimpleNamespace(kernel=object()))
    assert context.kind == "colab"
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(
        ip.display_pub, "publish", lambda data, **kw: published.append({"data": data, **kw})
    )
    view = _widget.ViewerWidget(viewer, context, logdir, run="older", height=321)
    summary = summary_of(logdir / "plugins" / "profile" / "older", budget_s=show.SUMMARY_BUDGET_S)
    show.CellDisplay(show.Rendered.of(summary), view, widgets=True).show()

    summary_out, widget_out, frame_out = published
    assert "text/html" in summary_out["data"]
    assert "application/vnd.jupyter.widget-view+json" in widget_out["data"]
    assert view.frame.value == "" and view.link.value == ""
    source = frame_out["data"][colab.MIME]
    assert "google.colab.kernel.proxyPort(a.port, {cache: false})" in source
    assert "eval_js" not in source
    args = frame_args(source)
    assert args["port"] == viewer.port and args["height"] == 321
    assert args["path"].startswith(f"{viewer.base_path}/data/plugin/profile/")
    assert "run=older" in unquote(args["path"])
    assert args["probe"] == viewer.base_path + colab.PROBE_PATH
    display_id = frame_out["transient"]["display_id"]

    view.runs.value = "newer"
    update = published[-1]
    assert update["update"] and update["transient"]["display_id"] == display_id
    moved = frame_args(update["data"][colab.MIME])
    assert "run=newer" in unquote(moved["path"]) and moved["id"] == args["id"]
    assert view.frame.value == "" and view.link.value == ""


def test_the_probe_route_is_served_and_small(runs: tuple[Path, Any]) -> None:
    """The script the page preloads to tell a real load from a 403 exists on the viewer."""
    from xprof_magic._notebook import colab

    _, viewer = runs
    url = f"http://127.0.0.1:{viewer.port}{viewer.base_path}{colab.PROBE_PATH}"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert len(response.read()) < 4096


@pytest.mark.kernel
def test_a_colab_kernel_never_waits_for_the_browser(tmp_path: Path) -> None:
    """In a real kernel that imported ``google.colab`` at start (the stub, whose ``eval_js``
    never returns), a profiled cell finishes, shows the widget, and puts the frame in an
    output of its own whose script asks ``proxyPort`` for the viewer's port."""
    import os

    from tests._kernel import Kernel
    from xprof_magic._notebook import colab

    path = os.pathsep.join(p for p in (str(STUB), os.environ.get("PYTHONPATH", "")) if p)
    kernel = Kernel(extra={"PYTHONPATH": path, "XPROF_MAGIC_NO_SERVER": "1"})
    try:
        content, _ = kernel.run("import google.colab\n%load_ext xprof_magic\nimport torch")
        assert content["status"] == "ok"
        content, outputs = kernel.run(
            f"%%xprof --logdir {tmp_path} --name cell\nt = torch.ones(3)\nt.sum().item()",
            timeout=180,
        )
        assert content["status"] == "ok", outputs
        shown = [o["data"] for o in outputs if o["type"] == "display_data"]
        summary, widget, frame = shown
        assert "text/html" in summary
        assert "application/vnd.jupyter.widget-view+json" in widget
        args = frame_args(frame[colab.MIME])
        assert args["path"].startswith("/") and "run=cell" in unquote(args["path"])
        assert "<iframe" not in json.dumps(widget)
    finally:
        kernel.close()
