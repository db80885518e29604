"""Forked workers for a big capture's lines (``timeline/forks.py``): only where forking is safe.

A process with one thread (the summary's own, started with ``cache.SUMMARY_PROCESS_ENV``)
forks children that read some of a plane's lines; the facts must equal the one-process
pass's to the last bit, and a child that fails, dies or hangs costs time only. A process
with another thread never forks. The forking runs in a fresh interpreter of its own: this
test runner holds threads.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from xprof_magic._analysis.cache import SUMMARY_PROCESS_ENV
from xprof_magic._analysis.timeline import forks, pool
from xprof_magic._analysis.timeline.read import read_trace

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "gpu-h200" / "gpu_shapes"
"""A stored H200 run whose host plane has 38 lines."""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("forks") / "plugins" / "profile" / RUN.name
    folder.mkdir(parents=True)
    shutil.copy(RUN / "xprof_magic.json", folder)
    (folder / "vm.xplane.pb").write_bytes(gzip.decompress((RUN / "vm.xplane.pb.gz").read_bytes()))
    return folder


_SCRIPT = """
import os, resource, sys
from dataclasses import replace
from pathlib import Path

from xprof_magic._analysis import summarize
from xprof_magic._analysis.timeline import forks, parallel, pool
from xprof_magic._analysis.timeline.read import read_trace

run, child = Path(sys.argv[1]), sys.argv[2]
assert forks.safe(), os.listdir("/proc/self/task")
path = next(run.glob("*.xplane.pb"))
os.environ[pool.WORKERS_ENV] = "0"
alone, whole = read_trace(path), summarize(run, budget_s=None)
# Every line of 1 byte or more may go to the child, a Python thread's too.
os.environ[pool.WORKERS_ENV] = "1"
pool.LINE_MIN_BYTES = 0
names = []
parallel.thread_group = lambda name: names.append(name) or "tf_pool"
parent, here = os.getpid(), []
read_part = parallel._read_part

def recorded(lines, index, settings):
    if os.getpid() == parent:
        here.append(index)
    else:  # the child, as the test asks it to behave
        if child == "fails":
            raise RuntimeError("a child that fails")
        if child == "dies":
            os._exit(3)
        if child == "hangs":
            import time
            time.sleep(60)
    return read_part(lines, index, settings)

parallel._read_part = recorded
pool.ANSWER_S = 2.0
helped = read_trace(path)
assert helped == alone, "the facts differ from the one-process pass"
assert names and all(names), "the lines' names were not read before their events"
lines = len(set(here))
here.clear()
assert replace(summarize(run, budget_s=None), read_s=0) == replace(whole, read_s=0)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
assert kids.ru_utime + kids.ru_stime > 0, "no child ran"
print(lines)
"""


def _forked(run_dir: Path, child: str) -> int:
    """The lines the parent read itself when its child (one) behaves as ``child`` says."""
    env = {**os.environ, **SUMMARY_PROCESS_ENV, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT), str(run_dir), child],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def test_the_summarys_own_process_may_fork() -> None:
    # As cache.summarize_in_subprocess starts it: the package imported, one thread.
    env = {**os.environ, **SUMMARY_PROCESS_ENV, "PYTHONPATH": str(ROOT)}
    code = (
        "import xprof_magic._analysis.stages\n"
        "from xprof_magic._analysis.timeline import forks\n"
        "print(forks.safe())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["True"], done.stderr[-2000:]


def test_a_forked_child_reads_lines_and_the_facts_add_up_the_same(run_dir: Path) -> None:
    here = _forked(run_dir, "reads")
    assert 0 < here < 38, "the child read none of the lines, or all of them"


@pytest.mark.parametrize("child", ["fails", "dies", "hangs"])
def test_a_child_that_gives_no_answer_costs_time_not_the_result(run_dir: Path, child: str) -> None:
    assert _forked(run_dir, child) == 38, "the parent did not read the child's lines itself"


def test_a_process_with_another_thread_never_forks(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked: list[Any] = []
    monkeypatch.setattr(forks.os, "fork", lambda: forked.append(1) or 0)
    monkeypatch.setenv(pool.WORKERS_ENV, "1")
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not forks.safe()
        facts = read_trace(next(run_dir.glob("*.xplane.pb")))
    finally:
        release.set()
        other.join()
    monkeypatch.setenv(pool.WORKERS_ENV, "0")
    assert facts == read_trace(next(run_dir.glob("*.xplane.pb")))
    assert forked == []


def test_python_threads_lines_stay_and_the_biggest_go_to_children() -> None:
    mb = 1_000_000
    # The 100 MB bench capture's host lines: the Python thread's 5.7 MB line weighs four
    # times its bytes, the two 41 MB runtime lines go one here, one to the child, and the
    # smaller ones to the child, whose share is then the lighter.
    sizes = [57 * mb // 10, 405 * mb // 10, 409 * mb // 10, 5 * mb, 34 * mb // 10, mb // 2]
    here = [True, False, False, False, False, False]
    assert forks.assign(sizes, here, workers=1) == [-1, -1, 0, 0, 0, -1]
    assert forks.assign(sizes, here, workers=0) == [-1] * 6
    # Ties go to this process first: 41 MB here, then one line to each child.
    assert forks.assign([40 * mb, 41 * mb, 39 * mb], [False] * 3, workers=2) == [0, -1, 1]
