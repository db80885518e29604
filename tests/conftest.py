"""Shared fixtures: torch_xla on the CPU, an in-process IPython shell, log directories, and
for the browser tests a JupyterLab and a Chromium (one of each per test module)."""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# In-process tests share one process, so one profiler server at most: tests that need it
# run in kernels of their own.
os.environ["XPROF_MAGIC_NO_SERVER"] = "1"

# TorchTPU's libtpu would ask the cloud metadata server who this machine is; these say it
# first, for every test process where TorchTPU is installed (.venv-torchtpu).
TPU_NO_METADATA = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v6e-1",
    "TPU_WORKER_ID": "0",
    "TPU_WORKER_HOSTNAMES": "localhost",
}
if importlib.util.find_spec("torch_tpu") is not None:
    os.environ.update(TPU_NO_METADATA)

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
STRICT_ENV = "XPROF_MAGIC_TESTS_STRICT"


def missing(reason: str) -> NoReturn:
    """A test's prerequisite is absent. ``make test`` provides every one (and sets
    ``XPROF_MAGIC_TESTS_STRICT=1``), so there it is a failure; a bare ``pytest`` skips."""
    if os.environ.get(STRICT_ENV) == "1":
        pytest.fail(f"{reason} ({STRICT_ENV}=1: `make test` provides it)")
    pytest.skip(reason)


def on_colab_stack() -> bool:
    """Whether this is Colab's pinned notebook stack (ipywidgets 7, classic Notebook 6), as
    in .venv-colab."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ipywidgets").startswith("7.") and version("notebook").startswith("6.")
    except PackageNotFoundError:
        return False


def on_torchtpu_stack() -> bool:
    """Whether TorchTPU is installed, as in .venv-torchtpu."""
    return importlib.util.find_spec("torch_tpu") is not None


# marimo belongs to the newest stack only (the `marimo` extra); Colab's pinned stack has
# none, and runs none of these files' tests, so it does not import them.
collect_ignore = (
    ["test_marimo_view.py", "test_marimo_quickstart.py", "test_browser_marimo.py"]
    if on_colab_stack()
    else []
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``pinned`` run on Colab's stack only, those marked ``torchtpu`` where
    TorchTPU is installed only; elsewhere they say where they run."""
    skips = []
    if not on_colab_stack():
        reason = "needs Colab's pinned stack: `make test` runs it in .venv-colab"
        skips.append(("pinned", pytest.mark.skip(reason=reason)))
    if not on_torchtpu_stack():
        reason = "needs TorchTPU: `make test` runs it in .venv-torchtpu"
        skips.append(("torchtpu", pytest.mark.skip(reason=reason)))
    for item in items:
        for marker, skip in skips:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


GPU_DATA = Path(__file__).resolve().parent / "data" / "gpu-h200"
GPU_RUNS = sorted(p.name for p in GPU_DATA.iterdir() if p.is_dir())
"""The runs stored from real JAX loops on an H200 (``data/gpu-h200``, ``data/NOTICE.md``)."""


@pytest.fixture(scope="session")
def gpu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """Each stored GPU run unpacked as the magic stores a run, and its summary, once for
    every test that reads them."""
    import shutil

    import xprof_magic

    into = tmp_path_factory.mktemp("gpu")
    found = {}
    for name in GPU_RUNS:
        folder = into / "plugins" / "profile" / name
        folder.mkdir(parents=True)
        shutil.copy(GPU_DATA / name / "xprof_magic.json", folder)
        packed = (GPU_DATA / name / "vm.xplane.pb.gz").read_bytes()
        (folder / "vm.xplane.pb").write_bytes(gzip.decompress(packed))
        found[name] = (folder, xprof_magic.summarize(folder))
    return found


class FakeEvent:
    """A profiler event that logs when it opens and closes, to check nesting and what was
    recorded (closing records it) without a profiler. Reset ``FakeEvent.log`` before use."""

    log: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def __init__(self, name: str, **stats: Any) -> None:
        self.name, self.stats = name, stats

    def __enter__(self) -> None:
        FakeEvent.log.append(("open", self.name, self.stats))

    def __exit__(self, *exc: object) -> None:
        FakeEvent.log.append(("close", self.name, self.stats))


