"""The cell rewriter: a cell's AST in, the same code with labelled blocks out.

Pure AST work, no IPython and no torch, so that it can be tested on its own and reused by
any backend. The rewritten code calls back into :mod:`xprof_magic._cell.labels` through
``__import__`` rather than through a name in the user's namespace: nothing is left behind
after the cell, and functions defined in the cell keep working when called later. What a
block is called (a statement's label, a ``# xprof: NAME`` marker) is
:mod:`xprof_magic._cell.markers`'s.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from xprof_magic._cell.markers import Marker, label_for

__all__ = ["RewrittenCell", "rewrite"]

_RUNTIME = "xprof_magic._cell.labels"
_BOUND = "_xprof_magic_labels_"
"""The name a cell's outermost loop binds the runtime to (``with …loop() as``), so that
each iteration reaches its hook without an ``__import__`` (1.8 µs: a loop of tiny steps
pays it every step); mangled so that no user's name clashes."""


@dataclass(frozen=True)
class RewrittenCell:
    """The rewritten module and what the rewriter decided about it."""

    tree: ast.Module
    labels: tuple[str, ...]
    keeps_value: bool
    step_loops: int


def rewrite(
    tree: ast.Module,
    source_lines: Sequence[str],
    *,
    labels: bool = True,
    steps: bool = False,
    keep_value: bool = True,
    markers: Sequence[Marker] = (),
) -> RewrittenCell:
    """Wrap the cell's blocks in labels.

    - Each top-level statement becomes a block named after its first source line.
    - A marker comment starts a block of that name holding the statements after it in the
      same body, up to the next marker or the end of the body, at any depth.
    - With ``steps``, the cell's loops (``for`` and ``while`` outside functions and
      classes) report to the step tracker: the outermost ones where they start, the
      innermost ones each iteration. Whether iterations or syncs make the steps is decided
      at run time (:class:`xprof_magic._cell.step_tracker.StepTracker`).
    - The cell's ``for`` loops (outside functions and classes) time each ``next()`` of their
      iterable as a label ``next(<iterable>)`` (:func:`xprof_magic._cell.labels.inputs`): the
      time spent waiting for input. ``range(...)`` has nothing to wait for and is left bare.
    - With ``keep_value``, a final expression's value is handed to the runtime, which is
      how the cell's result (Out[n]) survives the wrapping.

    ``source_lines`` are the lines the user wrote (0-based list, AST lines are 1-based); they
    name the blocks, so a block shows ``%timeit f()`` rather than IPython's translation.
    """
    body = list(tree.body)
    keeps = False
    if keep_value and body and isinstance(body[-1], ast.Expr):
        last = body[-1]
        body[-1] = _located(ast.Expr(value=_runtime_call("keep", [last.value])), last)
        keeps = True
    names: list[str] = []
    if labels or steps:
        _time_inputs(body)
    if labels:
        for stmt in body:
            _label_nested(stmt, markers, source_lines, names)
    step_loops = 0
    if steps:
        body, step_loops = _mark_loops(body, in_loop=False)
    if labels:
        body = _label_body(body, markers, source_lines, names, bounds=(0, _END))
    if step_loops:
        at = 0
        while at < len(body) and _must_stay_bare(body[at]):
            at += 1
        call = ast.Expr(value=_runtime_call("loops_ahead", []))
        body.insert(at, _located(call, body[min(at, len(body) - 1)]))
    new_tree = ast.Module(body=body, type_ignores=tree.type_ignores)
    ast.fix_missing_locations(new_tree)
    return RewrittenCell(new_tree, tuple(dict.fromkeys(names)), keeps, step_loops)


_END = 1 << 62
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _mark_loops(body: list[ast.stmt], *, in_loop: bool) -> tuple[list[ast.stmt], int]:
    """Wrap the cell's loops in the label hooks; return the new body and its innermost loop count.

    Each outermost loop is wrapped in ``loop()``, each innermost ``for`` loop's iterable in
    ``steps()`` and each innermost ``while`` (or ``async for``) loop's body in ``iteration()``.

    Code in functions and classes is left alone: it may run outside the cell, and syncs
    find the steps of loops hidden there.
    """
    out: list[ast.stmt] = []
    innermost = 0
    for stmt in body:
        if isinstance(stmt, _SCOPES):
            out.append(stmt)
            continue
        is_loop = isinstance(stmt, _LOOPS)
        inside = 0
        for owner, field in _bodies(stmt):
            value = getattr(owner, field)
            deeper = in_loop or (is_loop and owner is stmt and field == "body")
            new, count = _mark_loops(value, in_loop=deeper)
            setattr(owner, field, new)
            if not is_loop or field == "body":
                inside += count
        if is_loop:
            assert isinstance(stmt, ast.For | ast.AsyncFor | ast.While)
            if inside:
                _defer_inner(stmt)
            if not inside and isinstance(stmt, ast.For):
                call = _bound_call("steps", [stmt.iter])
                stmt.iter = ast.copy_location(call, stmt.iter)
                inside = 1
            elif not inside:
                stmt.body = [_with(_bound_call("iteration"), stmt.body, stmt.body[0])]
                inside = 1
            if not in_loop:
                stmt = _with(_runtime_call("loop", []), [stmt], stmt, bound=True)
        innermost += inside
        out.append(stmt)
    return out, innermost


