"""ARCHITECTURE.md's "may import" table, read as rules, and every import of the package's
modules checked against them (for ``tests/test_architecture.py``).

The table is the single source: each row names where (a module ``_units.py``, a package
``_backends/``, a module of a package ``_backends/jax.py``; the most specific row wins) and
what it may import, as clauses separated by ``;``: backticked parts (``_runs/store.py``,
``_analysis/model/``), the phrase "every part below" (every part a later row names), and
backticked third-party modules (``numpy``, ``google.protobuf``: the module and its
submodules). A clause's parenthesis that begins "lazily" allows its imports only inside a
function or for type checking, "types only" only for type checking; any other parenthesis
is prose. Its own part and the standard library are always allowed.

The rows run from the top of the package down: a row may name only parts of the rows below
it (:func:`upward`), but for types only, so that no allowed import runs back up.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Clause",
    "ImportNode",
    "Row",
    "Use",
    "import_nodes",
    "module_imports",
    "read_table",
    "upward",
    "violations",
]

ImportNode = ast.Import | ast.ImportFrom
LAZILY, TYPES_ONLY = "lazily", "types only"
BELOW = "every part below"
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Use:
    """One module imported by another: where, and whether only lazily or for type checking."""

    target: str
    line: int
    in_function: bool
    typing_only: bool


@dataclass(frozen=True)
class Clause:
    parts: tuple[str, ...]
    """Package parts as the table writes them (``_runs/store.py``, ``_backends/``)."""
    libraries: tuple[str, ...]
    qualifier: str


@dataclass(frozen=True)
class Row:
    where: tuple[str, ...]
    what: str
    clauses: tuple[Clause, ...]


def _is_type_checking(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:``: a block that only type checkers run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST) -> Iterator[tuple[ImportNode, bool, bool]]:
    """Every import statement at any depth: whether it is inside a function, and whether it
    is inside an ``if TYPE_CHECKING:`` block."""

    def walk(
        node: ast.AST, in_function: bool, typing_only: bool
    ) -> Iterator[tuple[ImportNode, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, typing_only
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            typing = typing_only or (isinstance(child, ast.stmt) and _is_type_checking(child))
            yield from walk(child, inner, typing)

    yield from walk(tree, False, False)


def _targets(name: str, path: Path, node: ImportNode, modules: Mapping[str, Path]) -> list[str]:
    """The modules (of the package or not) one import statement of ``name`` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    subs = [f"{base}.{alias.name}" for alias in node.names]
    return [sub for sub in subs if sub in modules] or [base]


def module_imports(
    name: str, path: Path, modules: Mapping[str, Path], source: str | None = None
) -> list[Use]:
    """Every import of module ``name`` (its file ``path``, or ``source``), but of itself."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    return [
        Use(target, node.lineno, in_function, typing_only)
        for node, in_function, typing_only in import_nodes(tree)
        for target in _targets(name, path, node, modules)
        if target != name
    ]


def _depth_zero(text: str) -> tuple[str, list[str]]:
    """``text`` without its parentheses, and the parentheses' contents."""
    outside, inside, depth, current = [], [], 0, ""
    for char in text:
        if char == "(":
            if depth == 0:
                current = ""
            else:
                current += char
            depth += 1
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                inside.append(current)
            else:
                current += char
        elif depth:
            current += char
        else:
            outside.append(char)
    return "".join(outside), inside


def _clause(text: str) -> Clause:
    bare, notes = _depth_zero(text)
    qualifier = ""
    for note in notes:
        for kind in (LAZILY, TYPES_ONLY):
            if note.strip().startswith(kind):
                qualifier = kind
    names = re.findall(r"`([^`]+)`", bare)
    parts = [n for n in names if n.endswith((".py", "/"))]
    if "every part below" in bare:
        parts.append(BELOW)
    libraries = [n for n in names if not n.endswith((".py", "/"))]
    return Clause(tuple(parts), tuple(libraries), qualifier)


def read_table(markdown: str) -> list[Row]:
    """The rows of the table whose header is ``| where | what | may import |``."""
    lines = markdown.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("| where | what | may import |")
    )
    rows: list[Row] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        where, what, may = (cell.strip() for cell in line.strip().strip("|").split(" | "))
        clauses = tuple(_clause(text) for text in may.split(";") if text.strip())
        rows.append(Row(tuple(re.findall(r"`([^`]+)`", where)), what, clauses))
    return [
        Row(
            row.where,
            row.what,
            tuple(
                Clause(
                    tuple(
                        p
                        for part in c.parts
                        for p in (
                            [w for later in rows[i + 1 :] for w in later.where]
                            if part == BELOW
                            else [part]
                        )
                    ),
                    c.libraries,
                    c.qualifier,
                )
                for c in row.clauses
            ),
        )
        for i, row in enumerate(rows)
    ]


