"""What a capture is asked to do, decided before any of it happens.

The options every front is given, checked once, and the :class:`Plan` they make.

``%%xprof``'s line, ``xprof_magic.profile(...)``'s keywords and ``xprof_magic.capture(...)``'s
are one set of options (:class:`Options`) with one set of defaults (``backend="auto"``
everywhere) and one set of refusals: :meth:`Options.parse` raises ``ValueError`` naming the bad
option as its front spells it (``--port 0`` on the magic's line, ``port=0`` as a keyword) and
the fix, before any code runs. :meth:`Options.plan` makes the :class:`Plan` (which backend
``auto`` means is :mod:`xprof_magic._backends.detect`'s), and
:class:`~xprof_magic._capture.capture.Capture` carries it out. IPython-free, marimo-free.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import CodeType, FrameType
from typing import Any, Literal, cast

from xprof_magic._backends import detect as _detect
from xprof_magic._backends.registry import BACKENDS, DEFAULT_HEIGHT, DEFAULT_PORT
from xprof_magic._cell.step_window import StepWindow, parse_steps
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store

__all__ = [
    "DEFAULT_PORT",
    "NO_SERVER_ENV",
    "VIEWERS",
    "Options",
    "Plan",
    "Viewer",
    "between",
    "hand_started",
    "parsed",
    "server_by_default",
    "with_block",
]

NO_SERVER_ENV = "XPROF_MAGIC_NO_SERVER"


def server_by_default() -> bool:
    """Whether the profiler server starts unless asked not to (``XPROF_MAGIC_NO_SERVER=1``)."""
    return os.environ.get(NO_SERVER_ENV, "").strip().lower() not in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Plan:
    """Everything a capture was asked to do, decided before any of it happens."""

    logdir: _logdir.Logdir = field(default_factory=_logdir.Logdir.parse)
    name: str | None = None
    labels: bool = True
    steps: bool = False
    step_window: StepWindow | None = None
    sync: bool = False
    server: bool = field(default_factory=server_by_default)
    port: int = DEFAULT_PORT
    backend: str = "torch_xla"
    cell: str | None = None
    cell_number: int | None = None
    cell_first_line: int = 1
    """The editor's number of ``cell``'s first line (see
    :attr:`~xprof_magic._runs.metadata.RunMetadata.cell_first_line`)."""
    cell_file: str = ""
    """The file name the cell's code is compiled under, once it is (see
    :attr:`~xprof_magic._runs.metadata.RunMetadata.cell_file`)."""
    cell_code: CodeType | None = field(default=None, compare=False, repr=False)
    """The code whose frame the line sampler reads the line from: the cell's compiled code
    (IPython's frame that runs the magic has the cell's file name too), a profiled
    function's (a script calling it shares its file), or a ``with`` block's frame's, or the
    frame's that calls ``start()`` by hand."""
    options: dict[str, Any] = field(default_factory=dict)

    def with_name(self) -> Plan:
        """The plan with its run name made safe, or a default one that sorts by time.

        A :class:`~xprof_magic._capture.capture.Capture` calls it once. Raises ``ValueError`` for a
        name with no usable character.
        """
        if self.name is None:
            name = _store.default_run_name(datetime.now(), self.cell_number)
        else:
            name = _store.safe_run_name(self.name)
        return replace(self, name=name)


VIEWERS = ("xprof", "tensorboard")
Viewer = Literal["xprof", "tensorboard"]
"""What serves the captures (the viewer's own ``ViewerKind``)."""


def _to_stderr(message: str) -> None:
    print(f"xprof: {message}", file=sys.stderr)


