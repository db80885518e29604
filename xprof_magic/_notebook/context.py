"""Where the notebook runs, and so which URL the browser must use to reach the viewer.

The kernel does not know the URL the browser sees. The viewer listens on a loopback port of
the kernel's machine; each context reaches it differently:

- Colab: through its kernel-port proxy (``google.colab.kernel.proxyPort``), whose URL only
  the browser learns (:mod:`xprof_magic._notebook.colab`);
- Binder, JupyterHub or a remote Jupyter: through jupyter-server-proxy, or a template with
  ``%PORT%`` from ``XPROF_MAGIC_PROXY_URL`` (or TensorBoard's ``TENSORBOARD_PROXY_URL``);
- JupyterLab, Notebook 7 or VS Code on the same machine: the loopback port itself;
- no widget frontend (terminal IPython): text only, with the loopback URL.

One function (:func:`detect`) decides, from one dispatch table, as TensorBoard's notebook
module does; the context then picks the widget's frame (:meth:`Context.frame`), the only
other place Colab is told apart.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from xprof_magic._viewer.process import client

if TYPE_CHECKING:
    from xprof_magic._notebook.frame import Frame
    from xprof_magic._viewer.process.client import Viewer

__all__ = ["PROXY_ENV", "Context", "ContextKind", "detect"]

PROXY_ENV = client.PROXY_ENV
ContextKind = Literal["colab", "proxy", "vscode", "jupyter", "terminal"]


@dataclass(frozen=True)
class Context:
    """How the browser reaches a loopback port of the kernel's machine."""

    kind: ContextKind
    proxy_template: str | None = None

    @property
    def has_widgets(self) -> bool:
        """Whether a widget can render (else the text/plain part is what the user sees)."""
        return self.kind != "terminal"

    @property
    def kernel_route(self) -> bool:
        """Whether the widget carries the kernel route (:mod:`~xprof_magic._notebook.route`).

        Every widget frontend but Colab's does: Colab shows pages through its own proxy and draws no
        third-party widget without its custom widget manager.
        """
        return self.has_widgets and self.kind != "colab"

    def locate(self, port: int) -> tuple[str, str]:
        """``(origin, prefix)`` for a port.

        The browser URL of a server path is ``origin + prefix + path``; a path that the page itself
        puts after ``location.origin`` needs the prefix only.
        """
        if self.kind == "colab":
            # The origin exists only in the browser: the page's JavaScript asks Colab's
            # proxy for it (see _notebook/colab.py), so paths are all the kernel builds.
            return "", ""
        return client.locate(port, self.proxy_template if self.kind == "proxy" else None)

    def frame(self, viewer: Viewer, height: int) -> Frame:
        """Where the widget shows the selected page, ``height`` pixels tall.

        Colab's output-frame JavaScript, else an iframe inside the widget.
        """
        if self.kind == "colab":
            from xprof_magic._notebook.colab import ColabFrame

            return ColabFrame(viewer.port, viewer.base_path, height)
        from xprof_magic._notebook.frame import IframeFrame

        return IframeFrame(height)

    def describe(self) -> str:
        return {
            "colab": "Colab, through its kernel-port proxy",
            "proxy": f"a Jupyter proxy ({self.proxy_template})",
            "vscode": "VS Code, on this machine",
            "jupyter": "Jupyter, on this machine",
            "terminal": "a terminal (no widgets)",
        }[self.kind]


_Rule = Callable[[Any, Mapping[str, str], Mapping[str, Any]], Context | None]


def _colab(shell: Any, environ: Mapping[str, str], modules: Mapping[str, Any]) -> Context | None:
    return Context("colab") if "google.colab" in modules else None


def _explicit_proxy(
    shell: Any, environ: Mapping[str, str], modules: Mapping[str, Any]
) -> Context | None:
    template = client.proxy_template(environ)
    return Context("proxy", template) if template else None


def _terminal(shell: Any, environ: Mapping[str, str], modules: Mapping[str, Any]) -> Context | None:
    kernel = getattr(shell, "kernel", None)
    return Context("terminal") if shell is not None and kernel is None else None


def _vscode(shell: Any, environ: Mapping[str, str], modules: Mapping[str, Any]) -> Context | None:
    return Context("vscode") if "VSCODE_PID" in environ or "VSCODE_CWD" in environ else None


def _server_proxy(
    shell: Any, environ: Mapping[str, str], modules: Mapping[str, Any]
) -> Context | None:
    hub = "JUPYTERHUB_SERVICE_PREFIX" in environ
    template = client.server_proxy_template(environ) if hub else None
    return Context("proxy", template) if template else None


_RULES: tuple[_Rule, ...] = (_colab, _explicit_proxy, _terminal, _vscode, _server_proxy)


def detect(
    shell: Any = None,
    environ: Mapping[str, str] | None = None,
    modules: Mapping[str, Any] | None = None,
) -> Context:
    """The context of ``shell`` (an IPython shell; None means a plain script)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    for rule in _RULES:
        found = rule(shell, environ, modules)
        if found is not None:
            return found
    return Context("jupyter")
