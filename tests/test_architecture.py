"""The package's shape, checked: a root that holds the public face and one folder per stage,
ARCHITECTURE.md's "may import" table (its rows from the top of the package down, no import
running back up), where IPython may be imported, no import circles (in the package and in
``bench/``), module size, Colab branches only in the notebook context and the Colab frame, no
probing of a backend object, a ``%load_ext`` that imports nothing heavy, and a marimo front
apart from the notebook's.

ARCHITECTURE.md states these rules; these tests keep them true as the code grows. The static
rules read the modules' syntax trees, not their text, and each has a test that it can fail.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import xprof_magic
from tests._import_table import Clause, Row, module_imports, read_table, row_of, upward, violations

PACKAGE = Path(xprof_magic.__file__).resolve().parent
BENCH = PACKAGE.parent / "bench"
# What the root holds besides the stages' folders: the public face, and four leaves.
PUBLIC_FACE = (
    "__init__.py",
    "__main__.py",
    "_units.py",
    "_version.py",
    "_codec.py",
    "_protoschema.py",
)
NOTEBOOK = "xprof_magic._notebook"
MARIMO = "xprof_magic._marimo"
# The marimo view is an anywidget, which brings ipywidgets, traitlets and IPython with it.
MARIMO_VIEW = f"{MARIMO}.view"
FRONTEND_MODULES = ("IPython", "ipywidgets", "ipykernel", "traitlets")
MAX_LINES = 600
"""A soft cap: a module holds what belongs together; past this, it holds two jobs."""
# Where the notebook context is decided and where Colab's output frame is made: the only two
# places that may ask whether this is Colab.
COLAB_MODULES = {f"{NOTEBOOK}.context", f"{NOTEBOOK}.colab"}
# What ``%load_ext xprof_magic`` must not import: the analysis and its numpy and protobuf.
HEAVY_AT_LOAD = ("numpy", "google.protobuf", "xprof_magic._analysis")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# The benchmarks, for the circle check: they import the package and one another.
BENCH_MODULES = {_module_name(p): p for p in sorted(BENCH.glob("*.py"))}
ARCHITECTURE = Path(__file__).resolve().parent.parent / "ARCHITECTURE.md"


def _imports(
    name: str,
    path: Path,
    typing_too: bool = True,
    modules: dict[str, Path] = MODULES,
    source: str | None = None,
) -> set[str]:
    """Every module of ``modules`` that ``name`` imports (its file ``path``, or ``source``),
    at any depth of its code (with ``typing_too`` False, leaving out imports only type
    checkers run)."""
    return {
        use.target
        for use in module_imports(name, path, modules, source)
        if use.target in modules and (typing_too or not use.typing_only)
    }


def test_every_module_is_found() -> None:
    assert {"xprof_magic", "xprof_magic._capture.capture", f"{NOTEBOOK}.magic"} <= set(MODULES)
    assert {"bench.first_paint", "bench.first_paint_cell"} <= set(BENCH_MODULES)


def _cycles(sources: dict[str, str] | None = None) -> list[list[str]]:
    """The import circles among the package's and the benchmarks' modules (a module of
    ``sources`` read from there), imports inside functions included, those only type
    checkers run (``if TYPE_CHECKING:``) left out: a renderer names the model's types."""
    modules = {**MODULES, **BENCH_MODULES}
    sources = sources or {}
    graph = {
        name: _imports(name, path, False, modules, sources.get(name))
        for name, path in modules.items()
    }
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
    return cycles


def test_no_import_cycles_even_inside_functions() -> None:
    """Not in the package, not in ``bench/``: a model never imports its renderer, not even
    in a display method, and no benchmark imports one that imports it."""
    assert _cycles() == []


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    """The import reader sees imports inside functions, so a hidden cycle would be caught:
    the model's display importing the render stage, as it once did, is one."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from xprof_magic import _units\n"
        "def f():\n    from xprof_magic._runs import store\n"
    )
    assert _imports("xprof_magic._fake", source, typing_too=False) == {"xprof_magic._runs.store"}
    assert _imports("xprof_magic._fake", source) == {
        "xprof_magic._runs.store",
        "xprof_magic._units",
    }
    model = "xprof_magic._analysis.model.summary"
    lazy = MODULES[model].read_text(encoding="utf-8") + (
        "\ndef _shown():\n    from xprof_magic._analysis.render import display_hooks\n"
    )
    assert any(model in cycle for cycle in _cycles({model: lazy}))
    bench = "from bench import first_paint\n"
    assert ["bench.first_paint", "bench.first_paint_cell"] in _cycles(
        {"bench.first_paint_cell": bench}
    )


def test_the_root_holds_the_public_face_and_folders() -> None:
    """One folder per stage; at the root, only the public face and its leaves."""
    assert _strays(PACKAGE) == []


def _strays(package: Path) -> list[str]:
    """The modules at ``package``'s root that are not the public face."""
    return sorted(p.name for p in package.glob("*.py") if p.name not in PUBLIC_FACE)


