"""Run a cell's code as IPython would, in the user's namespace, without ``run_cell``.

The cell is not handed to a nested ``shell.run_cell``: that would swallow its exception
(Run All would go on) and cannot run top-level ``await`` under ipykernel. Instead, as
IPython's own ``%%time`` does, the cell is transformed (magics, ``!``), rewritten with labels,
compiled and executed here, so its value, names, exceptions and KeyboardInterrupt are
exactly those of the unprofiled cell.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import threading
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import Any

from IPython.core.displayhook import DisplayHook

from xprof_magic._capture.plan import Plan
from xprof_magic._cell import markers as _markers
from xprof_magic._cell import rewrite as _rewrite

__all__ = ["Cell", "compile_cell", "current_cell", "execute", "quiet", "read_cell", "trimmed"]


@dataclass(frozen=True)
class Cell:
    """A cell read once: as the user wrote it, as IPython runs it, and its number."""

    line: str
    text: str
    source: str
    """After IPython's transforms (magics, ``!``), before the labels."""
    number: int
    raw: str
    """The notebook cell's own text, ``%%xprof`` line included."""


def read_cell(shell: Any, line: str, cell: str) -> Cell:
    """The cell as IPython would run it, and its number and raw text (see :func:`current_cell`)."""
    source = shell.transform_cell(cell) if shell is not None else cell
    number, raw = current_cell(shell, line, cell)
    return Cell(line, cell, source, number, raw)


def compile_cell(shell: Any, cell: Cell, plan: Plan) -> CodeType:
    """Label and compile the cell as IPython would run it.

    Line numbers match the notebook cell, whose first line is ``%%xprof``.
    """
    source = cell.source
    # IPython drops leading blank lines; put them back so line numbers stay the user's.
    dropped = _leading_blank_lines(cell.text) - _leading_blank_lines(source)
    source = "\n" * (1 + max(dropped, 0)) + source
    raw = cell.raw
    # The same name as the cell's own cache entry: tracebacks then show "%%xprof" and the
    # user's lines under "Cell In[n]", where IPython would show its translation.
    header = raw.splitlines()[0] if raw.startswith("%%") else f"%%xprof {cell.line}".rstrip()
    filename = shell.compile.cache(header + source, cell.number, raw_code=raw)
    tree = ast.parse(source, filename=filename)
    tree = shell.transform_ast(tree)
    markers = _markers.find_markers(source) if plan.labels else []
    # Blocks are named after the user's lines, unless IPython joined some (a ``\``
    # continuation of a magic): then after the lines as they run.
    lines = ["", *cell.text.splitlines()]
    if len(lines) != len(source.splitlines()):
        lines = source.splitlines()
    rewritten = _rewrite.rewrite(
        tree,
        lines,
        labels=plan.labels,
        steps=plan.steps,
        markers=markers,
    )
    flags = shell.compile.flags | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code: CodeType = compile(rewritten.tree, filename, "exec", flags=flags, dont_inherit=True)
    return code


def execute(shell: Any, code: CodeType) -> Any:
    """Run compiled cell code in the user's namespace; the value of an awaited cell."""
    __tracebackhide__ = True
    namespace = shell.user_ns
    with shell.builtin_trap:
        if code.co_flags & inspect.CO_COROUTINE:
            return run_on_fresh_loop(code, namespace)
        exec(code, namespace)
    return None


def run_on_fresh_loop(code: CodeType, namespace: dict[str, Any]) -> Any:
    """Run a top-level-await cell on its own event loop in a worker thread."""
    __tracebackhide__ = True
    loop = asyncio.new_event_loop()
    outcome: dict[str, Any] = {}
    # An Event, not Thread.join: a join interrupted by Ctrl-C can leave the thread looking
    # finished while it still runs (CPython's gh-90882).
    done = threading.Event()

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            outcome["value"] = loop.run_until_complete(eval(code, namespace))
        except BaseException as error:
            outcome["error"] = error
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
                done.set()

    worker = threading.Thread(target=target, name="xprof-async-cell", daemon=True)
    worker.start()
    try:
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt as interrupt:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_cancel_all, loop)
        done.wait()
        # Point the interrupt at the line the cell was awaiting: the cancellation that
        # reached the cell's frame is in the chain of the task's CancelledError.
        error = outcome.get("error")
        for _ in range(8):
            if error is None:
                break
            tb = error.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != code.co_filename:
                tb = tb.tb_next
            if tb is not None:
                raise interrupt.with_traceback(tb) from None
            error = error.__context__
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def trimmed(error: BaseException, filename: str, shell: Any = None) -> BaseException:
    """The user's exception, its traceback starting at the cell's own code.

    The frames above it are the magic's and the worker loop's, of no use to the user. Raised
    again from the magic, the exception also passes the notebook cell's own frame (its one
    line, ``get_ipython().run_cell_magic(...)``), which IPython would show first; so the
    exception is given IPython's ``_render_traceback_`` hook, once, to be shown from the
    user's line. Its type, value and ``__traceback__`` stay what Python made them.
    """
    tb = _from_cell(error.__traceback__, filename)
    if tb is None:
        return error
    error = error.with_traceback(tb)
    formatter = getattr(shell, "InteractiveTB", None)
    if formatter is None:
        return error

    def render_traceback() -> list[str]:
        with contextlib.suppress(AttributeError):
            del error._render_traceback_  # type: ignore[attr-defined]
        # The cell's own line has the same file name (so that it shows as "Cell In[n]"):
        # start at the very traceback entry kept here, if the exception still holds it.
        start = error.__traceback__
        while start is not None and start is not tb:
            start = start.tb_next
        lines: list[str] = formatter.structured_traceback(
            type(error), error, start or error.__traceback__, tb_offset=0
        )
        return lines

    with contextlib.suppress(AttributeError, TypeError):
        error._render_traceback_ = render_traceback  # type: ignore[attr-defined]
    return error


def _from_cell(tb: TracebackType | None, filename: str) -> TracebackType | None:
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return tb


def current_cell(shell: Any, line: str, cell: str) -> tuple[int, str]:
    """The number and raw text of the cell being run, as the user wrote it.

    IPython stores a cell's raw text in the history before running it (and may already have
    counted it in ``execution_count``); when the magic was not called from a stored cell,
    fall back to the count and a reconstructed text.
    """
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
    raw = history[-1] if history else ""
    if isinstance(raw, str) and raw.lstrip().startswith("%%xprof") and cell.strip() in raw:
        return len(history) - 1, raw
    return int(getattr(shell, "execution_count", 0) or 0), f"%%xprof {line}\n{cell}"


def _leading_blank_lines(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.strip():
            break
        count += 1
    return count


def quiet(cell: str) -> bool:
    """A trailing ``;`` hides the cell's value, as in a plain cell."""
    try:
        return bool(DisplayHook.semicolon_at_end_of_expression(cell))
    except Exception:
        return False
