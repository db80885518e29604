"""``xprof_magic.profile``: the ``%%xprof`` capture where no magic runs (marimo, scripts).

Two shapes over the one :class:`~xprof_magic._capture.capture.Capture` the magic uses:

- ``@xprof_magic.profile(...)`` on a function: its body is rewritten as the magic rewrites a
  cell (:mod:`.function`), so labels, ``# xprof:`` markers, ``next()`` timers and steps are
  the magic's. Each call is one run and returns what the function returns; ``fn.run`` is
  the last call's :class:`Run`. Called inside another capture, the function adds its labels
  to that run instead.
- ``with xprof_magic.profile(...) as run:``: the block runs as written (a ``with`` body cannot
  be rewritten), so its labels are the ones it opens itself (:func:`xprof_magic.label`) and
  its steps end at syncs (torch_xla) or at :func:`xprof_magic.step`.

A :class:`Run` displays itself: in marimo (``_display_``) as the view of :mod:`.view`, the
summary over XProf; elsewhere as static HTML or text. Nothing here imports marimo, IPython
or anywidget; the view is imported when a run is first shown.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import types
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from xprof_magic._backends import TraceAlreadyRunning
from xprof_magic._backends.registry import DEFAULT_HEIGHT, DEFAULT_PORT, get_vocabulary
from xprof_magic._capture import capture as _capture
from xprof_magic._capture.plan import Options, with_block
from xprof_magic._cell import labels as _labels
from xprof_magic._marimo.function import FunctionSource, read_source, rewritten
from xprof_magic._marimo.run import Run, announce
from xprof_magic._runs import store as _store

if TYPE_CHECKING:
    from xprof_magic._viewer import ViewerStart

__all__ = ["Options", "Profiled", "Profiler", "begin_viewer", "in_marimo", "profile"]


def in_marimo() -> bool:
    """Whether this runs in a marimo notebook or app (never imports marimo to find out)."""
    marimo = sys.modules.get("marimo")
    try:
        return bool(marimo is not None and marimo.running_in_notebook())
    except Exception:
        return False


def begin_viewer(options: Options) -> ViewerStart | None:
    """The viewer, started now where a run will be shown (marimo), else None.

    A script starts no server it does not ask for.
    """
    if not in_marimo():
        return None
    from xprof_magic._viewer.process import manager

    return manager.begin_viewer(options.logdir.local, port=options.viewer_port, kind=options.viewer)


P = ParamSpec("P")
R = TypeVar("R")


def _refused(error: BaseException, backend: str) -> BaseException:
    """The one-line refusal of a capture that cannot start (nothing has run)."""
    if isinstance(error, TraceAlreadyRunning):
        stop = get_vocabulary(backend).capture.stop_trace
        return TraceAlreadyRunning(
            "xprof_magic.profile: a profiler trace is already running (started by your own "
            f"code?); stop it with {stop} and call again"
        )
    return error


def _trimmed(error: BaseException, code: types.CodeType) -> BaseException:
    """The user's exception with its traceback starting in their function.

    The frames of the capture that ran it are of no use to them.
    """
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    return error.with_traceback(tb) if tb is not None else error


class Profiled(Generic[P, R]):
    """A function profiled on each call (see :func:`profile`); ``run`` is the last call's."""

    def __init__(self, fn: Callable[P, R], options: Options) -> None:
        self.source: FunctionSource = read_source(fn)
        assert isinstance(fn, types.FunctionType)
        self.function = fn
        self.options = options
        self.run: Run | None = None
        self._rewritten: dict[bool, types.FunctionType] = {}
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def _labelled(self, steps: bool) -> types.FunctionType:
        if steps not in self._rewritten:
            self._rewritten[steps] = rewritten(
                self.function, self.source, labels=self.options.labels, steps=steps
            )
        return self._rewritten[steps]

    def _namespace(self) -> dict[str, Any]:
        fn = self.function
        cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True)
        closed = {}
        for name, cell in cells:
            try:
                closed[name] = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
        return {**fn.__globals__, **closed}

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = True
        if _labels.capturing():
            return self._labelled(False)(*args, **kwargs)  # type: ignore[no-any-return]
        fn = self._labelled(self.options.steps)
        if inspect.iscoroutinefunction(fn):
            return self._awaited(fn, args, kwargs)  # type: ignore[return-value]
        run, capture = self._start(fn)
        outcome: BaseException | None = None
        value: Any = None
        try:
            value = capture.run(lambda: fn(*args, **kwargs))
        except BaseException as error:
            outcome = error
        outcome = _stopped(run, capture, outcome)
        if outcome is not None:
            raise _trimmed(outcome, fn.__code__)
        return value  # type: ignore[no-any-return]

    async def _awaited(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """An ``async def``'s call: captured while awaited, from its first line to its end."""
        __tracebackhide__ = True
        run, capture = self._start(fn)
        outcome: BaseException | None = None
        value: Any = None
        try:
            value = await capture.run(lambda: fn(*args, **kwargs))
        except BaseException as error:
            outcome = error
        outcome = _stopped(run, capture, outcome)
        if outcome is not None:
            raise _trimmed(outcome, fn.__code__)
        return value

    def _start(self, fn: Callable[..., Any]) -> tuple[Run, _capture.Capture]:
        """Plan the call's capture and start it (refused in one line, with nothing run).

        The sampler looks for the line that runs in ``fn``'s frame (the body as it runs).
        """
        options = self.options
        name = options.name or f"{datetime.now():%Y%m%d-%H%M%S}-{self.function.__name__}"
        namespace = self._namespace()
        source = self.source
        plan = options.plan(
            source.text,
            namespace,
            name=name,
            cell=source.text,
            first_line=source.editor_line,
            options=options.recorded(api="profile"),
        )
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            plan = dataclasses.replace(plan, cell_file=code.co_filename, cell_code=code)
        capture = _capture.Capture(plan, namespace=namespace)
        try:
            capture.start()
        except (_store.LogdirError, TraceAlreadyRunning) as error:
            raise _refused(error, plan.backend) from None
        run = self.run = Run(capture.plan, options, begin_viewer(options))
        return run, capture


def _stopped(run: Run, capture: _capture.Capture, outcome: BaseException | None) -> Any:
    """Stop and store the capture; how the call ended (an interrupt while stopping counts)."""
    try:
        capture.stop(outcome)
    except BaseException as error:  # interrupted while stopping: the trace is stopped
        outcome = outcome or error
    run.result = capture.result
    announce(run)
    return outcome


class Profiler:
    """``profile(...)``'s options, waiting for a function to decorate or a ``with`` block."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.run: Run | None = None
        self._stack: ExitStack | None = None
        self._capture: _capture.Capture | None = None

    def __call__(self, fn: Callable[P, R]) -> Profiled[P, R]:
        return Profiled(fn, self.options)

    def __enter__(self) -> Run:
        caller = sys._getframe(1)
        namespace = {**caller.f_globals, **caller.f_locals}
        plan = self.options.plan("", namespace, options=self.options.recorded(api="profile"))
        plan = with_block(plan, caller)
        capture = _capture.Capture(plan, namespace=namespace)
        viewer = begin_viewer(self.options)
        stack = ExitStack()
        try:
            stack.enter_context(capture)
        except (_store.LogdirError, TraceAlreadyRunning) as error:
            raise _refused(error, plan.backend) from None
        self._stack, self._capture = stack, capture
        self.run = Run(capture.plan, self.options, viewer)
        return self.run

    def __exit__(self, *exc: Any) -> None:
        stack, self._stack = self._stack, None
        assert stack is not None and self.run is not None and self._capture is not None
        try:
            stack.__exit__(*exc)
        finally:
            self.run.result = self._capture.result
            announce(self.run)


@overload
def profile(fn: Callable[P, R], /) -> Profiled[P, R]: ...


@overload
def profile(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    logdir: str | os.PathLike[str] | None = None,
    steps: bool | str = False,
    sync: bool = False,
    labels: bool = True,
    backend: str = "auto",
    server: bool | None = None,
    port: int = DEFAULT_PORT,
    viewer: str = "xprof",
    viewer_port: int | None = None,
    height: int = DEFAULT_HEIGHT,
) -> Profiler: ...


def profile(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    logdir: str | os.PathLike[str] | None = None,
    steps: bool | str = False,
    sync: bool = False,
    labels: bool = True,
    backend: str = "auto",
    server: bool | None = None,
    port: int = DEFAULT_PORT,
    viewer: str = "xprof",
    viewer_port: int | None = None,
    height: int = DEFAULT_HEIGHT,
) -> Profiled[..., Any] | Profiler:
    """Profile a function on each call (``@xprof_magic.profile``), or a ``with`` block.

    The options are ``%%xprof``'s: ``name`` (default ``<date>-<time>-<function>``; a taken
    name gets ``-2``, ``-3``), ``logdir`` (default ``$XPROF_MAGIC_LOGDIR``, else
    ``./xprof_logs``), ``steps`` (``True``, or ``"A:B"`` to trace only steps A to B-1),
    ``sync``, ``labels``, ``backend`` (``"auto"``: from the function's source and the names
    it uses), ``server`` and ``port`` (the backend's profiler server), ``viewer``,
    ``viewer_port`` and ``height`` (the embedded page). A bad option raises ``ValueError``
    now, naming it and the fix.
    """
    options = Options.parse(
        name=name,
        logdir=logdir,
        steps=steps,
        sync=sync,
        labels=labels,
        backend=backend,
        server=server,
        port=port,
        viewer=viewer,
        viewer_port=viewer_port,
        height=height,
    )
    if fn is not None:
        return Profiled(fn, options)
    return Profiler(options)
