"""The backends there are and the capture options' defaults, free to import.

``%load_ext`` builds the magic's options (``--backend`` choices, ``--port``'s and
``--height``'s defaults) at load time; everything else waits for the first cell. So what
the options need lives here, in a module that imports nothing, and :mod:`xprof_magic._backends` and
:mod:`xprof_magic._plan` take it from here.
"""

from __future__ import annotations

__all__ = ["BACKENDS", "DEFAULT_HEIGHT", "DEFAULT_PORT", "VOCABULARIES"]

DEFAULT_PORT = 9012
"""The profiler server's port for on-demand capture (``--port``)."""

DEFAULT_HEIGHT = 600
"""The embedded viewer's height in pixels (``--height``)."""

BACKENDS: dict[str, str] = {
    "jax": "xprof_magic._backends.jax",
    "torch_tpu": "xprof_magic._backends.torch_tpu",
    "torch_xla": "xprof_magic._backends.torch_xla",
}
"""Each backend's name and the module whose ``create()`` makes it."""

VOCABULARIES: dict[str, str] = {
    "jax": "xprof_magic._backends.jax_vocabulary",
    "torch_tpu": "xprof_magic._backends.torch_tpu_vocabulary",
    "torch_xla": "xprof_magic._backends.torch_xla_vocabulary",
}
"""Each backend's words: a module holding a ``VOCABULARY``, importing neither its profiler
nor IPython."""
