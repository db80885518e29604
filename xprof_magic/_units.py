"""Numbers as a person reads them fastest: seconds, bytes and shares of a whole.

One formatter per kind of number, shared by everything that prints them (the capture's
one-line report, the summary's text and HTML), so the same time never reads two ways.
IPython-free and import-free.
"""

from __future__ import annotations

__all__ = ["NONE", "data_size", "percent", "seconds"]

NONE = "–"


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


def percent(share: float | None) -> str:
    """A share of a whole (0.25) as a percentage (``25%``), one decimal below 10%."""
    if share is None:
        return NONE
    return f"{share * 100:.0f}%" if share >= 0.1 else f"{share * 100:.1f}%"
