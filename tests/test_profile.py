"""``xprof_magic.profile``, in process, with real torch_xla and JAX on the CPU: a decorated
function keeps its value, names and errors and gets the magic's labels, steps and summary;
a ``with`` block is one run, and so is a script capture's ``start()`` … ``stop()`` by hand,
its cell the code between them; bad input is one line naming the fix."""

from __future__ import annotations

import asyncio
import re
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_xla

import xprof_magic
from tests.conftest import event_names, only_run, step_numbers
from tests.conftest import run as run_cell
from xprof_magic._analysis.summary.blocks import line_of
from xprof_magic._backends import TraceAlreadyRunning
from xprof_magic._cell.markers import find_markers
from xprof_magic._runs import metadata as _metadata

DEVICE = torch_xla.device()
SCALE = 2.0


def square_sum(n: int) -> float:
    x = torch.ones(4, 4, device=DEVICE) * SCALE
    for _ in range(n):
        # xprof: matmul
        x = (x @ x) / 4
        torch_xla.sync()
    return float(x.sum().item())


def test_a_profiled_function_returns_its_value_with_the_magics_labels_and_steps(
    logdir: Path,
) -> None:
    train = xprof_magic.profile(logdir=logdir, name="train", steps=True)(square_sum)
    assert train(3) == square_sum(3)
    assert train.__name__ == "square_sum" and train.__wrapped__ is square_sum
    run = train.run
    assert run is not None and run.result is not None and run.name == "train"
    info = only_run(logdir)
    assert info.name == "train" and run.result.run_dir == info.path
    names = event_names(info.path)
    assert {"x = torch.ones(4, 4, device=DEVICE) * SCALE", "for _ in range(n)", "matmul"} <= names
    assert "return float(x.sum().item())" in names
    assert step_numbers(info.path) == [0, 1, 2]
    paths = {stat.path: stat.count for stat in run.result.labels}
    assert paths[("for _ in range(n)", "matmul")] == 3
    meta = _metadata.read(info.path)
    assert meta is not None and meta.backend == "torch_xla" and meta.status == "ok"
    wanted = {"api": "profile", "logdir": str(logdir), "name": "train", "steps": True}
    assert wanted.items() <= meta.options.items()  # with the defaults, as the magic keeps them
    assert meta.step_rule == "sync"
    assert "xprof: run train (ok)" in repr(run) and "3 steps" in run.text()
    assert xprof_magic.last() is run.result


def test_the_function_sees_its_globals_live_and_keeps_defaults_and_closures(
    logdir: Path,
) -> None:
    global SCALE
    offset = 10

    @xprof_magic.profile(logdir=logdir)
    def shifted(a: float, *, b: float = 1.0) -> float:
        """Shift a by the closure's offset."""
        return a * SCALE + offset + b

    assert shifted(1.0) == 13.0 and shifted.__doc__ == "Shift a by the closure's offset."
    SCALE = 3.0
    try:
        assert shifted(1.0, b=0.0) == 13.0
    finally:
        SCALE = 2.0
    assert len(xprof_magic.runs(logdir)) == 2


def test_an_exception_reaches_the_caller_once_from_the_users_line_and_the_run_is_kept(
    logdir: Path,
) -> None:
    @xprof_magic.profile(logdir=logdir, name="fails")
    def fails() -> float:
        x = torch.ones(2, device=DEVICE).sum().item()
        return x / 0

    with pytest.raises(ZeroDivisionError) as raised:
        fails()
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert frames[-1].line == "return x / 0" and frames[-1].name == "fails"
    # Of the capture's own frames (the package's files, wherever the clone is), only the
    # call's re-raise is left.
    package = str(Path(xprof_magic.__file__).resolve().parent)
    own = [f.name for f in frames if str(Path(f.filename).resolve()).startswith(package + "/")]
    assert own == ["__call__"]
    meta = only_run(logdir).metadata or {}
    assert meta["status"] == "error"
    assert meta["error"] == {"type": "ZeroDivisionError", "message": "float division by zero"}


def test_a_step_window_traces_only_its_steps(logdir: Path) -> None:
    train = xprof_magic.profile(logdir=logdir, name="window", steps="1:3")(square_sum)
    assert train(5) == square_sum(5)
    info = only_run(logdir)
    assert step_numbers(info.path) == [1, 2]
    meta = _metadata.read(info.path)
    assert meta is not None and meta.step_window == "1:3"


