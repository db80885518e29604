"""What differs between the notebook stacks xprof_magic supports.

ipywidgets 7 (Colab's, with IPython 7.34) and ipywidgets 8 with IPython 8 or 9.
"""

from __future__ import annotations

from typing import Any

__all__ = ["widget_bundle"]


def widget_bundle(widget: Any, **kwargs: Any) -> dict[str, Any]:
    """The MIME bundle that displays ``widget``.

    ipywidgets 8 returns it from ``_repr_mimebundle_``; ipywidgets 7 has only
    ``_ipython_display_``, which displays the same bundle itself, so it is built here the way
    ipywidgets 7 builds it.
    """
    own = getattr(widget, "_repr_mimebundle_", None)
    if own is not None:
        bundle: dict[str, Any] = own(**kwargs) or {}
        return bundle
    bundle = {"text/plain": repr(widget)}
    if getattr(widget, "_view_name", None) is not None:
        bundle["application/vnd.jupyter.widget-view+json"] = {
            "version_major": 2,
            "version_minor": 0,
            "model_id": widget._model_id,
        }
        widget._handle_displayed(**kwargs)
    return bundle
