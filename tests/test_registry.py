"""A fourth backend added by its registry entry alone, and run through the whole magic.

``fakeprof`` is a profiler that does not exist: a module this test writes, whose backend
traces through JAX's real profiler (so the run holds a real timeline) and counts its own
"builds". Its backend is built on the shared skeleton (:mod:`xprof_magic._backends.base`);
its words, detection rule and capabilities are one :class:`~xprof_magic._backends.registry.Entry`.
Nothing else changes: not the plan, not the magic's options, not the capture, not the
analysis. ``%%xprof --backend fake`` and ``--backend auto`` (by the entry's own rule) must
then commit a run whose metadata names it and whose summary speaks its words.
"""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

import xprof_magic
from tests.conftest import only_run, run
from xprof_magic._backends import (
    Backend,
    CaptureWords,
    Headings,
    MetricNames,
    MetricsSnapshot,
    Vocabulary,
)
from xprof_magic._backends import registry as _registry
from xprof_magic._backends.base import ProfilerBackend
from xprof_magic._backends.words import Advice
from xprof_magic._runs import store as _store

FAKEPROF = """
builds = 0
flushes = 0


def build():
    global builds
    builds += 1


def flush():
    global flushes
    flushes += 1
"""

WORDS = Vocabulary(
    backend="fake",
    metrics=MetricNames(compile_time="FakeBuildTime", compile_cache_hits="FakeBuildReused"),
    headings=Headings(metrics="Fakeprof's builds, this cell only"),
    advice=Advice(cpu_device="Fakeprof ran on the CPU: its times say nothing of a fake chip."),
    capture=CaptureWords(stop_trace="fakeprof.stop()", sync_label="fakeprof.flush() (--sync)"),
)


class FakeBackend(ProfilerBackend):
    """``fakeprof``'s backend: JAX's profiler traces, fakeprof's module counts the builds."""

    name = "fake"
    server = "fakeprof's server"
    packages = ("jax", "xprof")

    def __init__(self) -> None:
        import jax.profiler
        from jax._src import profiler

        super().__init__(profiler)
        self._jax = jax.profiler

    def _serve(self, port: int) -> None:
        raise AssertionError("the in-process tests start no server")

    def _start(self, log_dir: str) -> None:
        options = self._jax.ProfileOptions()
        options.python_tracer_level = 0
        self._jax.start_trace(log_dir, profiler_options=options)

    def _stop(self) -> None:
        self._jax.stop_trace()

    def event(self, name: str, **stats: Any) -> AbstractContextManager[Any]:
        event: AbstractContextManager[Any] = self._jax.TraceAnnotation(name, **stats)
        return event

    def wait_for_device(self) -> None:
        """Nothing runs apart from the host."""

    def runtime_started(self) -> bool:
        return True

    def sync(self) -> None:
        import fakeprof

        fakeprof.flush()

    def metrics(self) -> MetricsSnapshot:
        import fakeprof

        builds: int = fakeprof.builds
        return MetricsSnapshot(
            counters={"FakeBuildReused": max(builds - 1, 0)},
            metrics={"FakeBuildTime": (builds, builds * 0.25)},
        )

    def device(self) -> str:
        return "CPU"


def _create() -> Backend:
    return FakeBackend()


ENTRY = _registry.Entry(
    "fake",
    _create,
    lambda: WORDS,
    _registry.Detection(packages=("fakeprof",)),
)

CELL = "import fakeprof\nfor i in range(3):\n    fakeprof.build()\n"


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: _registry.Entry) -> None:
    """``fakeprof`` installed and ``entry`` registered as its backend, for this test only."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "fakeprof.py").write_text(FAKEPROF)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "fakeprof", raising=False)
    monkeypatch.setitem(_registry.BACKENDS, "fake", entry)
    monkeypatch.setattr(_registry, "_loaded", dict(_registry._loaded))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fakeprof`` installed and its backend registered, for this test only."""
    install(tmp_path, monkeypatch, ENTRY)


def _check_run(logdir: Path) -> None:
    """The run is committed, its metadata names the fake, its summary speaks its words."""
    info = only_run(logdir)
    meta = json.loads((info.path / _store.METADATA_FILE).read_text())
    assert meta["backend"] == "fake" and meta["status"] == "ok"
    assert meta["metrics"]["metrics"]["FakeBuildTime"] == {"count": 3, "total_s": 0.75}
    assert info.hosts, "the run holds no timeline"
    out = xprof_magic.summary_text(xprof_magic.summarize(info.path))
    assert (
        "Fakeprof's builds, this cell only:\n  compilations: 3 × 750.0 ms (2 cache hits)" in out
    ), out
    assert "! Fakeprof ran on the CPU" in out, out
    assert "for i in range(3)" in out, out  # a label, read from the fake's timeline


def test_a_backend_added_by_its_entry_alone_captures_a_cell(
    ip: Any, logdir: Path, fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(ip, logdir, CELL, "--backend fake --sync")
    out = capsys.readouterr().out
    assert result.success, out
    _check_run(logdir)
    meta = json.loads((only_run(logdir).path / _store.METADATA_FILE).read_text())
    assert ["fakeprof.flush() (--sync)"] in [label["path"] for label in meta["labels"]]
    assert ip.user_ns["fakeprof"].flushes == 1


def test_auto_picks_the_added_backend_by_its_own_rule(
    ip: Any, logdir: Path, fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(ip, logdir, CELL)
    out = capsys.readouterr().out
    assert result.success, out
    _check_run(logdir)


def test_without_its_entry_the_backend_is_no_choice(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not run(ip, logdir, "y = 1", "--backend fake").success
    said = capsys.readouterr()
    assert "invalid choice: 'fake'" in said.out + said.err