def test_a_with_block_is_one_run_with_the_labels_it_opens(logdir: Path) -> None:
    with xprof_magic.profile(logdir=logdir, name="block") as run, xprof_magic.label("evaluate"):
        total = (torch.ones(3, device=DEVICE) * 2).sum().item()
    assert total == 6.0
    assert run.result is not None and run.name == "block"
    assert "evaluate" in event_names(run.result.run_dir)
    assert [s.path for s in run.result.labels] == [("evaluate",)]

    with pytest.raises(KeyError), xprof_magic.profile(logdir=logdir, name="broken") as broken:
        {}["missing"]
    assert broken.result is not None and broken.result.status == "error"


def test_the_summary_reads_the_function_at_its_own_lines_and_shows_as_static_html(
    logdir: Path,
) -> None:
    train = xprof_magic.profile(logdir=logdir, name="summary", steps=True)(square_sum)
    train(3)
    run = train.run
    assert run is not None and run.result is not None
    # The run keeps the function's first line in its file, so the summary's "line N" is the
    # line the user sees: here, the marker's.
    meta = run.result.metadata
    assert meta.cell_first_line == square_sum.__code__.co_firstlineno
    (marker,) = find_markers(meta.numbered_cell)
    lines = Path(__file__).read_text().splitlines()
    assert marker.name == "matmul" and lines[marker.line - 1].strip() == "# xprof: matmul"
    summary = run.summary
    assert summary is not None and summary.run == "summary" and summary.steps.count == 3
    assert line_of(summary.cell, ("matmul",)) == marker.line
    page = run._repr_html_()
    assert "xprof summary — run summary" in page


def test_a_profiled_function_inside_another_capture_adds_its_labels_there(logdir: Path) -> None:
    @xprof_magic.profile(logdir=logdir, name="inner")
    def inner() -> float:
        y = torch.ones(2, device=DEVICE) * 3
        return float(y.sum().item())

    @xprof_magic.profile(logdir=logdir, name="outer")
    def outer() -> float:
        first = inner()
        return first + inner()

    assert outer() == 12.0
    assert [r.name for r in xprof_magic.runs(logdir)] == ["outer"]
    assert inner.run is None
    assert outer.run is not None and outer.run.result is not None
    paths = {s.path: s.count for s in outer.run.result.labels}
    assert paths[("first = inner()", "y = torch.ones(2, device=DEVICE) * 3")] == 1
    assert paths[("return first + inner()", "return float(y.sum().item())")] == 1


def test_a_profiled_function_in_a_magic_cell_adds_its_labels_to_the_cells_run(
    ip: Any, logdir: Path
) -> None:
    ip.user_ns["profiled"] = xprof_magic.profile(logdir=logdir / "never", name="never")(square_sum)
    result = run_cell(ip, logdir, "total = profiled(2)", "--name cell")
    assert result.success, result.error_in_exec
    assert [r.name for r in xprof_magic.runs(logdir)] == ["cell"]
    assert xprof_magic.runs(logdir / "never") == []
    last = xprof_magic.last()
    assert last is not None
    assert ("total = profiled(2)", "for _ in range(n)", "matmul") in {s.path for s in last.labels}


def test_an_async_function_is_captured_while_awaited(logdir: Path) -> None:
    @xprof_magic.profile(logdir=logdir, name="awaited")
    async def fetch() -> float:
        await asyncio.sleep(0.01)
        # xprof: compute
        return float((torch.ones(2, device=DEVICE) * 5).sum().item())

    coroutine = fetch()
    assert xprof_magic.runs(logdir) == []  # nothing starts before it is awaited
    assert asyncio.run(coroutine) == 10.0
    run = fetch.run
    assert run is not None and run.result is not None and run.result.wall_s >= 0.01
    assert {"await asyncio.sleep(0.01)", "compute"} <= event_names(run.result.run_dir)


