"""The backends there are, one entry each, and the capture options' defaults.

An entry is all that a backend adds outside its own modules: its name, its factory (the
module's ``create() -> Backend``), its words, how ``--backend auto`` recognises its code
(:class:`Detection`, read by :mod:`xprof_magic._backends.detect`) and what its runtime does that the
capture and the analysis adapt to (:class:`Capabilities`). The magic's ``--backend`` choices,
the plan, the capture and the analysis all ask here, so registering an entry in
:data:`BACKENDS` is what plugs a backend in.

``%load_ext`` builds the magic's options at load time and everything else waits for the first
cell, so this module imports no backend: each factory imports its module when first called.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xprof_magic._backends import Backend, Vocabulary

__all__ = [
    "BACKENDS",
    "BACKEND_CHOICES",
    "DEFAULT_HEIGHT",
    "DEFAULT_PORT",
    "Capabilities",
    "Detection",
    "Entry",
    "capabilities",
    "entry",
    "get_backend",
    "get_vocabulary",
]

DEFAULT_PORT = 9012
"""The profiler server's port for on-demand capture (``--port``)."""

DEFAULT_HEIGHT = 600
"""The embedded viewer's height in pixels (``--height``)."""


@dataclass(frozen=True)
class Detection:
    """How ``--backend auto`` recognises the backend in the user's code."""

    packages: tuple[str, ...] = ()
    """Top-level packages that mean this backend, imported by a cell or as the module of a
    value the cell uses; the first is the one whose presence means it is installed."""
    shares: tuple[str, ...] = ()
    """Packages other backends mean too (``torch``): code that uses one of them and no
    backend's own package is the backend earlier cells imported, else the first installed."""
    names: Callable[[ast.AST], bool] | None = None
    """A node of the cell's syntax tree that means this backend (TorchTPU: its device)."""
    owns: Callable[[object], bool] | None = None
    """A value (not a module) of a shared package that is this backend's (a tensor on its
    device)."""


@dataclass(frozen=True)
class Capabilities:
    """What the backend's runtime does, which the capture and the analysis adapt to."""

    lazy_graph: bool = False
    """Ops build a graph that runs at a sync (torch_xla's lazy tensors): a loop that never
    syncs grows one graph, and the syncs of a nested loop end the outer loop's steps."""
    eager_compiles: bool = False
    """Eager calls compile one small program each (JAX): many compilations in one call, or a
    library helper compiled for several shapes, are then no alarm."""


@dataclass(frozen=True)
class Entry:
    """One backend: its name, factory, words, detection rule and capabilities.

    Its name is ``--backend NAME`` and ``RunMetadata.backend``; the factory makes its process-wide
    :class:`~xprof_magic._backends.Backend`.
    """

    name: str
    create: Callable[[], Backend]
    vocabulary: Callable[[], Vocabulary]
    detection: Detection = field(default_factory=Detection)
    capabilities: Capabilities = field(default_factory=Capabilities)


def _torch_xla() -> Backend:
    from xprof_magic._backends import torch_xla

    return torch_xla.create()


def _torch_xla_words() -> Vocabulary:
    from xprof_magic._backends.torch_xla_vocabulary import VOCABULARY

    return VOCABULARY


def _names_tpu(node: ast.AST) -> bool:
    """``"tpu"``, ``"tpu:0"`` or ``.tpu()``: TorchTPU's device."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "tpu" or node.value.startswith("tpu:")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "tpu"
    )


def _on_tpu(value: object) -> bool:
    """A tensor or module on the ``tpu`` device, or the device itself."""
    device = value if type(value).__name__ == "device" else getattr(value, "device", None)
    return getattr(device, "type", None) == "tpu"


def _torch_tpu() -> Backend:
    from xprof_magic._backends import torch_tpu

    return torch_tpu.create()


def _torch_tpu_words() -> Vocabulary:
    from xprof_magic._backends.torch_tpu_vocabulary import VOCABULARY

    return VOCABULARY


def _jax() -> Backend:
    from xprof_magic._backends import jax

    return jax.create()


def _jax_words() -> Vocabulary:
    from xprof_magic._backends.jax_vocabulary import VOCABULARY

    return VOCABULARY


BACKENDS: dict[str, Entry] = {
    entry.name: entry
    for entry in (
        Entry(
            "torch_xla",
            _torch_xla,
            _torch_xla_words,
            Detection(packages=("torch_xla",), shares=("torch",)),
            Capabilities(lazy_graph=True),
        ),
        Entry(
            "torch_tpu",
            _torch_tpu,
            _torch_tpu_words,
            Detection(packages=("torch_tpu",), shares=("torch",), names=_names_tpu, owns=_on_tpu),
        ),
        Entry(
            "jax",
            _jax,
            _jax_words,
            Detection(packages=("jax", "jaxlib", "flax", "optax", "equinox")),
            Capabilities(eager_compiles=True),
        ),
    )
}
"""The registered backends, in the order ``--backend auto`` prefers them: the first where
nothing tells them apart, and where two shared a package (plain ``torch``)."""


class _Choices:
    """``--backend``'s choices: ``auto`` and the backends registered when asked.

    argparse reads them at each parse, so an entry registered after ``%load_ext`` is a choice too.
    """

    def __contains__(self, value: object) -> bool:
        return value == "auto" or value in BACKENDS

    def __iter__(self) -> Iterator[str]:
        return iter(["auto", *sorted(BACKENDS)])


BACKEND_CHOICES = _Choices()

_loaded: dict[str, Backend] = {}


def entry(name: str) -> Entry:
    """The entry of backend ``name``; ``ValueError`` naming the known ones if none."""
    try:
        return BACKENDS[name]
    except KeyError:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"unknown backend {name!r}; choose one of: {known}") from None


def get_backend(name: str = "torch_xla") -> Backend:
    """The process-wide backend ``name``, made on first use (torch_xla is slow to import)."""
    if name not in _loaded:
        _loaded[name] = entry(name).create()
    return _loaded[name]


def get_vocabulary(backend: str) -> Vocabulary:
    """The words of ``backend`` (a run's ``RunMetadata.backend``); neutral ones if unknown."""
    found = BACKENDS.get(backend)
    if found is None:
        from xprof_magic._backends import NEUTRAL

        return NEUTRAL
    return found.vocabulary()


def capabilities(backend: str) -> Capabilities:
    """What ``backend``'s runtime does; none of it for an unknown backend."""
    found = BACKENDS.get(backend)
    return Capabilities() if found is None else found.capabilities