def _defer_inner(loop: ast.For | ast.AsyncFor | ast.While) -> None:
    """Defer the inner loops of a loop whose body runs more than they do (a sync after them, say).

    Those inner loops' iterations become ``iteration(True)``, and the loop's own body reports its
    end (``outer_iteration()``), so that a sync in it can still make the steps.
    """
    inner = [s for s in loop.body if isinstance(s, _LOOPS)]
    if not inner or len(inner) == len(loop.body):
        return
    marked = False
    for child in inner:
        if isinstance(child, ast.For) and _is_runtime_call(child.iter, "steps"):
            assert isinstance(child.iter, ast.Call)
            child.iter.args.append(ast.Constant(True))
            marked = True
            continue
        first = child.body[0] if child.body else None
        if isinstance(first, ast.With) and _is_runtime_call(
            first.items[0].context_expr, "iteration"
        ):
            call = first.items[0].context_expr
            assert isinstance(call, ast.Call)
            call.args = [ast.Constant(True)]
            marked = True
    if marked:
        loop.body = [_with(_bound_call("outer_iteration"), loop.body, loop.body[0])]


def _is_runtime_call(node: ast.expr, func: str) -> bool:
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == func
    ):
        return False
    module = node.func.value
    if isinstance(module, ast.Name):
        return module.id == _BOUND
    return (
        isinstance(module, ast.Call)
        and isinstance(module.func, ast.Name)
        and module.func.id == "__import__"
    )


def _time_inputs(body: list[ast.stmt]) -> None:
    """Wrap the iterable of each ``for`` loop in ``body`` in ``inputs()``.

    At any depth outside functions and classes, as ``inputs(<iterable>, "next(<iterable>)")``.
    """
    for stmt in body:
        if isinstance(stmt, _SCOPES):
            continue
        if isinstance(stmt, ast.For) and not _is_range(stmt.iter):
            name = label_for(f"next({ast.unparse(stmt.iter)})")
            call = _runtime_call("inputs", [stmt.iter, ast.Constant(name)])
            stmt.iter = ast.copy_location(call, stmt.iter)
        for owner, field in _bodies(stmt):
            _time_inputs(getattr(owner, field))


def _is_range(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
    )


