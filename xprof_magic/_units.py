"""Numbers as a person reads them fastest (seconds, bytes, shares); lines as a notebook prints them.

One formatter per kind of number, shared by everything that prints them (the capture's one-line
report, the summary's text and HTML), so the same time never reads two ways. IPython-free and
import-free.
"""

from __future__ import annotations

__all__ = ["NONE", "TEXT_WIDTH", "data_size", "percent", "seconds", "wrapped"]

NONE = "–"
TEXT_WIDTH = 100
"""The longest line printed under a cell: JupyterLab's 848 px output holds about 105
characters of its monospace font."""


def seconds(value: float | None) -> str:
    """Seconds in the unit a person reads fastest: ``1.23 s``, ``45.6 ms``, ``789 µs``."""
    if value is None:
        return NONE
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f} s"
    if magnitude >= 1:
        return f"{value:.2f} s"
    if magnitude >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    if magnitude == 0:
        return "0 s"
    return f"{value * 1e6:.0f} µs"


def data_size(value: float | None) -> str:
    """Bytes as B, KB, MB or GB (powers of 1000)."""
    if value is None:
        return NONE
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 step``, ``3 steps``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def percent(share: float | None) -> str:
    """A share of a whole (0.25) as a percentage (``25%``), one decimal below 10%."""
    if share is None:
        return NONE
    return f"{share * 100:.0f}%" if share >= 0.1 else f"{share * 100:.1f}%"


def wrapped(text: str, width: int = TEXT_WIDTH) -> str:
    """``text`` with each line longer than ``width`` broken at spaces, the rest indented two spaces.

    The rest of a broken line is indented two spaces under the line's start. A notebook's output
    area breaks a printed line too long for it at any character, mid-word (JupyterLab's
    ``word-break: break-all``); a word longer than ``width`` (a path) stays whole.
    """
    out: list[str] = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        while len(line) > width:
            cut = line.rfind(" ", len(indent), width + 1)
            if cut < 0:
                cut = line.find(" ", width)
            if cut < 0 or not line[:cut].strip():
                break
            out.append(line[:cut].rstrip())
            line = indent + line[cut:].lstrip(" ")
        out.append(line)
    return "\n".join(out)