def test_a_jax_function_is_profiled_with_jax_and_its_loop_iterations_are_steps(
    logdir: Path,
) -> None:
    import jax
    import jax.numpy as jnp

    step = jax.jit(lambda w: w - 0.1 * w)

    @xprof_magic.profile(logdir=logdir, name="jax", steps=True)
    def train(w: Any) -> float:
        for _ in range(4):
            # xprof: update
            w = step(w)
        return float(w.sum())

    assert train(jnp.ones(8)) == pytest.approx(8 * 0.9**4)
    info = only_run(logdir)
    meta = _metadata.read(info.path)
    assert meta is not None and (meta.backend, meta.step_rule) == ("jax", "iteration")
    assert "update" in event_names(info.path)
    assert step_numbers(info.path) == [0, 1, 2, 3]


def test_a_profiled_function_is_sampled_at_its_own_lines_not_its_callers(logdir: Path) -> None:
    """The sampler looks for the line that runs in the function's own frame: the caller,
    here in the same file (as a script calling its function), is not the function's line."""
    import inspect

    import jax
    import jax.numpy as jnp
    import numpy as np

    step = jax.jit(lambda w, x: w - 0.01 * x.mean())
    raw = np.random.default_rng(0).random((512, 512))

    @xprof_magic.profile(logdir=logdir, name="sampled")
    def train(w: Any) -> Any:
        for _ in range(20):
            x = np.sort(raw + 1.0, axis=0)
            w = step(w, x[:4])
        return w

    train(step(jnp.ones(4), raw[:4]))  # compiled before the call: the loop's time is the sort's
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None and meta.cell_file == __file__
    source, first = inspect.getsourcelines(train.function)
    (sort,) = [first + k for k, text in enumerate(source) if "np.sort" in text]
    lines = [line for _, line, _, _ in meta.lines if line]
    assert lines and set(lines) <= set(range(first, first + len(source))), lines
    assert max(set(lines), key=lines.count) == sort, lines


@pytest.mark.parametrize("api", ["capture", "profile"])
def test_a_with_block_is_its_runs_cell_sampled_at_its_statements(logdir: Path, api: str) -> None:
    """A script's ``with xprof_magic.capture()`` block, and ``with xprof_magic.profile()``:
    the block is the run's cell, at its file's lines, and the looks name its statements."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    step = jax.jit(lambda w, x: w - 0.01 * x.mean())
    raw = np.random.default_rng(0).random((512, 512))
    w = step(jnp.ones(4), raw[:4])  # compiled before the block: the loop's time is the sort's
    opened = getattr(xprof_magic, api)(logdir=logdir, name=api, backend="jax")
    with opened:
        for _ in range(20):
            x = np.sort(raw + 1.0, axis=0)
            w = step(w, x[:4])
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None and meta.cell_file == __file__
    assert meta.cell.startswith("    with opened:\n"), meta.cell
    cell = meta.cell.splitlines()
    (sort,) = [meta.first_line + k for k, text in enumerate(cell) if "np.sort" in text]
    lines = [line for _, line, _, _ in meta.lines if line]
    assert lines and set(lines) <= set(range(meta.first_line, meta.first_line + len(cell)))
    assert max(set(lines), key=lines.count) == sort, lines


def _cell_sampled(logdir: Path, name: str, first: str, held: str) -> None:
    """Run ``name``'s cell starts at its line ``first`` (stripped) and ends at ``cap.stop()``,
    its looks all on its lines, most of them on the line ``held``."""
    meta = _metadata.read(logdir / "plugins" / "profile" / name)
    assert meta is not None and meta.cell is not None and meta.cell_file == __file__, name
    cell = meta.cell.splitlines()
    assert cell[0].strip() == first and "cap.stop()" in meta.cell, meta.cell
    assert meta.wall_s is not None and 0 < meta.wall_s < 60, meta.wall_s
    numbered = dict(enumerate(cell, meta.first_line))
    lines = [line for _, line, _, _ in meta.lines if line]
    assert lines and set(lines) <= set(numbered), (lines, meta.first_line, cell)
    assert numbered[max(set(lines), key=lines.count)].strip() == held, (lines, numbered)


def test_a_start_and_stop_by_hand_are_the_runs_cell_in_the_block_holding_both(
    logdir: Path,
) -> None:
    """A script's ``start()`` and ``stop()`` by hand, in one frame: the cell runs from one to
    the other in the block holding both (a ``try`` whose ``finally`` stops, a loop started in
    its first pass and stopped after it, or stopped in a later pass: the loop), and the looks
    name the statement between them that holds the time; ``run()`` between them is optional."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    step = jax.jit(lambda w, x: w - 0.01 * x.mean())
    raw = np.random.default_rng(0).random((512, 512))
    w = step(jnp.ones(4), raw[:4])  # compiled before: the loops' time is the sort's
    sort = "x = np.sort(raw + 1.0, axis=0)"

    cap = xprof_magic.capture(logdir=logdir, name="try", backend="jax", server=False)
    cap.start()
    try:
        for _ in range(20):
            x = np.sort(raw + 1.0, axis=0)
            w = step(w, x[:4])
    finally:
        cap.stop()
    _cell_sampled(logdir, "try", "cap.start()", sort)

    cap = xprof_magic.capture(logdir=logdir, name="first-pass", backend="jax", server=False)
    for i in range(20):
        if i == 0:
            cap.start()
        x = np.sort(raw + 1.0, axis=0)
        w = step(w, x[:4])
    cap.stop()
    _cell_sampled(logdir, "first-pass", "for i in range(20):", sort)

    cap = xprof_magic.capture(logdir=logdir, name="later-pass", backend="jax", server=False)
    for i in range(21):
        if i == 20:
            cap.stop()
            break
        x = np.sort(raw + 1.0, axis=0)
        w = step(w, x[:4])
        if i == 0:
            cap.start()
    _cell_sampled(logdir, "later-pass", "for i in range(21):", sort)

    def sorts() -> Any:
        y = w
        for _ in range(20):
            x = np.sort(raw + 1.0, axis=0)
            y = step(y, x[:4])
        return y

    cap = xprof_magic.capture(logdir=logdir, name="run", backend="jax", server=False)
    cap.start()
    w = cap.run(sorts)
    cap.stop()
    _cell_sampled(logdir, "run", "cap.start()", "w = cap.run(sorts)")


