"""What a capture is asked to do, decided before any of it happens.

The magic turns ``%%xprof`` options into a :class:`Plan`, the script API turns
:func:`xprof_magic.capture`'s arguments into one; :class:`~xprof_magic._capture.Capture`
carries it out. IPython-free.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from xprof_magic import _logdir, _store
from xprof_magic._registry import DEFAULT_PORT
from xprof_magic._steps import StepWindow

__all__ = ["DEFAULT_PORT", "NO_SERVER_ENV", "Plan", "choose_backend", "server_by_default"]

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
    options: dict[str, Any] = field(default_factory=dict)

    def with_name(self) -> Plan:
        """The plan with its run name made safe, or a default one that sorts by time; a
        :class:`~xprof_magic._capture.Capture` calls it once. Raises ``ValueError`` for a
        name with no usable character."""
        if self.name is None:
            name = _store.default_run_name(datetime.now(), self.cell_number)
        else:
            name = _store.safe_run_name(self.name)
        return replace(self, name=name)


# A top-level package (of an import, or of a value's module) and the backend it means.
_FRAMEWORKS = {
    "jax": "jax",
    "jaxlib": "jax",
    "flax": "jax",
    "optax": "jax",
    "equinox": "jax",
    "torch_xla": "torch_xla",
    "torch": "torch_xla",
}
_DEFAULT_BACKEND = "torch_xla"


def _root(module: object) -> str:
    return str(module).partition(".")[0]


def _imported_by(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_FRAMEWORKS.get(_root(a.name), "") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(_FRAMEWORKS.get(_root(node.module), ""))
    found.discard("")
    return found


def _framework_of(value: object) -> str:
    """The backend a namespace value belongs to: a module, or an object (an array, a
    jitted function, a tensor) whose type comes from a framework's package."""
    module = getattr(value, "__name__", None) if isinstance(value, type(sys)) else None
    if module is None:
        module = getattr(type(value), "__module__", "")
    return _FRAMEWORKS.get(_root(module), "")


def choose_backend(cell: str, namespace: Mapping[str, object]) -> tuple[str, str]:
    """The backend for ``--backend auto``, and a one-line message when it was a guess.

    In order: the frameworks the cell imports itself; then those of the names the cell
    uses, as the user's namespace binds them (``jnp``, ``xm``, a jitted function, an
    array); then those the user imported in earlier cells (modules in the namespace); only
    installed frameworks count. A tie at the first step that finds any is no choice:
    torch_xla is used and the message says how to pick. When the user's code shows neither
    (a cell of plain Python), torch_xla, unless only JAX is installed. ``sys.modules`` is
    not asked: torch_xla's profiler imports JAX by itself where JAX is installed.
    """
    try:
        tree: ast.AST | None = ast.parse(cell)
    except SyntaxError:
        tree = None
    candidates: list[set[str]] = []
    if tree is not None:
        candidates.append(_imported_by(tree))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        candidates.append({_framework_of(namespace[n]) for n in used if n in namespace})
    candidates.append(
        {
            _framework_of(v)
            for k, v in namespace.items()
            if isinstance(v, type(sys)) and k[:1] != "_"
        }
    )
    installed = {name for name in ("jax", "torch_xla") if importlib.util.find_spec(name)}
    for found in candidates:
        found &= installed  # plain torch, without torch_xla, is no choice of a backend
        if len(found) == 1:
            return found.pop(), ""
        if len(found) > 1:
            return _DEFAULT_BACKEND, (
                f"this cell could be profiled with jax or torch_xla; {_DEFAULT_BACKEND} "
                "was used: pick one with %%xprof --backend jax (or --backend torch_xla)"
            )
    # Nothing in the user's code points anywhere: either profiles the host alike.
    return ("jax" if installed == {"jax"} else _DEFAULT_BACKEND), ""
