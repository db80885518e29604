"""The package's shape, checked: where IPython may be imported, no import cycles, module size.

ARCHITECTURE.md states these rules; these tests keep them true as the code grows.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import xprof_magic

PACKAGE = Path(xprof_magic.__file__).resolve().parent
NOTEBOOK = "xprof_magic._notebook"
FRONTEND_MODULES = ("IPython", "ipywidgets", "ipykernel", "traitlets")
MAX_LINES = 400
LONG_REASON = "Long because"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every module of the package that ``name`` imports, at any depth of its code."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{alias.name}" for alias in node.names]
            targets = [sub for sub in subs if sub in MODULES] or [base]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def test_every_module_is_found() -> None:
    assert {"xprof_magic", "xprof_magic._capture", f"{NOTEBOOK}.magic"} <= set(MODULES)


def test_no_import_cycles_even_inside_functions() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert cycles == []


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    """The import reader sees imports inside functions, so a hidden cycle would be caught."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from xprof_magic import _store\n")
    assert _imports("xprof_magic._fake", source) == {"xprof_magic._store"}


CORE = sorted(
    name for name in MODULES if not name.startswith(NOTEBOOK) and not name.endswith("__main__")
)


@pytest.mark.parametrize("module", CORE)
def test_only_the_notebook_package_imports_the_frontend(module: str) -> None:
    probe = (
        f"import sys, {module}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRONTEND_MODULES!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_frontend_probe_can_fail() -> None:
    probe = f"import sys, {NOTEBOOK}.magic\nprint('IPython' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small_or_say_why(module: str) -> None:
    path = MODULES[module]
    lines = len(path.read_text(encoding="utf-8").splitlines())
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert lines <= MAX_LINES or LONG_REASON in doc, (
        f"{module} has {lines} lines; split it, or say in its docstring '{LONG_REASON} …'"
    )
