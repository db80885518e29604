"""MkDocs hooks: the reference pages' tables, generated from the code so they cannot drift.

A page holds a marker comment, ``<!-- generated: NAME -->``, and the build puts the table in
its place: ``options`` from the parser `%%xprof` parses its line with, ``api`` from the
package's public names, ``metadata`` and ``summary`` from the dataclasses saved beside a run
(``xprof_magic.json`` and ``xprof_magic_summary.json``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- generated: ([a-z]+) -->")


def markdown(text: str) -> str:
    """A docstring's reStructuredText roles and literals as Markdown code."""
    text = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", text)
    return text.replace("``", "`")


def cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return markdown(" ".join(text.split())).replace("|", "\\|")


def options_table() -> str:
    """Every option of ``%%xprof``, as its parser knows it."""
    from xprof_magic._notebook.magic import XprofMagics

    parser = XprofMagics.xprof.parser  # type: ignore[attr-defined]
    rows = ["| option | meaning |", "| --- | --- |"]
    for action in parser._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        name = action.option_strings[-1]
        if action.choices:
            name += " " + "\\|".join(str(choice) for choice in action.choices)
        elif action.nargs == "?":
            name += f" [{action.metavar}]"
        elif action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
        rows.append(f"| `{name}` | {cell((action.help or '').replace('%%', '%'))} |")
    return "\n".join(rows)


def summary_line(obj: Any) -> str:
    """An object's docstring, its paragraphs as Markdown."""
    doc = inspect.getdoc(obj) or ""
    return markdown(doc)


def default(value: Any) -> str:
    """A parameter's default as code: a function by its name, never by its address."""
    return getattr(value, "__name__", None) or repr(value)


def signature(function: Any) -> str:
    """``function``'s parameters as its source writes them (annotations unquoted)."""
    parts, star = [], False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = parameter.name
        if parameter.kind is parameter.VAR_POSITIONAL:
            text, star = f"*{text}", True
        elif parameter.kind is parameter.VAR_KEYWORD:
            text = f"**{text}"
        if parameter.annotation is not parameter.empty:
            text += f": {parameter.annotation}"
        if parameter.default is not parameter.empty:
            text += f" = {default(parameter.default)}"
        parts.append(text)
    returns = inspect.signature(function).return_annotation
    tail = "" if returns is inspect.Signature.empty else f" -> {returns}"
    return f"({', '.join(parts)}){tail}"


def api_section() -> str:
    """Each public name of ``xprof_magic``: its signature (a class: its name) and docstring."""
    import xprof_magic

    parts = []
    for name in sorted(xprof_magic.__all__, key=str.lower):
        if name.startswith("__") or name.endswith("ipython_extension"):
            continue
        obj = getattr(xprof_magic, name)
        if inspect.isclass(obj):
            head = f"class xprof_magic.{name}"
        else:
            head = f"xprof_magic.{name}{signature(obj)}"
        parts.append(f"## `{name}`\n\n```python\n{head}\n```\n\n{summary_line(obj)}\n")
    return "\n".join(parts)


def attribute_docs(cls: type) -> dict[str, str]:
    """The string under each field of a dataclass's source, where it has one."""
    source = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for field, after in itertools.pairwise(body.body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = after.value.value
    return docs


def fields_table(cls: type) -> str:
    """A saved dataclass's fields: name, type, and what its source says of it."""
    docs = attribute_docs(cls)
    rows = ["| field | type | meaning |", "| --- | --- | --- |"]
    for field in dataclasses.fields(cls):
        kind = str(field.type).replace("|", "\\|")
        rows.append(f"| `{field.name}` | `{kind}` | {cell(docs.get(field.name, ''))} |")
    return "\n".join(rows)


def metadata_table() -> str:
    from xprof_magic._runs.metadata import SCHEMA, RunMetadata

    return f"Schema {SCHEMA}.\n\n{fields_table(RunMetadata)}"


def summary_table() -> str:
    from xprof_magic._analysis.model.summary import SUMMARY_SCHEMA, Summary

    return f"Schema {SUMMARY_SCHEMA}.\n\n{fields_table(Summary)}"


def gaps_table() -> str:
    from typing import get_args

    from xprof_magic._analysis.model.summary import Fault, Flaw, Gap, Lack

    kinds = ", ".join(f"`{k}`" for k in get_args(Lack))
    faults = ", ".join(f"`{k}`" for k in get_args(Fault))
    return (
        f"`Gap` (`what`: {kinds}):\n\n{fields_table(Gap)}\n\n"
        f"`Flaw` (`what`: {faults}):\n\n{fields_table(Flaw)}"
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "options": options_table,
    "api": api_section,
    "metadata": metadata_table,
    "summary": summary_table,
    "gaps": gaps_table,
}


def expand(text: str) -> str:
    """``text`` with each marker replaced by its table; an unknown marker is an error."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"docs: no generator for <!-- generated: {name} -->")
        return GENERATORS[name]()

    return MARKER.sub(one, text)


def on_page_markdown(markdown_text: str, **_: Any) -> str:
    """MkDocs' hook: each page's Markdown, its generated tables put in."""
    return expand(markdown_text)


if __name__ == "__main__":  # python docs/hooks.py PAGE: the page as the build sees it
    import sys

    print(expand(Path(sys.argv[1]).read_text(encoding="utf-8")))