def test_a_start_by_hand_stopped_elsewhere_has_no_cell(logdir: Path) -> None:
    """``stop()`` called from another frame than ``start()`` (the function that started it
    has returned): no cell and no looks, never a line of the wrong frame."""
    import numpy as np

    def begin() -> Any:
        cap = xprof_magic.capture(logdir=logdir, name="elsewhere", backend="jax", server=False)
        cap.start()
        return cap

    cap = begin()
    for _ in range(20):
        np.sort(np.random.default_rng(0).random((512, 512)), axis=0)
    cap.stop()
    meta = _metadata.read(only_run(logdir).path)
    assert meta is not None and meta.status == "ok"
    assert meta.cell is None and meta.cell_file == "" and meta.lines == ()
    assert meta.wall_s is not None and 0 < meta.wall_s < 60, meta.wall_s


def test_a_notebook_cells_start_and_stop_by_hand_are_its_runs_cell(ip: Any, logdir: Path) -> None:
    """In a notebook, ``start()`` and ``stop()`` by hand in one cell: the code between them is
    the run's cell, at the cell's lines; stopped in a later cell, the run has no cell."""
    cell = (
        "import numpy as np\n"
        f"cap = xprof_magic.capture(logdir={str(logdir)!r}, name='one', server=False)\n"
        "cap.start()\n"
        "for _ in range(20):\n"
        "    y = np.sort(np.random.default_rng(0).random((512, 512)), axis=0)\n"
        "cap.stop()\n"
    )
    ip.user_ns["xprof_magic"] = xprof_magic
    try:
        assert ip.run_cell(cell).success
        meta = _metadata.read(logdir / "plugins" / "profile" / "one")
        assert meta is not None and meta.cell is not None, meta
        assert meta.first_line == 3 and meta.cell.splitlines()[-1] == "cap.stop()", meta.cell
        lines = [line for _, line, _, _ in meta.lines if line]
        assert lines and set(lines) <= {3, 4, 5, 6} and max(set(lines), key=lines.count) == 5
        started = cell.replace("name='one'", "name='two'").replace("cap.stop()\n", "")
        assert ip.run_cell(started).success and ip.run_cell("cap.stop()").success
        meta = _metadata.read(logdir / "plugins" / "profile" / "two")
        assert meta is not None and meta.status == "ok"
        assert meta.cell is None and meta.lines == ()
    finally:
        for name in ("xprof_magic", "cap", "np", "y"):
            ip.user_ns.pop(name, None)


