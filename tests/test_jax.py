"""The JAX backend, with real JAX on the CPU: the rewrite and labels, steps and windows,
waiting for the device, compile counts and recompiles, and the choice of backend."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import jax
import pytest

import xprof_magic
from tests._agreement import figures_agree
from tests._said import worded
from tests.conftest import host_events, only_run, run, step_numbers
from xprof_magic._analysis import render_text, summarize
from xprof_magic._backends.detect import choose_backend
from xprof_magic._backends.registry import get_backend, get_vocabulary
from xprof_magic._cell import labels as _labels
from xprof_magic._cell.markers import find_markers
from xprof_magic._cell.rewrite import rewrite
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store

TRAIN = """
import jax, jax.numpy as jnp

@jax.jit
def train_step(w, x, y):
    loss = lambda w: jnp.mean((x @ w - y) ** 2)
    return w - 0.1 * jax.grad(loss)(w)

x = jnp.ones((16, 4)); y = jnp.ones((16,)); w = jnp.zeros(4)
for i in range(6):
    # xprof: update
    w = train_step(w, x, y)
wide = train_step(jnp.zeros(8), jnp.ones((16, 8)), y)
float(w.sum())
"""


def test_labels_become_trace_annotations_with_the_statements_and_markers(tmp_path: Path) -> None:
    backend = get_backend("jax")
    source = "a = 1\nfor i in range(2):\n    # xprof: inner\n    b = i\n"
    tree = rewrite(ast.parse(source), source.splitlines(), markers=find_markers(source))
    recorder = _labels.Recorder(backend.event)
    backend.start_trace(str(tmp_path))
    try:
        with _labels.recording(recorder):
            exec(compile(tree.tree, "<cell>", "exec"), {})
    finally:
        backend.stop_trace()
    (session,) = (tmp_path / "plugins" / "profile").iterdir()
    names = [event.name for event in host_events(session)]
    assert names.count("inner") == 2
    assert {"a = 1", "for i in range(2)"} <= set(names)
    paths = [label.path for label in recorder.labels()]
    assert ("a = 1",) in paths
    assert ("for i in range(2)", "inner") in paths
    assert next(la for la in recorder.labels() if la.path[-1] == "inner").count == 2


def test_a_steps_cell_keeps_its_value_labels_steps_and_flags_the_recompile(
    ip: Any, logdir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    result = run(ip, logdir, TRAIN, "--steps --backend jax --name train")
    assert result.success, result.error_in_exec
    assert result.result == pytest.approx(float(ip.user_ns["w"].sum()))
    run_dir = only_run(logdir).path
    meta = _metadata.read(run_dir)
    assert meta is not None
    assert (meta.backend, meta.device, meta.step_rule) == ("jax", "CPU", "iteration")
    assert "jax" in meta.versions
    assert len(meta.steps) == 6
    assert step_numbers(run_dir) == list(range(6))
    names = {event.name for event in host_events(run_dir)}
    assert {
        "for i in range(6)",
        "update",
        "wide = train_step(jnp.zeros(8), jnp.ones((16, 8)), y)",
    } <= names
    assert meta.metrics.metrics["compile:jit(train_step)"].count == 2
    summary = summarize(run_dir)
    assert any("train_step" in name for name, _, _ in summary.compiles.functions)
    # JAX's own dispatch and compile events are runtime, not blocks of the user's
    blocks = {part for row in summary.labels for part in row.path}
    assert "update" in blocks
    sites = {site.path[-1]: site for site in summary.compiles.sites}
    assert sites["update"].compiled_runs == 1 and not sites["update"].recompiled
    assert not [b for b in blocks if b.startswith("PjitFunction") or b == "shard_args"]
    text = render_text(summary)
    assert "compiled: jit(train_step) ×2" in text
    assert "Recompiled: jit(train_step) compiled 2 times in this cell" in text
    assert "different input types" in text and "now f32[8] and before f32[4]" in text
    assert not jax.config.jax_explain_cache_misses
    out = capsys.readouterr()
    assert "CACHE MISS" not in out.out + out.err
    assert not [r for r in caplog.records if "CACHE MISS" in r.getMessage()]


def test_a_function_compiled_once_is_named_and_not_flagged(ip: Any, logdir: Path) -> None:
    body = "import jax, jax.numpy as jnp\nonce = jax.jit(lambda v: v * 3)\nonce(jnp.ones(5))\n"
    assert run(ip, logdir, body, "--backend jax").success
    summary = summarize(only_run(logdir).path)
    assert [(name, count) for name, count, _ in summary.compiles.functions] == [
        ("jit(<lambda>)", 1)
    ]
    assert "Recompiled" not in render_text(summary)


def test_a_window_traces_just_its_iterations(ip: Any, logdir: Path) -> None:
    body = (
        "import jax, jax.numpy as jnp\n"
        "step_fn = jax.jit(lambda v: v @ v / 4)\n"
        "v = jnp.ones((8, 8))\n"
        "for i in range(12):\n"
        "    v = step_fn(v)\n"
    )
    assert run(ip, logdir, body, "--steps 5:8 --backend jax").success
    run_dir = only_run(logdir).path
    assert step_numbers(run_dir) == [5, 6, 7]
    meta = _metadata.read(run_dir)
    assert meta is not None
    assert (meta.step_window, meta.steps_first, meta.step_rule) == ("5:8", 5, "iteration")


def test_errors_are_the_cells_own_and_the_run_is_kept(ip: Any, logdir: Path) -> None:
    body = "import jax.numpy as jnp\nz = jnp.ones(3) + 1\nraise ValueError('bad shape')\n"
    result = run(ip, logdir, body, "--backend jax")
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "bad shape"
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None and meta.status == "error"


def test_the_listener_is_registered_for_the_capture_only(ip: Any, logdir: Path) -> None:
    from jax._src import monitoring

    before = list(monitoring.get_event_duration_listeners())
    assert run(ip, logdir, "import jax\njax.jit(lambda v: v + 2)(1.0)\n", "--backend jax").success
    assert list(monitoring.get_event_duration_listeners()) == before
    backend = get_backend("jax")
    counted = backend.metrics()
    jax.jit(lambda v: v - 7)(1.0)
    assert backend.metrics() == counted


def test_waiting_for_the_device_covers_arrays_bound_to_names() -> None:
    import jax.numpy as jnp

    backend = get_backend("jax")
    big = jnp.ones((256, 256)) @ jnp.ones((256, 256))
    backend.wait_for_device()
    assert big.is_ready()


@pytest.mark.parametrize(
    ("cell", "namespace", "expected"),
    [
        ("import jax.numpy as jnp\nx = jnp.ones(2)", {}, "jax"),
        ("from torch_xla.core import xla_model as xm", {}, "torch_xla"),
        ("y = jnp.ones(2)", {"jnp": jax.numpy}, "jax"),
        ("y = f(2)", {"f": jax.jit(abs)}, "jax"),
        ("y = 1", {"jax": jax}, "jax"),
    ],
)
def test_auto_picks_the_framework_the_user_chose(
    cell: str, namespace: dict[str, Any], expected: str
) -> None:
    assert choose_backend(cell, namespace) == (expected, "")


def test_auto_says_how_to_pick_when_both_frameworks_are_in_use() -> None:
    import types

    torch_xla = types.ModuleType("torch_xla")
    backend, message = choose_backend("y = 1", {"jax": jax, "torch_xla": torch_xla})
    assert backend == "torch_xla"
    assert "--backend jax" in message


def test_auto_on_plain_python_is_silent() -> None:
    assert choose_backend("!echo hi\ny = 1", {"np": ast}) == ("torch_xla", "")


def test_a_cell_importing_jax_after_torch_xla_cells_uses_jax(ip: Any, logdir: Path) -> None:
    ip.run_cell("import torch_xla")
    assert run(ip, logdir, "import jax.numpy as jnp\nq = jnp.ones(2) * 2").success
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None and meta.backend == "jax"


def test_the_vocabulary_names_no_torch_xla() -> None:
    words = get_vocabulary("jax")
    assert words.backend == "jax"
    assert "torch" not in repr(words).lower()


def test_iterating_over_arrays_is_no_recompile(ip: Any, logdir: Path) -> None:
    body = (
        "import jax.numpy as jnp\n"
        "rows = [r for r in jnp.ones((3, 2))] + [r for r in jnp.ones((4, 5))]\n"
        "cols = jnp.ones(3) + 1\n"
        "cols = jnp.ones(4) + 1\n"
    )
    assert run(ip, logdir, body, "--backend jax").success
    summary = summarize(only_run(logdir).path)
    assert summary.compiles.count and summary.compiles.count >= 2
    assert "Recompiled" not in render_text(summary)


# A real kernel with both frameworks loaded, as on Colab.


@pytest.mark.kernel
def test_a_kernel_with_both_frameworks_profiles_each_cell_with_its_own(tmp_path: Path) -> None:
    import os

    from tests._kernel import Kernel

    kernel = Kernel({**os.environ, "XPROF_MAGIC_NO_SERVER": "1"})
    try:
        reply, _ = kernel.run("%load_ext xprof_magic\nimport torch, torch_xla")
        assert reply["status"] == "ok"
        reply, outputs = kernel.run(
            f"%%xprof --logdir {tmp_path} --name torch --no-display\n"
            "t = torch.ones(3, device=torch_xla.device())\n"
            "float((t * 2).sum())"
        )
        assert reply["status"] == "ok", outputs
        reply, outputs = kernel.run(
            f"%%xprof --logdir {tmp_path} --name jax --no-display --steps" + TRAIN
        )
        assert reply["status"] == "ok", outputs
        shown = "".join(o.get("text", "") for o in outputs if o["type"] == "stream")
        assert "6 steps" in shown
        assert "could be profiled with" not in shown
        (value,) = [o["data"]["text/plain"] for o in outputs if o["type"] == "execute_result"]
        assert kernel.value("float(w.sum())") == pytest.approx(float(value))
        reply, outputs = kernel.run("%xprof summary jax")
        summary = "".join(
            o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in outputs
        )
        assert "Recompiled: jit(train_step) compiled 2 times" in summary, summary
        reply, outputs = kernel.run(
            f"%%xprof --logdir {tmp_path} --name broken --no-display\n"
            "v = jnp.ones(2)\nv @ jnp.ones(3)"
        )
        assert reply["status"] == "error" and reply["ename"] == "TypeError"
    finally:
        kernel.close()
    backends = {run.name: (run.metadata or {}).get("backend") for run in _store.runs(tmp_path)}
    assert backends == {"torch": "torch_xla", "jax": "jax", "broken": "jax"}


@pytest.mark.kernel
def test_jax_quickstart_notebook_executes(tmp_path: Path) -> None:
    import os

    import nbformat
    from nbclient import NotebookClient

    notebook = Path(__file__).resolve().parent.parent / "notebooks" / "jax_quickstart.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    os.environ["XPROF_MAGIC_LOGDIR"] = str(tmp_path)
    try:
        NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        del os.environ["XPROF_MAGIC_LOGDIR"]
    meta = _store.read_metadata(tmp_path / "plugins" / "profile" / "jax-train") or {}
    assert (meta["backend"], len(meta["steps"])) == ("jax", 8)
    paths = {tuple(label["path"]) for label in meta["labels"]}
    assert ("for x, y in zip(inputs, targets)", "step") in paths
    shown = "".join(
        output.get("text", "") or output.get("data", {}).get("text/plain", "")
        for cell in nb.cells
        for output in cell.get("outputs", [])
    )
    assert "Recompiled: jit(train_step)" in shown
    # The verdict is the loop's steady steps', not the wider batch's compile after the loop:
    # that one is named apart at its own line, and no step absorbs it.
    s = xprof_magic.summarize(tmp_path / "plugins" / "profile" / "jax-train")
    d = worded(s)
    assert s.steps is not None and d.scope == "steps"
    assert d.verdict != "compile" or d.cause != "warm-up", d.headline
    assert [round(x.total_s, 9) for x in d.breakdown.steps] == [
        round(x, 9) for x in s.steps.durations_s
    ]
    wider = next(a for a in d.breakdown.outside if a.path == ("wider batch",))
    assert wider.category == "compile", d.breakdown.outside
    if wider.seconds >= 0.2 * d.breakdown.total_s(of_steps=False):
        assert "Outside the steps, `wider batch` (line 5)" in d.headline, d.headline
    assert max(s.steps.durations_s[1:]) < wider.seconds / 10
    window = s.verdict_window()
    assert window is not None and window[1] <= s.steps.starts_s[-1] + s.steps.durations_s[-1]
    # One number per thing, the text printed under the cell included; the steps after the
    # first are measured, each its own (not one share of the device's time each).
    figures_agree(s, shown)
    assert not s.steps.estimated and len(set(s.steps.durations_s[1:])) > 1


def test_a_marker_inside_a_jitted_function_labels_its_tracing_only(ip: Any, logdir: Path) -> None:
    body = (
        "import jax, jax.numpy as jnp\n"
        "@jax.jit\n"
        "def scaled(v):\n"
        "    # xprof: inside jit\n"
        "    return v * 3\n"
        "for _ in range(3):\n"
        "    out = scaled(jnp.ones(4))\n"
        "out.sum()\n"
    )
    result = run(ip, logdir, body, "--backend jax")
    assert result.success and float(result.result) == 12.0
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None
    (inside,) = [label for label in meta.labels if label.path[-1] == "inside jit"]
    assert inside.count == 1


def test_the_users_step_markers_win(ip: Any, logdir: Path) -> None:
    body = (
        "import jax, jax.numpy as jnp\n"
        "for n in range(3):\n"
        "    with jax.profiler.StepTraceAnnotation('mine', step_num=10 + n):\n"
        "        jnp.ones(3).block_until_ready()\n"
    )
    assert run(ip, logdir, body, "--steps --backend jax").success
    run_dir = only_run(logdir).path
    meta = _metadata.read(run_dir)
    assert meta is not None and meta.step_rule == "user"
    assert step_numbers(run_dir) == []
    marked = sorted(
        int(dict(e.stats)["step_num"]) for e in host_events(run_dir) if e.name == "mine"
    )
    assert marked == [10, 11, 12]


def test_a_user_who_asked_for_explanations_still_sees_them(
    ip: Any, logdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = "import jax, jax.numpy as jnp\ng = jax.jit(lambda v: v + 1)\n"
    body += "g(jnp.ones(2))\ng(jnp.ones(3))\n"
    jax.config.update("jax_explain_cache_misses", True)
    try:
        assert run(ip, logdir, body, "--backend jax").success
        assert jax.config.jax_explain_cache_misses
    finally:
        jax.config.update("jax_explain_cache_misses", False)
    assert [r for r in caplog.records if "TRACING CACHE MISS" in r.getMessage()]
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None
    assert any("now f32[3] and before f32[2]" in note for note in meta.metrics.notes)


def test_a_recompile_after_an_earlier_cell_is_flagged_with_its_reason(
    ip: Any, logdir: Path
) -> None:
    ip.run_cell("import jax, jax.numpy as jnp\nhalf = jax.jit(lambda v: v / 2)\nhalf(jnp.ones(2))")
    assert run(ip, logdir, "half(jnp.ones(7))", "--backend jax").success
    text = render_text(summarize(only_run(logdir).path))
    assert "Recompiled: jit(<lambda>) compiled again after an earlier cell" in text
    assert "now f32[7] and before f32[2]" in text


def test_hits_of_the_persistent_compilation_cache_are_counted(
    ip: Any, logdir: Path, tmp_path: Path
) -> None:
    from jax._src import compilation_cache

    options = {
        "jax_compilation_cache_dir": str(tmp_path / "cache"),
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": -1,
    }
    before = {name: getattr(jax.config, name) for name in options}
    for name, value in options.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()
    try:
        body = "cached = jax.jit(lambda v: v * 5 + 1)\ncached(jnp.ones(3)).block_until_ready()\n"
        ip.run_cell("import jax, jax.numpy as jnp\n" + body)
        ip.run_cell("jax.clear_caches()")
        assert run(ip, logdir, body, "--backend jax").success
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()
    summary = summarize(only_run(logdir).path)
    assert summary.compiles.cache_hits is not None and summary.compiles.cache_hits >= 1
    assert "cache hits)" in render_text(summary)


def test_without_function_names_the_reason_still_flags_the_recompile(ip: Any, logdir: Path) -> None:
    import dataclasses

    from xprof_magic._analysis.render.notes import notes_for

    assert run(ip, logdir, "import jax\njax.jit(lambda v: v * 4)(2.0)", "--backend jax").success
    summary = summarize(only_run(logdir).path)
    assert not [n for n in notes_for(summary, get_vocabulary("jax")) if "Recompiled" in n.text]
    older = dataclasses.replace(
        summary,
        compiles=dataclasses.replace(
            summary.compiles, functions=(), reasons=(("step", "different input types"),)
        ),
    )
    texts = [note.text for note in notes_for(older, get_vocabulary("jax"))]
    assert "Recompiled: step compiled again: different input types." in texts
