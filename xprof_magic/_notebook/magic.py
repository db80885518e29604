"""The magic front: ``%%xprof`` options become a plan, the cell runs inside a capture.

Thin on purpose: :mod:`.execute` runs the cell as IPython would, :mod:`.commands` holds the
``%xprof`` line commands, :mod:`.show` decides what appears under the cell.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cached_property
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from xprof_magic._backends.registry import BACKEND_CHOICES, BACKENDS, DEFAULT_HEIGHT, DEFAULT_PORT
from xprof_magic._units import wrapped

# Loading the extension imports only what the options' help needs; the capture, the cell's
# execution, the display and the line commands are imported when a cell first needs them.
if TYPE_CHECKING:
    from xprof_magic._capture import capture as _capture
    from xprof_magic._capture import plan as _plan
    from xprof_magic._notebook import commands, execute

__all__ = ["XprofMagics"]


@magics_class
class XprofMagics(Magics):
    """``%%xprof`` and its ``%xprof`` helpers."""

    @magic_arguments()
    @argument(
        "--logdir",
        help="Folder for captures, or gs://BUCKET/PATH (written through a local copy under "
        "~/.cache/xprof_magic/gcs, then uploaded). Default: $XPROF_MAGIC_LOGDIR, else "
        "./xprof_logs.",
    )
    @argument(
        "--name",
        help="Run name; made safe, and suffixed -2, -3, ... when taken. "
        "Default: <date>-<time>-cell<N>.",
    )
    @argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="Port of the backend's profiler server (torch_xla's, TorchTPU's or JAX's), for "
        "on-demand capture (default 9012; when another kernel holds it, the next free one, "
        "said once). That server listens on ALL interfaces (none of them offers a choice).",
    )
    @argument(
        "--no-server",
        action="store_true",
        help="Do not start the backend's profiler server (torch_xla's, TorchTPU's or JAX's); "
        "%%%%xprof does not need it. XPROF_MAGIC_NO_SERVER=1 makes this the default.",
    )
    @argument(
        "--no-labels",
        action="store_true",
        help="Do not label the cell's statements and '# xprof: NAME' blocks.",
    )
    @argument(
        "--steps",
        nargs="?",
        const="",
        default=None,
        metavar="A:B",
        help="Mark steps for XProf's step tools: a step ends at each sync (torch_xla.sync(), "
        "xm.mark_step(), MpDeviceLoader, at any depth); when nothing syncs, a step is one "
        "iteration of the cell's loop (the innermost when nested; always so with JAX and "
        "TorchTPU, which run eagerly); your own StepTrace markers win. --steps A:B traces "
        "only steps A to B-1, numbered from 0 in the cell (A: and :B too); the cell still "
        "runs whole, and a window never reached stores nothing and says how many steps ran. "
        "The summary says which rule made the steps.",
    )
    @argument(
        "--sync",
        action="store_true",
        help="At the end of the cell, run torch_xla.sync() (torch_xla), wait for the "
        "dispatched work (JAX), or torch.accelerator.synchronize() (TorchTPU, on a TPU "
        "only), for cells that leave work pending. Never added otherwise: "
        "it would cut the graph where you did not.",
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
        default="auto",
        choices=BACKEND_CHOICES,
        help=f"Profiler backend: {', '.join(sorted(BACKENDS))}. Default auto: the framework the "
        "cell imports (torch_tpu also when it names the tpu device), else the one its names "
        "come from, else the one your earlier cells imported, else the one installed; plain "
        "torch is torch_xla where installed, else torch_tpu; when that is a tie, torch_xla, "
        "and a message says so.",
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
        - ``%xprof capture [ADDR[,ADDR...]]``: capture running profiler servers (this
          kernel's own when no address is given) into one run; ``%xprof capture --help``.
        """
        __tracebackhide__ = True
        from xprof_magic._capture import capture as _capture
        from xprof_magic._notebook import commands, execute

        if cell is None:
            commands.run_command(self._session, self.shell, line)
            return None
        try:
            # A window like -3:5 would read as an option; give it to --steps to refuse clearly.
            args = parse_argstring(self.xprof, re.sub(r"(--steps)\s+(-\d)", r"\1=\2", line))
        except ValueError as error:  # shlex: an unclosed quote
            raise UsageError(f"%%xprof {line}: {error}; check the quotes") from None
        except UsageError as error:  # argparse: an unknown option, a missing value
            raise UsageError(f"%%xprof: {error}; %%xprof? lists the options") from None
        read = execute.read_cell(self.shell, line, cell)
        plan = self._plan(args, read)
        try:
            code = execute.compile_cell(self.shell, read, plan)
        except SyntaxError:
            # IPython's own short form, at the user's line; then fail the cell in one line
            # (re-raising would also list the magic's frames).
            assert self.shell is not None
            self.shell.showsyntaxerror()
            raise UsageError("the cell was not run: fix the syntax error above") from None
        plan = dataclasses.replace(plan, cell_file=code.co_filename, cell_code=code)
        namespace = getattr(self.shell, "user_ns", None)
        capture = _capture.Capture(plan, notify=print, namespace=namespace)
        return self._profile(capture, code, args, cell)

    def _profile(self, capture: _capture.Capture, code: CodeType, args: Any, cell: str) -> Any:
        """Run the compiled cell inside the capture and show the run under it."""
        __tracebackhide__ = True
        from xprof_magic._backends import TraceAlreadyRunning
        from xprof_magic._notebook import execute, show
        from xprof_magic._runs import store as _store

        plan = capture.plan
        try:
            capture.start()
        except (_store.LogdirError, TraceAlreadyRunning) as error:
            raise UsageError(_refusal(error, plan.backend)) from None
        self._session.logdir = plan.logdir
        start = None
        if not args.no_display:
            try:
                start = self._begin_viewer(plan.logdir.local, args)
            except Exception as error:  # the cell runs all the same, with the text summary
                print(wrapped(f"xprof: the viewer could not start: {error!r}"))
        outcome: BaseException | None = None
        value = None
        try:
            value = capture.run(lambda: execute.execute(self.shell, code))
        except BaseException as error:
            outcome = error
        try:
            capture.stop(outcome)
        except BaseException as error:  # interrupted while stopping: the trace is stopped
            outcome = error
        show.report(self.shell, capture.result, start, plan.logdir.local, args.height)
        if outcome is not None:
            raise execute.trimmed(outcome, code.co_filename, self.shell)
        return None if execute.quiet(cell) else value

    @cached_property
    def _session(self) -> commands.Session:
        """What the line commands remember of this kernel's profiled cells."""
        from xprof_magic._notebook import commands

        return commands.Session()

    def _begin_viewer(self, logdir: Path, args: Any) -> Any:
        """Start (or find) the viewer now, so that it is ready when the cell ends."""
        from xprof_magic._viewer.process import manager

        self._session.viewer_kind, self._session.viewer_port = args.viewer, args.viewer_port
        return manager.begin_viewer(logdir, port=args.viewer_port, kind=args.viewer)

    def _plan(self, args: Any, cell: execute.Cell) -> _plan.Plan:
        """The line's options, checked as every front checks them, as the cell's plan."""
        from xprof_magic._capture.plan import Options

        try:
            options = Options.parse(
                flags=True,
                logdir=args.logdir or None,
                name=args.name,
                steps=args.steps,
                sync=args.sync,
                labels=not args.no_labels,
                backend=args.backend,
                server=False if args.no_server else None,
                port=args.port,
                viewer=args.viewer,
                viewer_port=args.viewer_port,
                height=args.height,
            )
        except ValueError as error:  # LogdirError too
            raise UsageError(str(error)) from None
        given = {key: value for key, value in vars(args).items() if value not in (None, False)}
        return options.plan(
            cell.source,
            getattr(self.shell, "user_ns", {}),
            cell=cell.text,
            cell_number=cell.number,
            first_line=2,
            options={"line": cell.line, **given},
            say=lambda message: print(wrapped(f"xprof: {message}")),
        )


def _refusal(error: BaseException, backend: str) -> str:
    from xprof_magic._backends import TraceAlreadyRunning
    from xprof_magic._backends.registry import get_vocabulary

    if isinstance(error, TraceAlreadyRunning):
        stop = get_vocabulary(backend).capture.stop_trace
        return (
            "a profiler trace is already running (started by your own code?); "
            f"stop it with {stop} and run the cell again"
        )
    return str(error)
