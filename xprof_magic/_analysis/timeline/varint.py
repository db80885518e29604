"""Protobuf varints read with numpy, many at once: the decoder's (:mod:`.wire`) tools.

A varint is 1 to 10 bytes, 7 bits each, least significant first; a byte with its high bit
set says another follows. Most of a timeline's are one byte (tags, lengths, ids); offsets
and durations take several. :func:`varints` reads them at any positions; :func:`word_at`
and :func:`leading_varint` read one that starts a little-endian word, which the decoder
loads with the bytes before it (a tag, a length) in one gather.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline.line_arrays import Ints

__all__ = [
    "BYTE",
    "EIGHT",
    "Bytes",
    "WireError",
    "bytewise",
    "leading_varint",
    "varint_sizes",
    "varints",
    "word_at",
]

Bytes = NDArray[np.uint8]


class WireError(ValueError):
    """The bytes are not laid out as this decoder expects: read them through the runtime."""


_CONTINUED = np.uint64(0x8080808080808080)
_LOW7 = [np.uint64(0x7F << (7 * k)) for k in range(8)]
_SEVEN = np.uint64(0x7F7F7F7F7F7F7F7F)
_PAIRS = [
    (np.uint64(0x7F007F007F007F00), np.uint64(0x007F007F007F007F), np.uint64(1)),
    (np.uint64(0x3FFF00003FFF0000), np.uint64(0x00003FFF00003FFF), np.uint64(2)),
    (np.uint64(0x0FFFFFFF00000000), np.uint64(0x000000000FFFFFFF), np.uint64(4)),
]
_ONE, EIGHT, BYTE = np.uint64(1), np.uint64(8), np.uint64(0xFF)


def word_at(data: Bytes, at: Ints) -> NDArray[np.uint64]:
    """The little-endian 8-byte word at each position ``at``.

    One gather of unaligned loads; past the end of ``data`` (at least 8 bytes) the bytes read
    as zeros.
    """
    last = len(data) - 8
    words: NDArray[np.uint64] = np.ndarray((last + 1,), "<u8", data, 0, (1,))
    if not len(at) or int(at.max()) <= last:
        return words[at]
    found = words[np.minimum(at, last)]
    over = np.flatnonzero(at > last)
    found[over] >>= ((at[over] - last) * 8).astype(np.uint64)
    return found


def leading_varint(
    word: NDArray[np.uint64], most: int
) -> tuple[NDArray[np.uint64], Ints, NDArray[np.bool_]]:
    """The varint each word starts with: its value and size, and whether it ends soon enough.

    Soon enough: within the word's first ``most`` bytes (where not, the value and size mean
    nothing).
    """
    # The arrays made here are worked on in place (the decoder calls this for every field
    # of every event: each new array is as long as a chunk of them).
    stop = np.invert(word)
    stop &= _CONTINUED
    low = np.invert(stop)
    low += _ONE
    low &= stop  # the first byte without a continuation bit
    ok = stop != 0
    ok &= low <= np.uint64(1 << (8 * most - 1))
    value = np.left_shift(low, _ONE, out=stop)  # (stop is read no more)
    value -= _ONE
    value &= word
    value &= _SEVEN
    half = np.empty_like(value)
    for high, low_half, shift in _PAIRS:  # 7-bit groups, two by two, into one number
        np.bitwise_and(value, high, out=half)
        half >>= shift
        value &= low_half
        value |= half
    return value, _size(low, ok), ok


def _size(low: NDArray[np.uint64], ok: NDArray[np.bool_]) -> Ints:
    """A varint's size in bytes from its last byte's high bit (``low``).

    The continuation bits below it, counted, and one.
    """
    if _BITWISE_COUNT is not None:
        below = low - _ONE
        below &= _CONTINUED
        counted: Ints = _BITWISE_COUNT(below).astype(np.int64)
        counted += 1
        return counted
    return (np.log2(np.where(ok, low, _ONE)).astype(np.int64) >> 3) + 1


_BITWISE_COUNT = getattr(np, "bitwise_count", None)  # numpy 2; numpy 1 takes log2


def varints(data: Bytes, at: Ints) -> tuple[NDArray[np.uint64], Ints]:
    """The values (as unsigned 64-bit) and sizes in bytes of the varints starting at ``at``.

    Most are one byte (lengths, ids); the rest are read 8 bytes at a time (:func:`_words`).
    """
    if not len(at):
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    if int(at.max()) >= len(data) or int(at.min()) < 0:
        raise WireError("a varint runs past the end")
    first = data[at]
    value = (first & 0x7F).astype(np.uint64)
    size = np.ones(len(at), np.int64)
    more = np.flatnonzero(first >= 0x80)
    if len(more):
        rest, extra = _words(data, at[more] + 1)
        value[more] |= rest << np.uint64(7)
        size[more] += extra
    return value, size


def _words(data: Bytes, at: Ints) -> tuple[NDArray[np.uint64], Ints]:
    """:func:`varints`, each one's first 8 bytes read as a little-endian word.

    Its size is where the first byte without the continuation bit is, its value the 7-bit
    groups up to there. Longer varints and those in the last 8 bytes are read a byte at a
    time.
    """
    value = np.zeros(len(at), np.uint64)
    size = np.zeros(len(at), np.int64)
    end = len(data)
    fast = np.flatnonzero(at <= end - 8)
    # A little-endian word at every byte: unaligned loads, one gather.
    words = np.ndarray((max(end - 7, 0),), "<u8", data, 0, (1,))[at[fast]]
    stop = ~words & _CONTINUED
    short = stop != 0
    fast, words, stop = fast[short], words[short], stop[short]
    low = stop & (~stop + np.uint64(1))  # the first byte without a continuation bit
    words &= (low << np.uint64(1)) - np.uint64(1)
    found = words & _LOW7[0]
    for k in range(1, 8):
        found |= (words >> np.uint64(k)) & _LOW7[k]
    value[fast] = found
    size[fast] = (np.log2(low).astype(np.int64) + 1) // 8
    rest = np.ones(len(at), bool)
    rest[fast] = False
    slow = np.flatnonzero(rest)
    if len(slow):
        value[slow], size[slow] = bytewise(data, at[slow])
    return value, size


def bytewise(data: Bytes, at: Ints) -> tuple[NDArray[np.uint64], Ints]:
    """:func:`varints`, a byte at a time."""
    value = np.zeros(len(at), np.uint64)
    size = np.zeros(len(at), np.int64)
    live = np.arange(len(at))
    end = len(data)
    for k in range(10):
        if not len(live):
            return value, size
        where = at[live] + k
        if where.max(initial=0) >= end:
            raise WireError("a varint runs past the end")
        byte = data[where]
        value[live] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        more = byte >= 0x80
        size[live[~more]] = k + 1
        live = live[more]
    if len(live):
        raise WireError("a varint longer than 10 bytes")
    return value, size


def varint_sizes(values: Ints) -> Ints:
    """How many bytes each (non-negative) value takes as a varint."""
    size = np.ones(len(values), np.int64)
    for k in range(1, 10):
        more = values >= (1 << (7 * k))
        if not more.any():
            break
        size += more
    return size
