"""The magic front: ``%%xprof`` options become a plan, the cell runs inside a capture.

The cell is not handed to a nested ``shell.run_cell``: that would swallow its exception
(Run All would go on) and cannot run top-level ``await`` under ipykernel. Instead, as
IPython's own ``%%time`` does, the magic transforms, rewrites, compiles and executes the
cell itself in the user's namespace, so the cell's value, names, exceptions and
KeyboardInterrupt are exactly those of the unprofiled cell.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import shlex
import threading
from pathlib import Path
from types import CodeType
from typing import Any

from IPython.core.displayhook import DisplayHook
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from xprof_magic import _capture, _rewrite, _store
from xprof_magic._backends import BACKENDS, TraceAlreadyRunning

__all__ = ["XprofMagics"]

_SUBCOMMANDS = "runs, view [RUN], summary [RUN], compare RUN_A RUN_B, viewer, viewer stop"
DEFAULT_HEIGHT = 600


@magics_class
class XprofMagics(Magics):
    """``%%xprof`` and its ``%xprof`` helpers."""

    @magic_arguments()
    @argument(
        "--logdir",
        help="Folder for captures. Default: $XPROF_MAGIC_LOGDIR, else ./xprof_logs.",
    )
    @argument(
        "--name",
        help="Run name; made safe, and suffixed -2, -3, ... when taken. "
        "Default: <date>-<time>-cell<N>.",
    )
    @argument(
        "--port",
        type=int,
        default=_capture.DEFAULT_PORT,
        help="Port of torch_xla's profiler server, for on-demand capture (default 9012). "
        "That server listens on ALL interfaces (torch_xla offers no choice).",
    )
    @argument(
        "--no-server",
        action="store_true",
        help="Do not start torch_xla's profiler server; %%%%xprof does not need it. "
        "XPROF_MAGIC_NO_SERVER=1 makes this the default.",
    )
    @argument(
        "--no-labels",
        action="store_true",
        help="Do not label the cell's statements and '# xprof: NAME' blocks.",
    )
    @argument(
        "--steps",
        action="store_true",
        help="Mark each iteration of a top-level for loop as a step for XProf's step tools.",
    )
    @argument(
        "--sync",
        action="store_true",
        help="Run torch_xla.sync() at the end of the cell, for cells that leave lazy work "
        "pending. Never added otherwise: it would cut the graph where you did not.",
    )
    @argument(
        "--no-display",
        action="store_true",
        help="Show only the text summary: no widget, no viewer.",
    )
    @argument(
        "--viewer",
        choices=["xprof", "tensorboard"],
        default="xprof",
        help="Serve the captures with XProf (default) or TensorBoard's profile plugin.",
    )
    @argument(
        "--viewer-port",
        type=int,
        default=None,
        help="Loopback port of the viewer (default: a free one).",
    )
    @argument(
        "--height",
        type=int,
        default=DEFAULT_HEIGHT,
        help="Height of the embedded viewer in pixels (default 600).",
    )
    @argument(
        "--backend",
        default="torch_xla",
        choices=sorted(BACKENDS),
        help="Profiler backend (default torch_xla).",
    )
    @line_cell_magic
    def xprof(self, line: str, cell: str | None = None) -> Any:
        """Profile a cell with XProf: ``%%xprof [options]`` above an unchanged cell.

        The cell runs exactly as without the magic, inside a trace written to one run in
        the log directory. Each top-level statement is a labelled block named after its
        first line; a comment line ``# xprof: NAME`` starts a block NAME holding the
        statements after it in the same body (at any depth, e.g. inside a loop), up to the
        next marker or the end of that body. Blocks with the same name add up.

        A cell with top-level ``await`` runs on a fresh event loop in a worker thread, since
        the kernel's own loop is busy running the magic: tasks tied to the kernel's loop
        are not reachable from it, an interrupt cancels the cell's task, and the labels
        land on that worker thread's row of the timeline.

        Under the cell, a widget embeds XProf (trace viewer first; runs, tools and hosts in
        dropdowns), served by a viewer on a loopback port, started while the cell runs and
        reused by later cells and kernels.

        Line forms:

        - ``%xprof runs [LOGDIR]``: list the runs;
        - ``%xprof view [RUN]``: show the viewer again, for any run, without re-running;
        - ``%xprof summary [RUN]``: the run's summary again (saved beside the capture);
        - ``%xprof compare RUN_A RUN_B``: two runs side by side, with the deltas;
        - ``%xprof viewer``: where the viewer runs (pid, port, log directory, its log);
        - ``%xprof viewer stop``: stop it.
        """
        __tracebackhide__ = True
        if cell is None:
            return self._line(line)
        try:
            args = parse_argstring(self.xprof, line)
        except ValueError as error:  # shlex: an unclosed quote
            raise UsageError(f"%%xprof {line}: {error}; check the quotes") from None
        plan = self._plan(args, line, cell)
        try:
            code, rewritten = self._compile(cell, line, plan)
        except SyntaxError:
            # IPython's own short form, at the user's line; then fail the cell in one line
            # (re-raising would also list the magic's frames).
            assert self.shell is not None
            self.shell.showsyntaxerror()
            raise UsageError("the cell was not run: fix the syntax error above") from None
        capture = _capture.Capture(plan, notify=_print_message)
        try:
            capture.__enter__()
        except (_store.LogdirError, TraceAlreadyRunning) as error:
            raise UsageError(_refusal(error)) from None
        self._logdir = plan.logdir
        start = None
        outcome: BaseException | None = None
        value = None
        try:
            if not args.no_display:
                start = self._begin_viewer(plan.logdir, args)
            capture.restart_clock()
            value = self._execute(code)
        except BaseException as error:
            outcome = error
        try:
            capture.__exit__(type(outcome) if outcome is not None else None, outcome, None)
        except BaseException as error:  # interrupted while stopping: the trace is stopped
            outcome = error
        self._report(capture.result, start, plan.logdir, args.height)
        if outcome is not None:
            raise _trimmed(outcome, code.co_filename)
        if rewritten.keeps_value and capture.recorder is not None:
            value = capture.recorder.value
        return None if _quiet(cell) else value

    def _report(self, result: Any, start: Any, logdir: Path, height: int) -> None:
        """The text summary, then the summary and viewer display; never fails the cell."""
        if result is None:
            return
        try:
            print(result.text())
            _widget_module().announce(logdir)
            if start is not None:
                self._show(start, logdir, result.run, height)
        except Exception as error:
            print(f"xprof: the run was stored, but showing it failed: {error!r}")

    def _plan(self, args: Any, line: str, cell: str) -> _capture.Plan:
        if not 0 < args.port < 65536:
            raise UsageError(f"--port {args.port} is not a port; use a number from 1 to 65535")
        if args.viewer_port is not None and not 0 < args.viewer_port < 65536:
            raise UsageError(
                f"--viewer-port {args.viewer_port} is not a port; use a number from 1 to 65535"
            )
        if not 100 <= args.height <= 10000:
            raise UsageError(f"--height {args.height} is out of range; use 100 to 10000 pixels")
        logdir = Path(args.logdir).expanduser() if args.logdir else _store.default_logdir()
        options = {key: value for key, value in vars(args).items() if value not in (None, False)}
        plan = _capture.Plan(
            logdir=logdir,
            name=args.name,
            labels=not args.no_labels,
            steps=args.steps,
            sync=args.sync,
            server=_capture.server_by_default() and not args.no_server,
            port=args.port,
            backend=args.backend,
            cell=cell,
            cell_number=_current_cell(self.shell, line, cell)[0],
            options={"line": line, **options},
        )
        try:
            return plan.with_name()
        except ValueError as error:
            raise UsageError(f"--name: {error}") from None

    def _compile(self, cell: str, line: str, plan: _capture.Plan) -> tuple[CodeType, Any]:
        """Transform (magics, ``!``), label and compile the cell as IPython would run it.

        Line numbers match the notebook cell, whose first line is ``%%xprof``.
        """
        shell = self.shell
        assert shell is not None
        source = shell.transform_cell(cell)
        # IPython drops leading blank lines; put them back so line numbers stay the user's.
        dropped = _leading_blank_lines(cell) - _leading_blank_lines(source)
        source = "\n" * (1 + max(dropped, 0)) + source
        number, raw = _current_cell(shell, line, cell)
        # The same name as the cell's own cache entry: tracebacks then show "%%xprof" and the
        # user's lines under "Cell In[n]", where IPython would show its translation.
        header = raw.splitlines()[0] if raw.startswith("%%") else f"%%xprof {line}".rstrip()
        filename = shell.compile.cache(header + source, number, raw_code=raw)
        tree = ast.parse(source, filename=filename)
        tree = shell.transform_ast(tree)
        markers = _rewrite.find_markers(source) if plan.labels else []
        # Blocks are named after the user's lines, unless IPython joined some (a ``\``
        # continuation of a magic): then after the lines as they run.
        lines = ["", *cell.splitlines()]
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
        code = compile(rewritten.tree, filename, "exec", flags=flags, dont_inherit=True)
        return code, rewritten

    def _execute(self, code: CodeType) -> Any:
        __tracebackhide__ = True
        shell = self.shell
        assert shell is not None
        namespace = shell.user_ns
        with shell.builtin_trap:
            if code.co_flags & inspect.CO_COROUTINE:
                return _run_on_fresh_loop(code, namespace)
            exec(code, namespace)
        return None

    def _line(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"%xprof {line}: {error}; check the quotes") from None
        if not words:
            raise UsageError(
                "%xprof needs a subcommand, or use %%xprof as a cell magic; "
                f"subcommands: {_SUBCOMMANDS}. See %xprof?"
            )
        command, rest = words[0], words[1:]
        if command == "view" and len(rest) <= 1:
            return self._view(rest[0] if rest else None)
        if command == "viewer" and rest in ([], ["stop"]):
            return self._viewer_command(stop=bool(rest))
        if command == "summary" and len(rest) <= 1:
            return self._summary(rest[0] if rest else None)
        if command == "compare" and len(rest) == 2:
            return self._compare(*rest)
        if command == "runs" and len(rest) <= 1:
            logdir = Path(rest[0]) if rest else _store.default_logdir()
            found = _store.runs(logdir)
            if not found:
                print(f"xprof: no runs in {logdir.absolute()}")
            for run in found:
                status = (run.metadata or {}).get("status", "?")
                print(f"{run.name}  [{status}]  {run.path}")
            return None
        raise UsageError(
            f"%xprof {command}: unknown subcommand or arguments; subcommands: {_SUBCOMMANDS}. "
            "See %xprof?"
        )

    _logdir: Path | None = None
    _viewer_kind: Any = "xprof"
    _viewer_port: int | None = None

    def _begin_viewer(self, logdir: Path, args: Any) -> Any:
        """Start (or find) the viewer now, so that it is ready when the cell ends."""
        from xprof_magic._viewer import manager as _viewer

        self._viewer_kind, self._viewer_port = args.viewer, args.viewer_port
        return _viewer.begin_viewer(logdir, port=args.viewer_port, kind=args.viewer)

    def _show(self, start: Any, logdir: Path, run: str, height: int) -> None:
        """The summary and the viewer under the cell; a pending summary updates in place."""
        from xprof_magic._notebook import show as _display
        from xprof_magic._notebook.context import detect
        from xprof_magic._viewer import manager as _viewer

        run_dir = logdir / "plugins" / "profile" / run
        summary = _display.summary_now(run_dir)
        outcome = start.wait(timeout=_VIEWER_WAIT_S)
        view = None
        context = detect(self.shell)
        if isinstance(outcome, _viewer.Failed):
            print(f"xprof: no viewer: {outcome.message}")
        else:
            if isinstance(outcome, _viewer.Restarted | _viewer.Launched):
                print(f"xprof: {outcome.message} Stop it with %xprof viewer stop.")
            view = _widget_module().ViewerWidget(
                outcome.viewer, context, logdir, run=run, height=height
            )
        shown = _display.CellDisplay(summary, view, widgets=context.has_widgets)
        shown.show()
        if summary.pending and context.has_widgets:
            _display.finish_summary(run_dir, shown.update)

    def _run_name(self, run: str | None) -> tuple[Path, str]:
        """The log directory in use and a run in it (the newest when none is named)."""
        logdir = self._logdir or _store.default_logdir()
        names = [r.name for r in _store.runs(logdir)]
        if not names:
            raise UsageError(f"no runs in {logdir.absolute()}; profile a cell with %%xprof first")
        if run is not None and run not in names:
            raise UsageError(
                f"no run {run!r} in {logdir.absolute()}; %xprof runs lists the runs there"
            )
        return logdir, run or names[0]

    def _view(self, run: str | None) -> None:
        from xprof_magic._viewer import manager as _viewer

        logdir, name = self._run_name(run)
        start = _viewer.begin_viewer(logdir, port=self._viewer_port, kind=self._viewer_kind)
        self._show(start, logdir, name, DEFAULT_HEIGHT)

    def _full_summary(self, run: str | None) -> Any:
        from xprof_magic._notebook import show as _display

        logdir, name = self._run_name(run)
        return _display.full_summary(logdir / "plugins" / "profile" / name)

    def _summary(self, run: str | None) -> None:
        from xprof_magic._notebook import show as _display

        display(_display.summary_bundle(self._full_summary(run)), raw=True)

    def _compare(self, run_a: str, run_b: str) -> None:
        from xprof_magic import _analysis

        both = _analysis.compare(self._full_summary(run_a), self._full_summary(run_b))
        display({"text/plain": both.text(), "text/html": both.html()}, raw=True)

    def _viewer_command(self, stop: bool) -> None:
        from xprof_magic._viewer import manager as _viewer

        logdir = self._logdir or _store.default_logdir()
        kind = self._viewer_kind
        found = _viewer.find_viewer(logdir, kind)
        if found is None:
            print(f"xprof: no {kind} viewer runs for {logdir.absolute()}")
            return
        if stop:
            stopped = _viewer.stop_viewer(found)
            state = "stopped" if stopped else "could not be stopped; try !kill"
            print(f"xprof: the viewer (pid {found.pid}, port {found.port}) {state}")
            return
        print(
            f"xprof: {kind} viewer, pid {found.pid}, listening on 127.0.0.1:{found.port}, "
            f"serving {found.logdir}; its log: {found.log_path}"
        )


_VIEWER_WAIT_S = 60.0


def _widget_module() -> Any:
    """The widget module, imported on first display: ipywidgets is not needed to load."""
    from xprof_magic._notebook import widget as _widget

    return _widget


def _run_on_fresh_loop(code: CodeType, namespace: dict[str, Any]) -> Any:
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


def _trimmed(error: BaseException, filename: str) -> BaseException:
    """The user's exception, its traceback starting at the cell's own code.

    The frames above it are the magic's and the worker loop's, of no use to the user.
    """
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return error.with_traceback(tb) if tb is not None else error


def _current_cell(shell: Any, line: str, cell: str) -> tuple[int, str]:
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


def _quiet(cell: str) -> bool:
    """A trailing ``;`` hides the cell's value, as in a plain cell."""
    try:
        return bool(DisplayHook.semicolon_at_end_of_expression(cell))
    except Exception:
        return False


def _refusal(error: BaseException) -> str:
    if isinstance(error, TraceAlreadyRunning):
        return (
            "a profiler trace is already running (started by your own code?); "
            "stop it with torch_xla.debug.profiler.stop_trace() and run the cell again"
        )
    return str(error)


def _print_message(message: str) -> None:
    print(message)