def _module_of(part: str) -> tuple[str, bool]:
    """A table path as a dotted module name, and whether it names a package (its modules)."""
    if part.endswith("/"):
        return "xprof_magic." + part.rstrip("/").replace("/", "."), True
    stem = part[: -len(".py")].replace("/", ".").removesuffix("__init__").rstrip(".")
    return (f"xprof_magic.{stem}" if stem else "xprof_magic"), False


def _names(part: str, module: str) -> bool:
    name, package = _module_of(part)
    return module == name or (package and module.startswith(name + "."))


def row_of(module: str, rows: list[Row]) -> tuple[Row, str] | None:
    """The most specific row naming ``module`` (a module before its package, a deeper
    package before a shallower one), and the path it names it by."""
    found = [
        ((not _module_of(part)[1], len(part)), row, part)
        for row in rows
        for part in row.where
        if _names(part, module)
    ]
    if not found:
        return None
    _, row, part = max(found, key=lambda f: f[0])
    return row, part


def _allowed(use: Use, clause: Clause, is_package_module: bool) -> bool:
    names = (
        any(_names(part, use.target) for part in clause.parts)
        if is_package_module
        else any(use.target == lib or use.target.startswith(lib + ".") for lib in clause.libraries)
    )
    if not names:
        return False
    if clause.qualifier == LAZILY:
        return use.in_function or use.typing_only
    if clause.qualifier == TYPES_ONLY:
        return use.typing_only
    return True


def _index(row: Row, rows: list[Row]) -> int:
    return next(k for k, other in enumerate(rows) if other is row)


def violations(
    rows: list[Row], modules: Mapping[str, Path], sources: Mapping[str, str] | None = None
) -> list[str]:
    """Every import of the package's modules that the table does not allow, as
    ``module:line imports target: why``; a module of ``sources`` is read from there. An
    import of a module whose row is above the importer's runs back up: none is allowed but
    for type checking."""
    sources = sources or {}
    found: list[str] = []
    for name, path in sorted(modules.items()):
        mine = row_of(name, rows)
        if mine is None:
            found.append(f"{name}: no row of ARCHITECTURE.md's table names it")
            continue
        row, part = mine
        for use in module_imports(name, path, modules, sources.get(name)):
            inside = use.target in modules or use.target.split(".")[0] == "xprof_magic"
            if inside and use.target not in modules:
                continue
            if not inside and use.target.split(".")[0] in _STDLIB:
                continue
            target = row_of(use.target, rows) if inside else None
            if target is not None and target[0] is row:
                continue
            above = target is not None and _index(target[0], rows) < _index(row, rows)
            if target is not None and above and not use.typing_only:
                found.append(
                    f"{name}:{use.line} imports {use.target}: the row `{part}` is below "
                    f"the row `{target[1]}`, and an import never runs back up"
                )
                continue
            if any(_allowed(use, clause, inside) for clause in row.clauses):
                continue
            lazily = any(
                _allowed(Use(use.target, use.line, True, True), clause, inside)
                for clause in row.clauses
            )
            why = "only lazily" if lazily else "not at all"
            found.append(
                f"{name}:{use.line} imports {use.target}: the row `{part}` allows it {why}"
            )
    return found


def upward(rows: list[Row], modules: Mapping[str, Path]) -> list[str]:
    """Every part a row allows (but for types only) that holds only modules of rows above
    it: the table runs from the top of the package down, and an import never runs back up
    (a part such as ``_backends/`` names, for a row inside it, its modules below that row)."""
    found: list[str] = []
    for i, row in enumerate(rows):
        for clause in row.clauses:
            if clause.qualifier == TYPES_ONLY:
                continue
            for part in clause.parts:
                named = [row_of(m, rows) for m in modules if _names(part, m)]
                places = [_index(r[0], rows) for r in named if r is not None]
                if places and max(places) < i:
                    found.append(f"the row `{row.where[0]}` allows `{part}`, which is above it")
    return found
