"""How a summary and a comparison show themselves, without the model knowing how.

A :class:`~xprof_magic._analysis.model.summary.Summary` and a
:class:`~xprof_magic._analysis.model.comparison.Comparison` display themselves (IPython's
and marimo's rich display: ``_repr_mimebundle_``) and say themselves as text and HTML, yet
the model never imports the render stage. The render stage registers its renderers for
each class on these generic functions (:mod:`xprof_magic._analysis.render.display_hooks`, run by
:mod:`xprof_magic._analysis` when it is imported, which is before any model class can be),
and the model's display methods call them.
"""

from __future__ import annotations

from functools import singledispatch

__all__ = ["bundle", "html", "notes", "text"]


def _unshown(value: object) -> LookupError:
    return LookupError(
        f"no renderer is registered for {type(value).__name__}: "
        "import xprof_magic._analysis, which registers the render stage's"
    )


@singledispatch
def text(value: object) -> str:
    """``value`` as plain text."""
    raise _unshown(value)


@singledispatch
def html(value: object) -> str:
    """``value`` as static, self-contained HTML."""
    raise _unshown(value)


@singledispatch
def notes(value: object) -> tuple[str, ...]:
    """What ``value`` says in kind, in words (a comparison's notes)."""
    raise _unshown(value)


def bundle(value: object) -> dict[str, str]:
    """``text/plain`` and static ``text/html``, for the rich display of a cell's value."""
    return {"text/plain": text(value), "text/html": html(value)}
