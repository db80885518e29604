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
from xprof_magic._step_window import StepWindow

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
_TORCH = "torch"
_FRAMEWORKS = {
    "jax": "jax",
    "jaxlib": "jax",
    "flax": "jax",
    "optax": "jax",
    "equinox": "jax",
    "torch_xla": "torch_xla",
    "torch_tpu": "torch_tpu",
    # Plain torch: torch_xla or TorchTPU, whichever choose_backend decides.
    "torch": _TORCH,
}
_DEFAULT_BACKEND = "torch_xla"


def _root(module: object) -> str:
    return str(module).partition(".")[0]


def _imported_by(tree: ast.AST) -> set[str]:
    """The frameworks the cell imports, and TorchTPU where it names the ``tpu`` device
    (``"tpu"``, ``"tpu:0"``, ``.tpu()``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_FRAMEWORKS.get(_root(a.name), "") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(_FRAMEWORKS.get(_root(node.module), ""))
        elif _names_tpu(node):
            found.add("torch_tpu")
    found.discard("")
    return found


def _names_tpu(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "tpu" or node.value.startswith("tpu:")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "tpu"
    )


def _framework_of(value: object) -> str:
    """The backend a namespace value belongs to: a module, or an object (an array, a
    jitted function, a tensor) whose type comes from a framework's package."""
    module = getattr(value, "__name__", None) if isinstance(value, type(sys)) else None
    if module is None:
        module = getattr(type(value), "__module__", "")
    found = _FRAMEWORKS.get(_root(module), "")
    if found == _TORCH and not isinstance(value, type(sys)):
        # A tensor or module on the tpu device, or the device itself, is TorchTPU's.
        device = value if type(value).__name__ == "device" else getattr(value, "device", None)
        if getattr(device, "type", None) == "tpu":
            return "torch_tpu"
    return found


def choose_backend(cell: str, namespace: Mapping[str, object]) -> tuple[str, str]:
    """The backend for ``--backend auto``, and a one-line message when it was a guess.

    In order: the frameworks the cell imports itself (TorchTPU also where the cell names
    the ``tpu`` device); then those of the names the cell uses, as the user's namespace
    binds them (``jnp``, ``xm``, a jitted function, an array, a tensor on ``tpu``); then
    those the user imported in earlier cells (modules in the namespace); only installed
    frameworks count. Plain ``torch`` means the torch framework earlier cells imported
    (torch_xla or torch_tpu), else torch_xla where it is installed, else TorchTPU (installed,
    TorchTPU is what ``import torch`` loads); with both installed (two environments'
    packages in one) torch_xla, and a message says how to pick TorchTPU. A tie at the first
    step that finds any is no choice: torch_xla is used (else TorchTPU) and the message says
    how to pick. When the user's code shows none (a cell of
    plain Python): torch_xla, else TorchTPU, else JAX, whichever is installed first.
    ``sys.modules`` is not asked: torch_xla's profiler imports JAX by itself where JAX is
    installed, and ``import torch`` loads TorchTPU where it is installed.
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
    earlier = {
        _framework_of(v) for k, v in namespace.items() if isinstance(v, type(sys)) and k[:1] != "_"
    }
    candidates.append(set(earlier))
    installed = {
        name for name in ("jax", "torch_xla", "torch_tpu") if importlib.util.find_spec(name)
    }
    # Plain torch: the torch framework of the earlier cells, else the first one installed.
    torch_family = [name for name in ("torch_xla", "torch_tpu") if name in installed]
    torch_family.sort(key=lambda name: name not in earlier)
    for found in candidates:
        plain_torch = _TORCH in found and not found & set(torch_family)
        found.discard(_TORCH)
        if plain_torch and torch_family:
            found.add(torch_family[0])
        found &= installed  # plain torch, with neither torch_xla nor TorchTPU, is no choice
        if len(found) == 1:
            backend = found.pop()
            if plain_torch and backend == "torch_xla" and "torch_tpu" in installed:
                return backend, (
                    "both torch_xla and torch_tpu are installed; this torch cell was profiled "
                    "with torch_xla: for TorchTPU, import torch_tpu or use %%xprof --backend "
                    "torch_tpu"
                )
            return backend, ""
        if len(found) > 1:
            default = next(n for n in (_DEFAULT_BACKEND, "torch_tpu") if n in found)
            others = " or ".join(f"--backend {n}" for n in sorted(found - {default}))
            return default, (
                f"this cell could be profiled with {' or '.join(sorted(found))}; {default} was "
                f"used: pick one with %%xprof {others} (or --backend {default})"
            )
    # Nothing in the user's code points anywhere: each profiles the host alike.
    for name in (_DEFAULT_BACKEND, "torch_tpu", "jax"):
        if name in installed:
            return name, ""
    return _DEFAULT_BACKEND, ""