@dataclass(frozen=True)
class Options:
    """What a capture was asked, checked: the magic's options, by their keyword names."""

    logdir: _logdir.Logdir
    name: str | None = None
    steps: bool = False
    window: StepWindow | None = None
    sync: bool = False
    labels: bool = True
    backend: str = "auto"
    server: bool = True
    port: int = DEFAULT_PORT
    viewer: Viewer = "xprof"
    viewer_port: int | None = None
    height: int = DEFAULT_HEIGHT
    given: dict[str, Any] = field(default_factory=dict)
    """The options as given, those that say something (not None, not False)."""

    @classmethod
    def parse(
        cls,
        *,
        flags: bool = False,
        logdir: Any = None,
        name: str | None = None,
        steps: bool | str | None = False,
        sync: bool = False,
        labels: bool = True,
        backend: str = "auto",
        server: bool | None = None,
        port: int = DEFAULT_PORT,
        viewer: str = "xprof",
        viewer_port: int | None = None,
        height: int = DEFAULT_HEIGHT,
    ) -> Options:
        """Check the options and return them.

        Raises ``ValueError`` naming the bad one and its fix (``LogdirError`` for a log directory
        that is not one). ``flags``: name them as ``%%xprof``'s line does.

        ``server`` None is the default (``XPROF_MAGIC_NO_SERVER``).
        """

        def named(key: str, value: object) -> str:
            return f"--{key.replace('_', '-')} {value}" if flags else f"{key}={value!r}"

        if not 0 < port < 65536:
            raise ValueError(f"{named('port', port)} is not a port; use a number from 1 to 65535")
        if viewer_port is not None and not 0 < viewer_port < 65536:
            raise ValueError(
                f"{named('viewer_port', viewer_port)} is not a port; use a number from 1 to 65535"
            )
        if not 100 <= height <= 10000:
            raise ValueError(f"{named('height', height)} is out of range; use 100 to 10000 pixels")
        if backend != "auto" and backend not in BACKENDS:
            choices = ", ".join(["auto", *sorted(BACKENDS)])
            raise ValueError(f"{named('backend', backend)} is not a backend; use one of {choices}")
        if viewer not in VIEWERS:
            raise ValueError(f"{named('viewer', viewer)} is not a viewer; use xprof or tensorboard")
        try:
            marks, window = parse_steps(steps)
        except ValueError as error:
            said = str(error)
            if flags:
                raise ValueError(f"--steps {said}") from None
            said = said if said.startswith("steps=") else f"steps={steps!r}: {said}"
            raise ValueError(said) from None
        if name is not None:
            try:  # a name with no usable character fails here, not once the capture starts
                _store.safe_run_name(name)
            except ValueError as error:
                raise ValueError(f"{named('name', name)}: {error}") from None
        given = {
            "logdir": logdir,
            "name": name,
            "steps": steps,
            "sync": sync,
            "labels": labels,
            "backend": backend,
            "server": server,
            "port": port,
            "viewer": viewer,
            "viewer_port": viewer_port,
            "height": height,
        }
        return cls(
            logdir=_logdir.Logdir.parse(logdir),
            name=name,
            steps=marks,
            window=window,
            sync=sync,
            labels=labels,
            backend=backend,
            server=server_by_default() if server is None else server,
            port=port,
            viewer=cast("Viewer", viewer),
            viewer_port=viewer_port,
            height=height,
            given={key: value for key, value in given.items() if value not in (None, False)},
        )

    def plan(
        self,
        source: str,
        namespace: Mapping[str, object],
        *,
        name: str | None = None,
        cell: str | None = None,
        cell_number: int | None = None,
        first_line: int = 1,
        options: dict[str, Any] | None = None,
        say: Callable[[str], None] = _to_stderr,
    ) -> Plan:
        """The capture's plan.

        Args:
            source: With ``namespace``, chooses the backend for ``auto``.
            namespace: With ``source``, chooses the backend for ``auto``.
            name: The run's name when the options name none.
            first_line: The editor's number of ``cell``'s first line.
            options: What the run's metadata keeps of how it was asked.
            say: Receives the one line said of a guessed backend.
        """
        backend = self.backend
        if backend == "auto":
            backend, message = _detect.choose_backend(source, namespace)
            if message:
                say(message)
        return Plan(
            logdir=self.logdir,
            name=self.name if self.name is not None else name,
            labels=self.labels,
            steps=self.steps,
            step_window=self.window,
            sync=self.sync,
            server=self.server,
            port=self.port,
            backend=backend,
            cell=cell,
            cell_number=cell_number,
            cell_first_line=first_line,
            options=self.recorded() if options is None else options,
        )

    def recorded(self, **extra: Any) -> dict[str, Any]:
        """The options as the run's metadata keeps them (``extra`` first).

        Values are JSON's own types, else their text (a path).
        """
        return {**extra, **{k: _plain(v) for k, v in self.given.items()}}


def _plain(value: Any) -> Any:
    """An option as the run's metadata keeps it: JSON's own types, else its text (a path)."""
    return value if isinstance(value, bool | int | float | str) else str(value)


def with_block(plan: Plan, frame: FrameType) -> Plan:
    """The plan of a ``with`` block that ``frame`` (a script's, a marimo cell's) is entering.

    The block is the one at the frame's current line: its text becomes the cell, at its file's
    lines, and its frame's code the one the sampler reads the line in (:attr:`Plan.cell_code`),
    so that the summary names the block's statement that holds the time. The plan is returned
    unchanged where the source cannot be read or no ``with`` statement starts there (``start()``
    and ``stop()`` by hand have :func:`hand_started` and :func:`between`).
    """
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    tree = parsed(code.co_filename, lines)
    if tree is None:
        return plan
    at = frame.f_lineno or 0
    blocks = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.With | ast.AsyncWith) and node.lineno <= at < node.body[0].lineno
    ]
    if not blocks:
        return plan
    found = max(blocks, key=lambda node: node.lineno)  # the innermost one
    text = "".join(lines[found.lineno - 1 : found.end_lineno or found.lineno])
    return replace(
        plan,
        cell=text,
        cell_first_line=found.lineno,
        cell_file=code.co_filename,
        cell_code=code,
    )


