"""binder/ as mybinder.org uses it: install, start script, the quickstart in that environment.

repo2docker runs ``pip install -r binder/requirements.txt`` from the repository root, then
launches the notebook server through ``binder/start``. This test does the same in a fresh
virtual environment that sees nothing of the development one, so a requirement missing from
binder/requirements.txt fails here, as it would on Binder.

The environment is about 7.5 GB (PyPI's torch is the CUDA build, with its nvidia-* wheels,
about 4 GB to download) and is deleted afterwards. Measured on 2 shared cores: about 2 minutes
for the install, 10 seconds for the notebook. pip's cache would spare the download on a second
run, but the package proxy of the machine this was measured on strips caching headers, so
every run downloads.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import nbformat
import pytest

from tests._notebook_servers import isolated, leftover_processes, start_jupyterlab, stop_viewers
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.binder

REPO = Path(__file__).resolve().parent.parent
BINDER = REPO / "binder"
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
PREFIX = "/user/binder-test/"
NOTEBOOK_TIMEOUT_S = 600

# What the kernel sees before the notebook's own first cell sets anything.
ENV_PROBE = (
    "import json, os, sys\n"
    "print('ENV=' + json.dumps({k: os.environ.get(k) for k in "
    "('PJRT_DEVICE', 'XPROF_MAGIC_PROXY_URL')}))\n"
    "print('PREFIX=' + sys.prefix)"
)
INSTALL_PROBE = "import xprof_magic\nprint('PACKAGE=' + xprof_magic.__file__)"
RUNNER = """
import sys, nbformat
from nbclient import NotebookClient
source, target, cwd, timeout = sys.argv[1:]
notebook = nbformat.read(source, as_version=4)
client = NotebookClient(
    notebook, timeout=int(timeout), kernel_name="python3", resources={"metadata": {"path": cwd}}
)
try:
    client.execute()
finally:
    nbformat.write(notebook, target)