def test_the_root_check_can_fail(tmp_path: Path) -> None:
    for name in (*PUBLIC_FACE, "_plan.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "_capture").mkdir()
    (tmp_path / "_capture" / "plan.py").write_text("")
    assert _strays(tmp_path) == ["_plan.py"]


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))
def test_every_folder_says_what_it_owns_and_may_import(folder: str) -> None:
    """Its ``__init__``'s docstring: what the folder owns, and what it may import."""
    source = (PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert "may import" in doc.lower(), f"{folder}/__init__.py: say what it owns and may import"


def _table() -> list[Row]:
    return read_table(ARCHITECTURE.read_text(encoding="utf-8"))


def test_every_import_is_one_architecture_md_allows() -> None:
    """Each import between the package's parts, and of each third-party library, is one its
    row of the table allows (lazily where it says so); an allowed edge need not be used."""
    found = violations(_table(), MODULES)
    assert not found, "\n".join(
        [*found, "change the import, or the row of ARCHITECTURE.md's table that forbids it"]
    )


def test_every_part_the_table_names_exists() -> None:
    """A path in the table that names no module is a typo, or a part that moved."""
    rows = _table()
    named = {p for row in rows for p in row.where} | {
        p for row in rows for clause in row.clauses for p in clause.parts
    }
    missing = [p for p in sorted(named) if not any(row_of(m, [_only(p)]) for m in MODULES)]
    assert not missing, f"ARCHITECTURE.md's table names {missing}, which are not modules"


def test_the_table_runs_from_the_top_of_the_package_down() -> None:
    """No row allows a part above it (but for types only): a lower stage never imports a
    higher one, and :func:`violations` refuses any import that runs back up."""
    found = upward(_table(), MODULES)
    assert not found, "\n".join([*found, "move the row, or the import"])


def test_the_upward_check_can_fail() -> None:
    rows = _table()
    runs = next(i for i, row in enumerate(rows) if row.where == ("_runs/",))
    notebook = Clause(("_notebook/",), (), "")
    rows[runs] = replace(rows[runs], clauses=(*rows[runs].clauses, notebook))
    assert upward(rows, MODULES) == ["the row `_runs/` allows `_notebook/`, which is above it"]


def _only(part: str) -> Row:
    return Row((part,), "", ())


def test_the_table_check_can_fail() -> None:
    """A forbidden import fails, at import time where only a lazy one is allowed too, and
    always where it runs back up; an allowed one that the code stops using changes nothing."""
    rows = _table()
    guard, model = "xprof_magic._viewer.app.guard", "xprof_magic._analysis.model.summary"
    logdir, store = "xprof_magic._runs.logdir", "xprof_magic._runs.store"
    sources = {
        guard: "import numpy\nfrom xprof_magic import _analysis\ndef f():\n    import xprof\n",
        model: "def f():\n    from xprof_magic._analysis.render import text\n",
        logdir: "from xprof_magic._runs import gcs\n",
        store: "def f():\n    from xprof_magic._capture import capture\n",
        "xprof_magic._runs.gcs": "",
    }
    found = violations(rows, MODULES, sources)
    assert [f.split(": the row")[0] for f in found] == [
        f"{model}:2 imports xprof_magic._analysis.render.text",
        f"{logdir}:1 imports xprof_magic._runs.gcs",
        f"{store}:2 imports xprof_magic._capture.capture",
        f"{guard}:1 imports numpy",
        f"{guard}:2 imports xprof_magic._analysis",
    ]
    whys = ["runs back up", "allows it only lazily", "runs back up", "not at all", "not at all"]
    assert all(why in f for why, f in zip(whys, found, strict=True)), found


CORE = sorted(
    name
    for name in MODULES
    if not name.startswith((NOTEBOOK, MARIMO_VIEW)) and not name.endswith("__main__")
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
def test_no_module_is_over_600_lines(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES}): split it by job"


@pytest.mark.parametrize("module", sorted(n for n in MODULES if n.startswith(MARIMO)))
def test_the_marimo_front_stays_apart_from_the_notebook_and_imports_no_marimo(module: str) -> None:
    """``xprof_magic.profile`` works in a script without marimo; only the view, shown in
    marimo, imports anywidget; no module of the marimo front reaches into ``_notebook``."""
    assert not [t for t in _imports(module, MODULES[module]) if t.startswith(NOTEBOOK)]
    found = "sorted(m for m in ('marimo', 'anywidget') if m in sys.modules)"
    probe = f"import sys, {module}\nprint({found})"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    expected = "['anywidget']" if module == MARIMO_VIEW else "[]"
    assert done.stdout.strip().splitlines()[-1] == expected


def test_only_the_public_api_imports_the_marimo_front() -> None:
    importers = sorted(
        name
        for name, path in MODULES.items()
        if not name.startswith(MARIMO) and any(t.startswith(MARIMO) for t in _imports(name, path))
    )
    assert importers == ["xprof_magic"]


def test_viewer_modules_never_import_through_the_viewer_package() -> None:
    """``_viewer``'s modules import each other directly, never through its ``__init__``,
    which imports them: a module that did would see the package half-initialised."""
    package = "xprof_magic._viewer"
    inside = {name for name in MODULES if name.startswith(f"{package}.")}
    parts = (
        "process.client",
        "app.guard",
        "process.os_process",
        "process.manager",
        "process.server",
    )
    assert {f"{package}.{m}" for m in parts} <= inside
    assert [name for name in sorted(inside) if package in _imports(name, MODULES[name])] == []


def _colab_tests(tree: ast.AST) -> list[int]:
    """Lines that compare something with ``"colab"`` (``==``, ``!=``, ``in``, ``is``, or a
    ``case "colab":``): a branch on the notebook being Colab."""

    def colab(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return node.value == "colab"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(colab(item) for item in node.elts)
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(colab, [node.left, *node.comparators])):
            found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and colab(node.value):
            found.append(node.value.lineno)
    return found


def test_only_the_context_and_the_colab_frame_branch_on_colab() -> None:
    found = {
        f"{name}:{line}"
        for name, path in MODULES.items()
        if name not in COLAB_MODULES
        for line in _colab_tests(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert not found, f"{sorted(found)}: ask the notebook context, or move it to the Colab frame"


def test_the_colab_check_can_fail() -> None:
    source = (
        'if context.kind == "colab":\n    pass\n'
        'x = self.kind != "colab"\n'
        'y = kind in ("colab", "proxy")\n'
        'match kind:\n    case "colab":\n        pass\n'
        'z = kind == "jupyter" and name == "colab.py"\n'
    )
    assert _colab_tests(ast.parse(source)) == [1, 3, 4, 6]


def _backend_probes(tree: ast.AST) -> list[int]:
    """Lines that probe or poke a backend object instead of calling its protocol:
    ``getattr``/``hasattr``/``setattr``/``vars`` of it, or its ``__dict__``. A backend object
    is a name or an attribute named like one (``backend``, ``self._backend``, ``plan.backend``)."""

    def is_backend(node: ast.expr) -> bool:
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
        return isinstance(node, (ast.Name, ast.Attribute)) and "backend" in name.lower()

    probes = ("getattr", "hasattr", "setattr", "vars")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in probes and is_backend(node.args[0]):
                found.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "__dict__" and is_backend(node.value):
            found.append(node.lineno)
    return sorted(set(found))


def test_no_module_probes_a_backend_object() -> None:
    found = sorted(
        f"{name}:{line}"
        for name, path in MODULES.items()
        for line in _backend_probes(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not found, f"{found}: add what is needed to the Backend protocol and call that"


def test_the_backend_probe_check_can_fail() -> None:
    source = (
        'hooks = getattr(backend, "user_hooks", None)\n'
        'ok = hasattr(self._backend, "watch")\n'
        'said = plan.backend.__dict__.setdefault("x", set())\n'
        'other = getattr(self.shell, "user_ns", {})\n'
        "fine = backend.user_hooks()\n"
    )
    assert _backend_probes(ast.parse(source)) == [1, 2, 3]


def _loaded_after_load_ext(before_load: str = "") -> list[str]:
    """Load the extension into IPython's ``InteractiveShell`` in a fresh interpreter; which of
    ``HEAVY_AT_LOAD`` are in ``sys.modules`` then (``before_load`` runs between the shell's
    start and the load; IPython's own start imports none of them)."""
    probe = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        f"{before_load}\n"
        "ip.run_line_magic('load_ext', 'xprof_magic')\n"
        "assert 'xprof' in ip.magics_manager.magics['cell']\n"
        f"heavy = {HEAVY_AT_LOAD!r}\n"
        "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
        "for h in heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found: list[str] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return found


def test_load_ext_imports_no_numpy_protobuf_or_analysis() -> None:
    found = _loaded_after_load_ext()
    heavy = [h for h in HEAVY_AT_LOAD if any(m == h or m.startswith(f"{h}.") for m in found)]
    assert not heavy, f"%load_ext xprof_magic imported {heavy}: import them where they are used"


def test_the_load_ext_probe_can_fail() -> None:
    found = _loaded_after_load_ext("import xprof_magic._analysis")
    assert {"numpy", "google.protobuf", "xprof_magic._analysis"} <= set(found)