def hand_started(plan: Plan, frame: FrameType) -> Plan:
    """The plan of a capture that ``frame`` starts by hand (``start()``), its cell not yet known.

    The sampler reads the line in the frame's code (:attr:`Plan.cell_code`), or at a module's
    top level in the outermost frame of its file: IPython runs each statement of a notebook
    cell as code of its own. :func:`between` makes the cell once ``stop()`` says where it ends.
    """
    code = frame.f_code
    top = code.co_name == "<module>"
    return replace(plan, cell_file=code.co_filename, cell_code=None if top else code)


_PARSED: dict[str, tuple[Sequence[str], ast.Module | None]] = {}
_KEPT = 8


def parsed(filename: str, lines: Sequence[str]) -> ast.Module | None:
    """A file's ``lines`` (as :mod:`linecache` holds them) parsed; None where they do not parse.

    The last few files' trees are kept while :mod:`linecache` keeps their lines, so that a loop
    of captures (``with`` blocks, or started and stopped by hand) parses its file once (a
    500-line file takes 5 to 10 ms).
    """
    kept = _PARSED.get(filename)
    if kept is not None and kept[0] is lines:
        return kept[1]
    try:
        tree: ast.Module | None = ast.parse("".join(lines))
    except Exception:  # SyntaxError, ValueError (a null byte), RecursionError (too deep)
        tree = None
    _PARSED.pop(filename, None)
    _PARSED[filename] = (lines, tree)
    while len(_PARSED) > _KEPT:
        del _PARSED[next(iter(_PARSED))]
    return tree


def between(
    plan: Plan, lines: Sequence[str], tree: ast.Module | None, start: int, stop: int
) -> Plan | None:
    """The plan whose cell is the code from a ``start()`` at file line ``start`` to ``stop()``.

    ``lines``: the file's, read when the capture started, and ``tree`` what they parse to
    (:func:`parsed`; None: they did not); both calls in one frame. The cell runs
    from the statement that calls ``start()`` to the one that calls ``stop()``, both whole, in the
    innermost block holding both: ``start()`` in a loop's body and ``stop()`` after the loop
    is the loop and what follows it to ``stop()``; ``start()`` and ``stop()`` in two blocks of one
    statement (a ``try`` and its ``finally``) is that statement; a ``stop()`` above its
    ``start()`` in a loop's body (a later pass) is the loop. None (no cell) where the source
    cannot be read or holds no such statements, or its lines name no ``start`` and ``stop`` there
    (a file edited since it ran). The looks outside the cell's lines (a loop around both calls,
    run again between them) are the capture's to drop.
    """
    if tree is None:
        return None
    began, ended = _path(tree.body, start), _path(tree.body, stop)
    if not began or not ended:
        return None
    if "start" not in _text(lines, began[-1]) or "stop" not in _text(lines, ended[-1]):
        return None
    common = 0
    while common < min(len(began), len(ended)) and began[common] is ended[common]:
        common += 1
    outer = began[:common]
    if common == min(len(began), len(ended)) or not _one_block(outer, began[common], ended[common]):
        first = last = outer[-1]  # one statement holds both calls, or both its blocks
    elif began[common].lineno <= ended[common].lineno:  # both in one block, in order
        first, last = began[common], ended[common]
    else:  # stopped in a later pass of a loop around both: that loop
        loops = [s for s in outer if isinstance(s, ast.For | ast.AsyncFor | ast.While)]
        if not loops:
            return None
        first = last = loops[-1]
    return replace(plan, cell=_text(lines, first, last), cell_first_line=first.lineno)


def _text(lines: Sequence[str], first: ast.stmt, last: ast.stmt | None = None) -> str:
    """The source from statement ``first`` to ``last`` (else ``first``), whole lines."""
    last = first if last is None else last
    return "".join(lines[first.lineno - 1 : last.end_lineno or last.lineno])


def _path(body: list[ast.stmt], line: int) -> list[ast.stmt]:
    """The statements holding file line ``line``, from the outermost in ``body`` inwards."""
    path: list[ast.stmt] = []
    while True:
        found = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if found is None:
            return path
        path.append(found)
        body = [inner for block in _blocks(found) for inner in block]


def _one_block(outer: list[ast.stmt], one: ast.stmt, other: ast.stmt) -> bool:
    """Whether statements ``one`` and ``other``, inside the last of ``outer``, share a block."""
    if not outer:
        return True  # the module's (or the function's source's) own
    return any(
        any(s is one for s in block) and any(s is other for s in block)
        for block in _blocks(outer[-1])
    )


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of statements a compound statement holds (its body, else, handlers, cases)."""
    blocks: list[list[ast.stmt]] = []
    for _, value in ast.iter_fields(statement):
        if isinstance(value, list) and value:
            if isinstance(value[0], ast.stmt):
                blocks.append(value)
            else:
                blocks.extend(
                    part.body
                    for part in value
                    if isinstance(part, ast.ExceptHandler | ast.match_case)
                )
    return blocks
