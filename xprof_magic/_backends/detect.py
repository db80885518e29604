"""``--backend auto``: which registered backend a cell's code uses.

Every rule comes from the backends' registry entries (:class:`~xprof_magic._backends.registry.
Detection`), so this module names no backend. IPython-free, and it imports no framework: it
reads the cell's syntax tree, the modules of the user's values and what is installed.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Mapping

from xprof_magic._backends.registry import BACKENDS, Detection

__all__ = ["choose_backend"]

_Module = type(sys)


def _root(module: object) -> str:
    return str(module).partition(".")[0]


def _meanings() -> dict[str, str]:
    """Each package a rule names and what it means.

    A backend's name, or the package itself where backends share it (``torch``).
    """
    meaning: dict[str, str] = {}
    for name, entry in BACKENDS.items():
        for package in entry.detection.shares:
            meaning[package] = package
        for package in entry.detection.packages:
            meaning[package] = name
    return meaning


def _imported_by(tree: ast.AST, meaning: Mapping[str, str]) -> set[str]:
    """What the cell imports, and the backends whose own syntax it uses (TorchTPU's device)."""
    rules = [(name, e.detection.names) for name, e in BACKENDS.items() if e.detection.names]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(meaning.get(_root(a.name), "") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(meaning.get(_root(node.module), ""))
        else:
            found.update(name for name, names in rules if names(node))
    found.discard("")
    return found


def _owner(value: object, meaning: Mapping[str, str]) -> str:
    """What a namespace value means: a module, or an object whose type is a framework's.

    Such an object's type comes from a framework's package: an array, a jitted function, a tensor; a
    value of a shared package may be one backend's by its own rule (a tensor on TorchTPU's device).
    """
    module = getattr(value, "__name__", None) if isinstance(value, _Module) else None
    if module is None:
        module = getattr(type(value), "__module__", "")
    root = _root(module)
    found = meaning.get(root, "")
    if found == root and not isinstance(value, _Module):
        for name, entry in BACKENDS.items():
            rule = entry.detection
            if root in rule.shares and rule.owns is not None and rule.owns(value):
                return name
    return found


def _installed(rule: Detection) -> bool:
    return bool(rule.packages) and importlib.util.find_spec(rule.packages[0]) is not None


def choose_backend(cell: str, namespace: Mapping[str, object]) -> tuple[str, str]:
    """The backend for ``--backend auto``, and a one-line message when it was a guess.

    In order: the backends the cell imports itself (or whose own syntax it uses, such as
    TorchTPU's ``tpu`` device); then those of the names the cell uses, as the user's
    namespace binds them (``jnp``, ``xm``, a jitted function, an array, a tensor on ``tpu``);
    then those the user imported in earlier cells (modules in the namespace); only installed
    backends count. A shared package alone (plain ``torch``) means the backend sharing it
    that earlier cells imported, else the first installed in registry order (torch_xla,
    then TorchTPU), and where another sharing it is installed too a message says how to pick
    it. A tie at the first step that finds any is no choice: the first of them in registry
    order is used and the message says how to pick. When the user's code shows none (a cell
    of plain Python): the first installed in registry order. ``sys.modules`` is not asked:
    torch_xla's profiler imports JAX by itself where JAX is installed, and ``import torch``
    loads TorchTPU where it is installed.
    """
    meaning = _meanings()
    try:
        tree: ast.AST | None = ast.parse(cell)
    except SyntaxError:
        tree = None
    candidates: list[set[str]] = []
    if tree is not None:
        candidates.append(_imported_by(tree, meaning))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        candidates.append({_owner(namespace[n], meaning) for n in used if n in namespace})
    earlier = {
        _owner(v, meaning) for k, v in namespace.items() if isinstance(v, _Module) and k[:1] != "_"
    }
    candidates.append(set(earlier))
    installed = [name for name, entry in BACKENDS.items() if _installed(entry.detection)]
    for found in candidates:
        chosen = _choice(found, installed, earlier)
        if chosen is not None:
            return chosen
    # Nothing in the user's code points anywhere: each profiles the host alike.
    return (installed or list(BACKENDS))[0], ""


def _choice(found: set[str], installed: list[str], earlier: set[str]) -> tuple[str, str] | None:
    """The backend of one step's findings (backends and shared packages), if they name one."""
    shared: dict[str, list[str]] = {}
    for package in [p for p in found if p not in BACKENDS]:
        found.discard(package)
        family = [n for n in installed if package in BACKENDS[n].detection.shares]
        if family and not found & set(family):
            shared[package] = family
            found.add(sorted(family, key=lambda n: n not in earlier)[0])
    found &= set(installed)
    if len(found) == 1:
        backend = found.pop()
        for package, family in shared.items():
            if backend == family[0] and len(family) > 1:
                others = family[1:]
                how = " or ".join(f"import {BACKENDS[n].detection.packages[0]}" for n in others)
                pick = " or ".join(f"%%xprof --backend {n}" for n in others)
                return backend, (
                    f"both {backend} and {' and '.join(others)} are installed; this {package} "
                    f"cell was profiled with {backend}: for {' or '.join(others)}, {how} or "
                    f"use {pick}"
                )
        return backend, ""
    if len(found) > 1:
        default = next(n for n in installed if n in found)
        rest = " or ".join(f"--backend {n}" for n in sorted(found - {default}))
        return default, (
            f"this cell could be profiled with {' or '.join(sorted(found))}; {default} was "
            f"used: pick one with %%xprof {rest} (or --backend {default})"
        )
    return None