def _bodies(stmt: ast.stmt) -> list[tuple[ast.AST, str]]:
    """The statement lists directly inside ``stmt``, as (owner, field) pairs."""
    found: list[tuple[ast.AST, str]] = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(stmt, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            found.append((stmt, field))
    for part in [*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]:
        if part.body:
            found.append((part, "body"))
    return found


def _label_body(
    body: list[ast.stmt],
    markers: Sequence[Marker],
    source_lines: Sequence[str],
    names: list[str],
    *,
    bounds: tuple[int, int],
) -> list[ast.stmt]:
    """Group one body's statements under the markers that stand at its own level.

    A marker stands at this level when it lies within ``bounds`` (the lines after the
    body's header, up to its end), outside every statement of the body, and is indented
    like the body's statements. Only the top level (no ``bounds`` above it) labels each
    ungrouped statement on its own.
    """
    if not body:
        return body
    lo, hi = bounds
    col = body[0].col_offset
    own = sorted(
        (
            m
            for m in markers
            if m.col == col
            and lo < m.line <= hi
            and not any(_first_line(s) <= m.line <= _last_line(s) for s in body)
        ),
        key=lambda m: m.line,
    )
    top_level = hi == _END
    out: list[ast.stmt] = []
    if _is_docstring(body[0]):
        out.append(body[0])
        body = body[1:]
    group: list[ast.stmt] = []
    group_name: str | None = None

    def flush() -> None:
        nonlocal group, group_name
        if group_name is not None and group:
            out.append(_with(_runtime_call("label", [ast.Constant(group_name)]), group, group[0]))
            names.append(group_name)
        group, group_name = [], None

    for stmt in body:
        while own and own[0].line < _first_line(stmt):
            flush()
            group_name = own.pop(0).name
        if _must_stay_bare(stmt):
            flush()
            out.append(stmt)
        elif group_name is not None:
            group.append(stmt)
        elif top_level:
            name = label_for(_source_line(source_lines, stmt))
            out.append(_with(_runtime_call("label", [ast.Constant(name)]), [stmt], stmt))
            names.append(name)
        else:
            out.append(stmt)
    flush()
    return out


def _label_nested(
    stmt: ast.stmt, markers: Sequence[Marker], source_lines: Sequence[str], names: list[str]
) -> None:
    """Apply the markers inside a compound statement to each of its bodies, depth first."""
    inner = [m for m in markers if _first_line(stmt) < m.line <= _last_line(stmt)]
    if not inner:
        return
    bodies: list[tuple[ast.AST, str, list[ast.stmt]]] = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(stmt, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            bodies.append((stmt, field, value))
    for part in [*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]:
        if part.body:
            bodies.append((part, "body", part.body))
    bodies.sort(key=lambda b: _first_line(b[2][0]))
    lo = _first_line(stmt)
    for owner, field, value in bodies:
        for child in value:
            _label_nested(child, inner, source_lines, names)
        lo = _header_line(source_lines, lo, value[0])
        hi = _last_line(value[-1])
        setattr(owner, field, _label_body(value, inner, (), names, bounds=(lo, hi)))
        lo = hi


def _header_line(source_lines: Sequence[str], after: int, first: ast.stmt) -> int:
    """The line of the header (``else:``, ``except:``, ...) that opens the body at ``first``.

    It is the last code line before it that is indented less. A marker belongs to the body only
    below that line; without the source, everything after ``after`` does.
    """
    for line in range(_first_line(first) - 1, after, -1):
        text = source_lines[line - 1] if 0 < line <= len(source_lines) else ""
        stripped = text.strip()
        indent = len(text) - len(text.lstrip())
        if stripped and not stripped.startswith("#") and indent < first.col_offset:
            return line
    return after


def _last_line(stmt: ast.stmt) -> int:
    end: int | None = stmt.end_lineno
    return end if end is not None else stmt.lineno


def _first_line(stmt: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _source_line(source_lines: Sequence[str], stmt: ast.stmt) -> str:
    index = _first_line(stmt) - 1
    if 0 <= index < len(source_lines) and source_lines[index].strip():
        return source_lines[index]
    return ast.unparse(stmt).splitlines()[0] if not isinstance(stmt, ast.Pass) else "pass"


def _is_docstring(stmt: ast.stmt) -> bool:
    """A leading string stays first, so that functions and classes keep their docstring."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _must_stay_bare(stmt: ast.stmt) -> bool:
    """``from __future__`` imports must stay first; ``global`` has nothing to time."""
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return True
    return isinstance(stmt, ast.Global | ast.Nonlocal)


def _runtime_call(func: str, args: list[ast.expr]) -> ast.Call:
    """``__import__('xprof_magic._cell.labels', fromlist=['_']).<func>(*args)``."""
    module = ast.Call(
        func=ast.Name(id="__import__", ctx=ast.Load()),
        args=[ast.Constant(_RUNTIME)],
        keywords=[ast.keyword(arg="fromlist", value=ast.List([ast.Constant("_")], ast.Load()))],
    )
    return ast.Call(
        func=ast.Attribute(value=module, attr=func, ctx=ast.Load()), args=args, keywords=[]
    )


def _bound_call(func: str, args: list[ast.expr] | None = None) -> ast.Call:
    """``_xprof_magic_labels_.<func>(*args)``: the runtime as the loop's ``with`` bound it."""
    module = ast.Name(id=_BOUND, ctx=ast.Load())
    return ast.Call(
        func=ast.Attribute(value=module, attr=func, ctx=ast.Load()), args=args or [], keywords=[]
    )


def _with(context: ast.expr, body: list[ast.stmt], where: ast.AST, bound: bool = False) -> ast.stmt:
    """``with context: body`` (``bound``: ``as`` the runtime's name, :data:`_BOUND`)."""
    target = ast.Name(id=_BOUND, ctx=ast.Store()) if bound else None
    node = ast.With(items=[ast.withitem(context_expr=context, optional_vars=target)], body=body)
    return _located(node, where)


def _located(node: ast.stmt, where: ast.AST) -> ast.stmt:
    """Give a new node the position of the code it wraps, so tracebacks point at user lines."""
    for child in ast.walk(node):
        if "lineno" in child._attributes and not hasattr(child, "lineno"):
            ast.copy_location(child, where)
    ast.copy_location(node, where)
    return node
