"""A function's body rewritten as ``%%xprof`` rewrites a cell.

This is where the decorator's labels and steps come from.

``@xprof_magic.profile`` cannot see inside a function while it runs, so it reads the
function's source once (``inspect``: marimo, IPython and files all keep it), hands the body
to :func:`xprof_magic._cell.rewrite.rewrite` as if it were a cell, and compiles the result with
the function's own file name and line numbers: tracebacks, the summary's "line N" and
debuggers point at the user's lines. The new function shares the original's globals,
defaults and closure cells, so it sees the same names, live. Pure AST work: no IPython.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xprof_magic._cell import markers as _markers
from xprof_magic._cell import rewrite as _rewrite

__all__ = ["FunctionSource", "read_source", "rewritten"]

_OUTER = "__xprof_magic_closure__"


@dataclass(frozen=True)
class FunctionSource:
    """A function's source as the user wrote it, dedented, and where it starts."""

    text: str
    first_line: int
    """The line of ``text``'s first line (a decorator's, or the ``def``) in ``filename``."""
    filename: str
    shown_line: int = 0
    """That line as the user's editor numbers it, for the summary's "line N": in a marimo
    notebook the line in its cell (``marimo run`` compiles a cell at its file's lines, the
    editor counts from the cell's top); elsewhere the file's, ``first_line``. 0: the same."""

    @property
    def editor_line(self) -> int:
        """The editor's number of ``text``'s first line (see :attr:`shown_line`)."""
        return self.shown_line or self.first_line


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def read_source(fn: Callable[..., Any]) -> FunctionSource:
    """``fn``'s source, read once to be rewritten.

    Raises ``TypeError`` naming the fix when it is not a plain function whose source can be read
    and rewritten.
    """
    name = _name(fn)
    if getattr(fn, "__wrapped__", None) is not None or not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"xprof_magic.profile: {name} is not a plain function (another decorator wraps "
            "it?); put @xprof_magic.profile directly above its def, innermost"
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"xprof_magic.profile: {name} is a generator, which runs only as its caller "
            "iterates; profile the function that consumes it"
        )
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as error:
        raise TypeError(
            f"xprof_magic.profile: the source of {name} cannot be read ({error}); define it "
            "in a notebook cell or a file, or use `with xprof_magic.profile():` and label "
            "blocks with xprof_magic.label"
        ) from None
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is None or not tree.body or not isinstance(tree.body[0], _DEFS):
        raise TypeError(
            f"xprof_magic.profile: {name} has no def of its own (a lambda?); write it as a "
            "def to profile it"
        )
    return FunctionSource(text, first, fn.__code__.co_filename, _line_in_cell(text, first))


def _line_in_cell(text: str, first: int) -> int:
    """The line where ``text`` starts in the marimo cell running now, as marimo's editor numbers it.

    The cell is the one whose decorator this is. Elsewhere, or when the text is not in that cell,
    ``first``. Asks marimo through ``sys.modules`` only.
    """
    marimo, context = sys.modules.get("marimo"), sys.modules.get("marimo._runtime.context")
    try:
        if marimo is None or context is None or not marimo.running_in_notebook():
            return first
        now = context.get_context()
        code = str(now.graph.cells[now.execution_context.cell_id].code)
    except Exception:
        return first
    cell = [line.strip() for line in code.splitlines()]
    want = [line.strip() for line in text.splitlines()]
    for at in range(len(cell) - len(want) + 1):
        if want and cell[at : at + len(want)] == want:
            return at + 1
    return first


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def rewritten(
    fn: types.FunctionType, source: FunctionSource, *, labels: bool, steps: bool
) -> types.FunctionType:
    """``fn`` with its body labelled and its loops marked for steps, as a cell's would be.

    Each top-level statement of the body is a block named after its first line, a ``# xprof:
    NAME`` comment starts a block at any depth, each ``next()`` of its ``for`` loops is timed.
    ``return`` keeps its meaning, so no final value is kept.
    """
    tree = ast.parse(source.text)
    definition = tree.body[0]
    assert isinstance(definition, _DEFS)
    markers = _markers.find_markers(source.text) if labels else []
    body = ast.Module(body=definition.body, type_ignores=[])
    cell = _rewrite.rewrite(
        body,
        source.text.splitlines(),
        labels=labels,
        steps=steps,
        keep_value=False,
        markers=markers,
    )
    definition.body = cell.tree.body
    definition.decorator_list = []
    freevars = fn.__code__.co_freevars
    module = ast.Module(body=[_enclosed(definition, freevars)], type_ignores=[])
    ast.increment_lineno(module, source.first_line - 1)
    ast.fix_missing_locations(module)
    # The user's `from __future__ import annotations` (the feature object imported above).
    flags = fn.__code__.co_flags & annotations.compiler_flag
    code = compile(module, source.filename, "exec", flags=flags, dont_inherit=True)
    inner = _find_code(code, fn.__name__)
    cells = dict(zip(freevars, fn.__closure__ or (), strict=True))
    missing = [n for n in inner.co_freevars if n not in cells]
    if missing:
        raise TypeError(
            f"xprof_magic.profile: {_name(fn)} uses {', '.join(missing)} from a scope it "
            "cannot be rewritten in (a method using super()?); profile a plain function"
        )
    closure = tuple(cells[n] for n in inner.co_freevars) or None
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    new.__dict__.update(fn.__dict__)
    new.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    return new


def _enclosed(definition: ast.stmt, freevars: tuple[str, ...]) -> ast.stmt:
    """The def itself, or, for a function with a closure, the def inside an outer function.

    The outer function binds the closure's names, so that they stay free variables (closure
    cells) when compiled.
    """
    if not freevars:
        return definition
    binds = " = ".join(freevars)
    outer = ast.parse(f"def {_OUTER}():\n    {binds} = None\n").body[0]
    assert isinstance(outer, ast.FunctionDef)
    outer.body.append(definition)
    return ast.copy_location(outer, definition)


def _find_code(code: types.CodeType, name: str) -> types.CodeType:
    """The code object of the function ``name`` compiled inside ``code``."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            if const.co_name == _OUTER:
                return _find_code(const, name)
    raise LookupError(f"no code for {name} in the rewritten source")  # pragma: no cover