"""


def run(command: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
    )
    return done


def clean_env(home: Path) -> dict[str, str]:
    """The machine's environment without anything this project or Jupyter would read."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XPROF_MAGIC_", "JUPYTER", "PJRT_", "VIRTUAL_ENV", "PYTHON"))
        and k not in ("TENSORBOARD_PROXY_URL", "IPYTHONDIR", "TF_CPP_MIN_LOG_LEVEL")
    }
    env["HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def binder_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh environment with binder/requirements.txt installed as repo2docker does it:
    ``pip install -r binder/requirements.txt`` from the repository root."""
    prefix = tmp_path_factory.mktemp("binder") / "venv"
    venv.EnvBuilder(with_pip=False).create(prefix)
    install = [sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python")]
    try:
        run([*install, "install", "--quiet", "-r", "binder/requirements.txt"], 1800, cwd=REPO)
        yield prefix
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def test_start_sets_the_runtime_environment(binder_env: Path, tmp_path: Path) -> None:
    start = BINDER / "start"
    assert os.access(start, os.X_OK), "binder/start must be executable"
    probe = "import json, os; print(json.dumps(dict(os.environ)))"
    python = str(binder_env / "bin" / "python")
    env = clean_env(tmp_path)

    on_hub = json.loads(
        run(
            [str(start), python, "-c", probe], 60, env={**env, "JUPYTERHUB_SERVICE_PREFIX": PREFIX}
        ).stdout
    )
    assert on_hub["PJRT_DEVICE"] == "CPU"
    assert on_hub["XPROF_MAGIC_PROXY_URL"] == f"{PREFIX}proxy/%PORT%/"

    local = json.loads(run([str(start), python, "-c", probe], 60, env=env).stdout)
    assert local["XPROF_MAGIC_PROXY_URL"] == "/proxy/%PORT%/"

    chosen = {**env, "PJRT_DEVICE": "TPU", "XPROF_MAGIC_PROXY_URL": "none"}
    kept = json.loads(run([str(start), python, "-c", probe], 60, env=chosen).stdout)
    assert (kept["PJRT_DEVICE"], kept["XPROF_MAGIC_PROXY_URL"]) == ("TPU", "none")


def outputs_text(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] == "error":
            parts.append("\n".join(output["traceback"]))
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def embedded_pages(notebook: Any) -> list[str]:
    """The XProf pages the widgets embed, from the widget state nbclient saved (the iframe
    ``src`` sits HTML-escaped twice inside the ``srcdoc`` of an HTML widget's value)."""
    state = html.unescape(html.unescape(json.dumps(notebook.metadata.get("widgets", {}))))
    url = r"[^\s\"'<>\\]+"
    return re.findall(rf"{re.escape(PREFIX)}proxy/\d+/{url}trace_viewer_index\.html\?{url}", state)


def check_proxied_viewer(binder_env: Path, home: Path, pages: list[str]) -> None:
    """The widget's page works through Binder's route: binder/start, then the environment's
    Jupyter server under the hub's base URL, then jupyter-server-proxy, then the viewer."""
    assert pages, f"no widget embeds a trace viewer under {PREFIX}proxy/"
    page = next((p for p in pages if "quickstart-train" in unquote(p)), pages[0])
    data = parse_qs(urlsplit(page).query)["trace_data_url"][0]
    base = {**clean_env(home), "JUPYTERHUB_SERVICE_PREFIX": PREFIX}
    server = start_jupyterlab(
        home / "server",
        base_env=base,
        python=str(binder_env / "bin" / "python"),
        launcher=[str(BINDER / "start")],
        base_url=PREFIX,
    )
    try:
        status, body = server.request("GET", page, timeout=60)
        assert status == 200 and b"Trace Viewer" in body, f"{page}: HTTP {status} {body[:300]!r}"
        status, body = server.request("GET", data, timeout=60)
        assert status == 200, f"{data}: HTTP {status} {body[:300]!r}"
        names = {e.get("name") for e in json.loads(body).get("traceEvents", [])}
        assert {"forward", "backward"} <= names, f"labels missing from {data}: {sorted(names)}"
    finally:
        server.stop()


def test_quickstart_runs_in_the_binder_environment(binder_env: Path, tmp_path: Path) -> None:
    python = str(binder_env / "bin" / "python")
    env = {**isolated(tmp_path, clean_env(tmp_path)), "JUPYTERHUB_SERVICE_PREFIX": PREFIX}
    work = tmp_path / "work"
    work.mkdir()
    notebook = nbformat.read(str(QUICKSTART), as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(ENV_PROBE))
    notebook.cells.append(nbformat.v4.new_code_cell(INSTALL_PROBE))
    source, executed = work / "quickstart.ipynb", ARTIFACTS / "binder-quickstart.ipynb"
    ARTIFACTS.mkdir(exist_ok=True)
    nbformat.write(notebook, str(source))
    arguments = [str(source), str(executed), str(work), str(NOTEBOOK_TIMEOUT_S)]
    try:
        run(
            [str(BINDER / "start"), python, "-c", RUNNER, *arguments],
            NOTEBOOK_TIMEOUT_S + 120,
            cwd=work,
            env=env,
        )
        result = nbformat.read(str(executed), as_version=4)
        cells = [c for c in result.cells if c.cell_type == "code"]
        texts = [outputs_text(c) for c in cells]
        everything = "\n".join(texts)
        assert not any(o["output_type"] == "error" for c in cells for o in c.outputs), everything

        seen = json.loads(texts[0].split("ENV=", 1)[1].splitlines()[0])
        assert seen == {"PJRT_DEVICE": "CPU", "XPROF_MAGIC_PROXY_URL": f"{PREFIX}proxy/%PORT%/"}
        assert f"PREFIX={binder_env}" in texts[0]
        assert f"PACKAGE={binder_env}" in texts[-1], "the kernel imported another xprof_magic"
        for run_name in ("quickstart-train", "quickstart-eval"):
            assert f"xprof: run {run_name} (ok)" in everything, everything
            run_dir = tmp_path / "logs" / "plugins" / "profile" / run_name
            assert list(run_dir.glob("*.xplane.pb")), f"no capture in {run_dir}"
        check_proxied_viewer(binder_env, tmp_path, embedded_pages(result))
    finally:
        stopped = stop_viewers(env, python)
        left = leftover_processes(tmp_path)
        for line in left:
            os.kill(int(line.split(":", 1)[0]), 9)
        assert not left, f"still running after the test ({stopped}):\n" + "\n".join(left)
