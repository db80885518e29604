"""TorchTPU's private calls, every one looked up here, once, behind one version check.

Written for torch-tpu 0.2: on another version that has moved one of them, the capture fails
with one line naming both versions (:func:`private_api`). The TorchTPU backend
(:mod:`.torch_tpu`) makes these calls through the :class:`Private` it gets from here, and
nowhere else reaches into ``torch_tpu._internal``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from xprof_magic._backends.base import installed_version

__all__ = ["TRIED", "Private", "private_api", "tpu"]

TRIED = "0.2"
"""The torch-tpu release line whose private API this module was written against."""
_REGISTER_SYMBOL = "_ZN9torch_tpu20XProfCallbackHandler8RegisterEv"
_GLUE = "libpywrap_"


@dataclass(frozen=True)
class Private:
    """TorchTPU's private calls this backend makes, looked up once."""

    impl: Any
    start_trace: Callable[..., None]
    stop_trace: Callable[[], None]
    options: Callable[..., Any]
    start_server: Callable[[int], Any]
    push_enable: Callable[[], None]
    pop_enable: Callable[[], None]
    register_labels: Callable[[], None]
    cache_stats: Callable[[], Any]


def _label_callback() -> Callable[[], None]:
    """``torch_tpu::XProfCallbackHandler::Register()`` in TorchTPU's already loaded glue library.

    It adds the RecordFunction callback that turns labels and aten ops into timeline events, once
    per process (a static inside). Nothing else is loaded.
    """
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = {line.split()[-1] for line in maps if _GLUE in line and "torch_tpu" in line}
    for path in sorted(paths):
        if not path.endswith("_common.so"):
            continue
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        register = getattr(library, _REGISTER_SYMBOL)
        register.restype = None
        register.argtypes = []
        return register  # type: ignore[no-any-return]
    raise AttributeError("no loaded libpywrap_*_common.so holds XProfCallbackHandler::Register")


def private_api() -> Private:
    """The one version check: every private call, found or the one-line reason why not."""
    version = installed_version("torch-tpu") or "unknown"
    try:
        import torch_tpu  # noqa: F401  (torch loads it itself unless autoload is off)
        from torch_tpu._internal.profiler import _impl, _profiler_backend

        return Private(
            impl=_impl,
            start_trace=_impl.start_trace,
            stop_trace=_impl.stop_trace,
            options=_impl.ProfileOptions,
            start_server=_impl.start_server,
            push_enable=_profiler_backend._push_enable_profiler,
            pop_enable=_profiler_backend._pop_enable_profiler,
            register_labels=_label_callback(),
            cache_stats=tpu()._get_cache_stats,
        )
    except (ImportError, AttributeError, OSError) as error:
        raise RuntimeError(
            f"torch-tpu {version}: its private profiler API moved ({error}); xprof_magic's "
            f"torch_tpu backend was written for torch-tpu {TRIED}: pip install "
            f"'torch-tpu=={TRIED}.0', or profile with --backend torch_xla or jax"
        ) from None


def tpu() -> Any:
    """``torch.tpu``, TorchTPU's device module, which torch's stubs do not know."""
    return torch.tpu  # type: ignore[attr-defined]