@pytest.fixture(scope="session", autouse=True)
def private_viewers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Viewers started by the tests record themselves in a private folder, and are all
    stopped at the end, so no test run leaves a server behind."""
    folder = tmp_path_factory.mktemp("viewers")
    os.environ["XPROF_MAGIC_VIEWER_DIR"] = str(folder)
    # Kernels started by the tests keep their history out of the user's ~/.ipython.
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    yield folder
    from xprof_magic._viewer.process import manager as _viewer

    for viewer in _viewer.list_viewers():
        _viewer.stop_viewer(viewer)


@pytest.fixture(scope="session")
def ip() -> Any:
    """One in-process IPython shell with the extension loaded."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    assert shell is not None
    shell.run_line_magic("load_ext", "xprof_magic")
    return shell


@contextlib.contextmanager
def names_of(ip: Any, code: str) -> Iterator[None]:
    """``code`` run in the shared shell for a module's tests, its names taken away after:
    later tests' ``--backend auto`` must not find them."""
    before = dict(ip.user_ns)
    assert ip.run_cell(code).success
    try:
        yield
    finally:
        for name in set(ip.user_ns) - set(before):
            del ip.user_ns[name]
        ip.user_ns.update(before)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Any]:
    """A real kernel (ipykernel through jupyter_client) with the extension, torch and torch_xla
    loaded and no profiler server; one per test module."""
    from tests._kernel import Kernel

    k = Kernel(extra={"XPROF_MAGIC_NO_SERVER": "1"})
    content, _ = k.run("%load_ext xprof_magic\nimport torch, torch_xla")
    assert content["status"] == "ok"
    yield k
    k.close()


@pytest.fixture
def logdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "logs"


def trace_events(run_dir: Path) -> list[dict[str, Any]]:
    """The events of the Chrome-trace JSON that the profiler writes beside the xplane."""
    (path,) = run_dir.glob("*.trace.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events: list[dict[str, Any]] = data["traceEvents"]
    return events


def event_names(run_dir: Path) -> set[str]:
    return {e.get("name", "") for e in trace_events(run_dir)}


def run(ip: Any, logdir: Path, body: str, options: str = "") -> Any:
    """Run ``body`` as a ``%%xprof`` cell (no display) in the in-process shell."""
    return ip.run_cell(f"%%xprof --logdir {logdir} --no-display {options}\n{body}")


def only_run(logdir: Path) -> Any:
    """The one run in ``logdir``."""
    from xprof_magic._runs import store as _store

    (found,) = _store.runs(logdir)
    return found


def host_events(run_dir: Path) -> list[Any]:
    """Every event on the host's lines of the run's xplane, through XProf's own reader."""
    from xprof.profile_data import ProfileData

    (path,) = run_dir.glob("*.xplane.pb")
    data = ProfileData.from_file(str(path))
    return [
        event
        for plane in data.planes
        if plane.name.startswith("/host:")
        for line in plane.lines
        for event in line.events
    ]


def step_numbers(run_dir: Path, name: str = "step") -> list[int]:
    """The ``step_num`` of each XProf step marker (``_r=1``) named ``name``."""
    found = []
    for event in host_events(run_dir):
        stats = dict(event.stats)
        if event.name == name and str(stats.get("_r")) == "1":
            found.append(int(stats["step_num"]))
    return sorted(found)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real JupyterLab in a home of its own, for the module's browser tests."""
    from tests._notebook_servers import shut_down, start_jupyterlab

    home = tmp_path_factory.mktemp("jupyterlab")
    server = start_jupyterlab(home)
    try:
        yield server
    finally:
        shut_down(server, home)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's Chromium through Playwright, on a profile of its own."""
    from tests._browser import launch_chromium

    with launch_chromium(tmp_path_factory.mktemp("chromium-home")) as launched:
        yield launched
