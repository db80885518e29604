"""What a labelled block is called: a statement's label, and the cell's ``# xprof:`` markers.

The rewriter names the blocks it wraps with these (:mod:`xprof_magic._cell.rewrite`), and the
analysis finds a label's line in the cell with the same rules, so both agree on every name.
Pure text work (:mod:`tokenize`), no IPython and no torch.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

__all__ = ["LABEL_MAX_CHARS", "Marker", "find_markers", "label_for"]

LABEL_MAX_CHARS = 60
_MARKER = re.compile(r"#\s*xprof:\s*(?P<name>\S.*?)\s*$")


@dataclass(frozen=True)
class Marker:
    """A ``# xprof: NAME`` comment on a line of its own."""

    line: int
    col: int
    name: str


def label_for(line: str) -> str:
    """A block's label: its first source line, stripped and trimmed to 60 characters.

    A trailing ``:`` or ``#`` is dropped: the profiler's event names treat them as markup.
    """
    text = " ".join(_without_comment(line).split()).rstrip(":#").rstrip()
    if len(text) > LABEL_MAX_CHARS:
        text = text[: LABEL_MAX_CHARS - 1].rstrip() + "…"
    return text or "<empty>"


def _without_comment(line: str) -> str:
    """A source line without its trailing comment (strings containing ``#`` are kept)."""
    if "#" not in line:
        return line
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[: tok.start[1]]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return line


def find_markers(source: str) -> list[Marker]:
    """Every ``# xprof: NAME`` comment that stands alone on its line.

    Comments are found with :mod:`tokenize`, so marker-like text inside strings is ignored.
    """
    markers: list[Marker] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return markers
    for tok in tokens:
        if tok.type != tokenize.COMMENT or tok.line[: tok.start[1]].strip():
            continue
        match = _MARKER.fullmatch(tok.string)
        if match:
            name = label_for(match.group("name"))
            markers.append(Marker(tok.start[0], tok.start[1], name))
    return markers