@pytest.mark.parametrize(
    ("source", "start", "stop", "cell"),
    [
        ("a()\nc.start(); b(); c.stop()\nd()\n", 2, 2, (2, "c.start(); b(); c.stop()\n")),
        ("c.start()\nif x:\n    c.stop()\n", 1, 3, (1, "c.start()\nif x:\n    c.stop()\n")),
        ("try:\n    c.start()\n    b()\nfinally:\n    c.stop()\n", 2, 5, (1, None)),
        ("c.stop()\nc.start()\n", 2, 1, None),  # no loop around both: no cell
        ("c.start(\n", 1, 1, None),  # the source does not parse
        ("", 1, 2, None),  # no source
        ("a()\nc.start()\n", 2, 5, None),  # stop() past the source read
        ("a()\nb()\nc()\n", 1, 3, None),  # an edited file: no start() and stop() there
        ("c = capture(\n    x).start()\nb()\nc.stop()\n", 1, 4, (1, None)),  # a call on 2 lines
    ],
)
def test_the_cell_between_a_start_and_a_stop(
    source: str, start: int, stop: int, cell: tuple[int, str | None] | None
) -> None:
    from xprof_magic._capture.plan import Plan, between, parsed

    lines = source.splitlines(keepends=True)
    got = between(Plan(), lines, parsed("<source>", lines), start, stop)
    if cell is None:
        assert got is None
        return
    assert got is not None and got.cell_first_line == cell[0]
    assert got.cell == (source if cell[1] is None else cell[1])


def test_a_trace_already_running_refuses_the_call_with_nothing_run(logdir: Path) -> None:
    import torch_xla.debug.profiler as xp

    ran: list[int] = []

    @xprof_magic.profile(logdir=logdir, backend="torch_xla")
    def work() -> None:
        ran.append(1)

    xp.start_trace(str(logdir.parent / "own"))
    try:
        with pytest.raises(TraceAlreadyRunning, match=r"already running.*stop it with"):
            work()
    finally:
        xp.stop_trace()
    assert ran == [] and xprof_magic.runs(logdir) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"port": 0}, "port=0 is not a port"),
        ({"viewer_port": 70000}, "viewer_port=70000"),
        ({"height": 5}, "height=5 is out of range"),
        ({"steps": "3:1"}, "steps='3:1'"),
        ({"backend": "cuda"}, "backend='cuda' is not a backend; use one of auto, jax"),
        ({"viewer": "perfetto"}, "viewer='perfetto'"),
        ({"name": "../.."}, "no usable characters"),
    ],
)
def test_bad_options_are_refused_at_once_naming_the_fix(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        xprof_magic.profile(**options)


def test_what_cannot_be_rewritten_is_refused_naming_the_fix() -> None:
    import functools

    def plain() -> None:
        pass

    def generator() -> Any:
        yield 1

    @functools.lru_cache
    def cached() -> int:
        return 1

    with pytest.raises(TypeError, match=r"generator.*profile the function that consumes it"):
        xprof_magic.profile(generator)
    with pytest.raises(TypeError, match=r"not a plain function.*directly above its def"):
        xprof_magic.profile(cached)
    with pytest.raises(TypeError, match="no def of its own"):
        xprof_magic.profile(lambda: 1)
    namespace: dict[str, Any] = {}
    exec("def hidden():\n    return 1\n", namespace)
    with pytest.raises(TypeError, match="source of hidden cannot be read"):
        xprof_magic.profile(namespace["hidden"])
    assert xprof_magic.profile(plain).source.text.startswith("def plain()")


def test_a_files_source_is_parsed_once_while_linecache_keeps_it() -> None:
    """A loop that starts and stops a capture by hand parses its file once, not at each start."""
    from xprof_magic._capture.plan import parsed

    lines = ["c.start()\n", "c.stop()\n"]
    tree = parsed("<kept>", lines)
    assert tree is not None and parsed("<kept>", lines) is tree
    again = parsed("<kept>", list(lines))  # linecache read the file again: parsed again
    assert again is not None and again is not tree
    assert parsed("<bad>", ["c.start(\n"]) is None
