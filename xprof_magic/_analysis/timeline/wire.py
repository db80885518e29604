"""A line's events as columns, decoded from its serialized bytes with array operations.

Parsing a line's events into protobuf messages and copying three numbers out of each costs
about 0.4 µs an event in Python; a 100 MB capture holds 3.4 million. The timeline pass needs
few fields of an event: its metadata id, offset and duration, and which stats it has (their
metadata ids); a stat's value only for the few events whose kind depends on one. Those are
decoded here from the wire format of XSpace's public schema (``xplane.proto``: ``XLine``
``events`` = 4; ``XEvent`` ``metadata_id`` = 1, ``offset_ps`` = 2, ``duration_ps`` = 3,
``stats`` = 4, ``num_occurrences`` = 5; ``XStat`` ``metadata_id`` = 1), with numpy:

* where each event starts: the protobuf runtime frames them (the line parsed with
  :data:`~.xspace.RawXLine`, whose ``events`` are ``bytes``), and their lengths give their
  positions (checked against the bytes: each must be an ``events`` field of that length);
* the events' fields in rounds, one field of every event per round, in the order the
  profiler writes them (field number order, as every protobuf serializer does);
* the stats' layout alike (their tags and lengths: where each event's stats lie), their
  metadata ids only for the events asked about (:class:`StatRegions`: the pass asks about
  a few events of a big line), a stat's value parsed by the runtime when asked for.

Anything else (another field, another order, a bad length) raises :class:`WireError`, and
the caller reads that line through the runtime instead; so does a stat id the decoder does
not read (over 31 bits), found when asked for (:func:`.columns.line_of`). A test compares
both, field for field, on every stored capture.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import framing, xspace
from xprof_magic._analysis.timeline.line_arrays import Ints
from xprof_magic._analysis.timeline.varint import (
    BYTE,
    EIGHT,
    Bytes,
    WireError,
    leading_varint,
    varint_sizes,
    varints,
    word_at,
)

__all__ = [
    "Buffer",
    "EventColumns",
    "StatRegions",
    "Stats",
    "WireError",
    "decode_line",
    "first_event",
]

Buffer = bytes | memoryview

_EVENTS = 0x22  # XLine.events: field 4, length-delimited
_FIELDS = (0x08, 0x10, 0x18)  # XEvent.metadata_id, offset_ps, duration_ps: varints
_STATS = 0x22  # XEvent.stats: field 4, length-delimited
_OCCURRENCES = 0x28  # XEvent.num_occurrences: field 5, varint (the reader ignores it)
_STAT_ID = 0x08  # XStat.metadata_id: field 1, varint
_UINT64, _INT64 = 0x18, 0x20  # XStat.uint64_value (3), int64_value (4): varints
# A stat's header in a word: tag, one-byte length, id's tag, then the id from the 4th byte.
_ID_AT, _ID_NEXT, _SEVEN, _SEVEN_BITS = (np.uint64(k) for k in (24, 32, 7, 0x7F))
# The usual stat's first four bytes: its tag, a one-byte length, the id's tag, a one-byte id.
_PLAIN_MASK, _PLAIN = np.uint64(0x80FF80FF), np.uint64(0x00080000 | _STATS)


@dataclass
class Stats:
    """A line's stats, grouped by event.

    Event ``i``'s are ``id[ptr[i]:ptr[i + 1]]``, in stored order; ``at`` is where each one's
    serialized ``XStat`` starts in :attr:`data` (its length is the varint just before).
    """

    ptr: NDArray[np.int32]
    id: NDArray[np.signedinteger[Any]]
    at: NDArray[np.int32]
    data: Bytes

    def serialized(self, stat: int) -> bytes:
        """Stat ``stat`` (an index into the columns), serialized."""
        begin = int(self.at[stat])
        head = self.data[max(0, begin - 11) : begin].tobytes()  # its tag and length
        first = len(head) - 1  # the length's last byte; those before it with the high bit
        while first > 0 and head[first - 1] >= 0x80:
            first -= 1
        length = 0
        for k, byte in enumerate(head[first:]):
            length |= (byte & 0x7F) << (7 * k)
        return self.data[begin : begin + length].tobytes()

    def integers(self, stats: Ints) -> tuple[NDArray[np.uint64], NDArray[np.bool_], Ints]:
        """The value of each of those stats that holds just a whole number.

        Such a stat holds nothing else after its metadata id (an ``int64_value`` or
        ``uint64_value``, with a one-byte length). Gives the number's bits, whether the stat
        is one of those, and its field's tag (``0x20``: signed).
        """
        at = self.at[stats].astype(np.int64)
        data = self.data
        ok = at >= 2
        back = np.where(ok, at, 2)
        length = data[back - 1].astype(np.int64)
        ok &= (length < 0x80) & (data[back - 2] == _STATS)
        word = word_at(data, at)
        ok &= (word & BYTE) == _STAT_ID
        _, id_size, id_ok = leading_varint(word >> EIGHT, 7)
        value_word = word_at(data, at + 1 + np.where(id_ok, id_size, 0))
        tag = (value_word & BYTE).astype(np.int64)
        value, size, value_ok = leading_varint(value_word >> EIGHT, 7)
        ok &= id_ok & value_ok & ((tag == _UINT64) | (tag == _INT64))
        ok &= 2 + id_size + size == length
        return value, ok, tag

    def of(self, event: int) -> range:
        """Event ``event``'s stats (indices into the columns), in stored order."""
        return range(int(self.ptr[event]), int(self.ptr[event + 1]))


@dataclass
class StatRegions:
    """Where each event's stats lie in a line's bytes, decoded only for the events asked about.

    Event ``i``'s stats (and a ``num_occurrences``, last) are ``data[begin[i]:end[i]]``, laid
    out as the decoder knows (checked when the line was decoded: :func:`_check_stats`). The
    timeline pass asks about a few events of a big line (whether an op's event has an
    ``hlo_op``; a program's name): decoding every stat of every event cost a seventh of the
    summary's CPU and kept 20 MB of columns of them. ``release(lo, hi)``, where given, lets
    go of the pages of ``data[lo:hi]`` once a chunk of events' stats is read.
    """

    begin: NDArray[np.int32]
    end: NDArray[np.int32]
    data: Bytes
    release: Release | None = None

    def __len__(self) -> int:
        return len(self.begin)

    def decoded(self, events: Ints) -> Stats:
        """The stats of ``events`` as columns: ``ptr[k]:ptr[k + 1]`` are ``events[k]``'s.

        :class:`WireError` where a stat's id is not one the decoder reads (over 31 bits).
        """
        events = np.asarray(events, np.int64)
        cur = self.begin[events].astype(np.int64)
        counts, (ids, at) = _stats(self.data, cur, self.end[events].astype(np.int64))
        ptr = np.zeros(len(events) + 1, np.int32)  # under 2**31: fewer than the bytes
        ptr[1:] = np.cumsum(counts)
        self._give_back(events)
        return Stats(ptr, ids, at, self.data)

    def of(self, event: int) -> list[tuple[int, bytes]]:
        """Event ``event``'s stats, in stored order: each one's metadata id and its bytes.

        Read in Python, as :meth:`decoded` reads them (one event's few stats: an array
        operation each cost more than the reading).
        """
        data = self.data[int(self.begin[event]) : int(self.end[event])].tobytes()
        self._give_back(np.array([event]))
        found: list[tuple[int, bytes]] = []
        at = 0
        while at < len(data):
            if data[at] != _STATS:  # the num_occurrences the layout's check let through
                break
            length, at = _varint(data, at + 1)
            stat = data[at : at + length]
            at += length
            if not stat:
                stat_id = 0
            elif stat[0] == _STAT_ID:
                stat_id = _varint(stat, 1)[0]
            else:
                stat_id = int(xspace.parse_stat(stat).metadata_id)
            if not 0 <= stat_id < 1 << 31:
                raise WireError("a stat metadata id over 31 bits")
            found.append((stat_id, stat))
        return found

    def every(self) -> Stats:
        """Every event's stats as columns (what a test compares with the runtime's)."""
        return self.decoded(np.arange(len(self.begin)))

    def named(self, events: Ints, wanted: list[int]) -> NDArray[np.bool_]:
        """Whether each of ``events`` has a stat whose metadata id is one of ``wanted``.

        In the events' order in the line, a chunk at a time (the pages of a chunk's stats
        given back before the next: the line's bytes were given back once decoded).
        """
        events = np.asarray(events, np.int64)
        found = np.zeros(len(events), bool)
        if not len(events) or not wanted:
            return found
        ascending = bool(np.all(events[1:] >= events[:-1]))
        by_place = None if ascending else np.argsort(events, kind="stable")
        placed = events if by_place is None else events[by_place]
        # Chunks of events, each within a few MB of the line: the pages one reads (and the
        # kernel's reads around them) are given back before the next is read.
        block = self.begin[placed] // _SPAN
        cuts = np.flatnonzero(block[1:] != block[:-1]) + 1
        bounds = sorted({0, len(events), *cuts.tolist(), *range(0, len(events), _ASKED)})
        for lo, hi in itertools.pairwise(bounds):
            which = slice(lo, hi) if by_place is None else by_place[lo:hi]
            here = placed[lo:hi]
            cur = self.begin[here].astype(np.int64)
            owners, rounds = _stat_rounds(self.data, cur, self.end[here].astype(np.int64))
            hit = np.zeros(len(here), bool)
            for owner, (ids, _) in zip(owners, rounds, strict=True):
                _check_ids(ids)
                hit[owner[np.isin(ids, wanted)]] = True
            found[which] = hit
            self._give_back(here)
        return found

    def _give_back(self, events: Ints) -> None:
        """The pages of those events' stats given back, and those mapped around them.

        The kernel maps the pages of the file about one read (:data:`_AROUND`).
        """
        if self.release is not None and len(events):
            lo = max(0, int(self.begin[events].min()) - _AROUND)
            self.release(lo, min(len(self.data), int(self.end[events].max()) + _AROUND))


@dataclass
class EventColumns:
    """One line: its name and timestamp, and its events' fields as arrays, in stored order."""

    name: str
    timestamp_ns: int
    metadata_id: Ints
    offset_ps: Ints
    duration_ps: Ints
    stats: StatRegions


WALK_FROM = 1 << 20
"""A line this long or longer is framed by numpy (:mod:`.framing`), not by the runtime."""


Release = Callable[[int, int], None]
"""``release(lo, hi)``: bytes ``lo:hi`` of the line are decoded (their pages may go)."""


def decode_line(serialized: Buffer, release: Release | None = None) -> EventColumns:
    """A serialized ``XLine`` as columns; :class:`WireError` where the layout is unexpected.

    A big line's bytes are told to ``release`` part by part as they are decoded.
    """
    if len(serialized) >= WALK_FROM:
        first = first_event(serialized, none=-1)
        if first >= 0:  # else a line without events: the runtime's to read
            return _walked(serialized, first, release)
    raw = xspace.RawXLine()
    raw.ParseFromString(serialized)
    lengths = np.fromiter(map(len, raw.events), np.int64, len(raw.events))
    name, timestamp_ns = raw.name, int(raw.timestamp_ns)
    del raw  # the runtime's copy of the events: only their lengths were wanted
    if len(serialized) >= 1 << 31:
        raise WireError("a line of 2 GB or more")
    data = np.frombuffer(serialized, np.uint8)
    if len(data) < 8:  # words are read at every byte: a short line is read padded
        data = np.concatenate([data, np.zeros(8, np.uint8)])
    first = first_event(serialized) if len(lengths) else 0
    head = 1 + varint_sizes(lengths)
    field_at = first + np.concatenate(([0], np.cumsum(head + lengths)[:-1]))
    if len(lengths):
        if int(field_at[-1] + head[-1] + lengths[-1]) > len(serialized):
            raise WireError("the events are not stored one after another")
        # Each header is the events field's tag and the event's length: two bytes where
        # the length is under 128, compared as one number; the others in full.
        pairs: NDArray[np.uint16] = np.ndarray((len(data) - 1,), "<u2", data, 0, (1,))
        other = np.flatnonzero(pairs[field_at] != (_EVENTS | (lengths << 8)))
        if len(other):
            word = word_at(data, field_at[other])
            told, _, ok = leading_varint(word >> EIGHT, 7)
            same = (word & BYTE) == _EVENTS
            if not np.all(ok & same & (told.view(np.int64) == lengths[other])):
                raise WireError("the events are not stored one after another")
    at = field_at + head
    del field_at, head
    metadata_id, offset_ps, duration_ps, begin, end = _event_fields(data, at, at + lengths)
    stats = StatRegions(begin, end, data)
    return EventColumns(name, timestamp_ns, metadata_id, offset_ps, duration_ps, stats)


def _walked(serialized: Buffer, first: int, release: Release | None) -> EventColumns:
    """:func:`decode_line` with the events framed by numpy (:mod:`.framing`).

    The line's other fields, before and after its events, are parsed by the runtime.
    """
    if len(serialized) >= 1 << 31:
        raise WireError("a line of 2 GB or more")
    data = np.frombuffer(serialized, np.uint8)
    field_at, stop = framing.event_headers(data, first)
    lengths, sizes = varints(data, field_at + 1)
    raw = xspace.RawXLine()
    try:
        raw.ParseFromString(bytes(serialized[:first]) + bytes(serialized[stop:]))
    except DecodeError as error:
        raise WireError("the line's other fields") from error
    if len(raw.events):
        raise WireError("events apart from the others")
    if release is not None:  # the walk read every page: given back before the columns are
        release(0, len(serialized))  # made, read again a chunk at a time as they decode
    at = field_at
    at += 1
    at += sizes
    del field_at, sizes
    end = lengths.view(np.int64)  # in place: the line's arrays are as long as its events
    end += at
    metadata_id, offset_ps, duration_ps, begin, ends = _event_fields(data, at, end, release)
    stats = StatRegions(begin, ends, data, release)
    return EventColumns(raw.name, int(raw.timestamp_ns), metadata_id, offset_ps, duration_ps, stats)


def first_event(serialized: Buffer, none: int | None = None) -> int:
    """Where the line's first ``events`` field starts.

    After its other fields, found in Python (a line has a handful of fields before its
    events); ``none`` where it has none (if given, else :class:`WireError`).
    """
    data = np.frombuffer(serialized, np.uint8)
    pos = 0
    while pos < len(serialized):
        tag = serialized[pos]
        if tag == _EVENTS:
            return pos
        if tag >= 0x80:
            raise WireError("a line field with a field number over 15")
        wire = tag & 7
        if wire == 0:
            _, size = varints(data, np.array([pos + 1]))
            pos += 1 + int(size[0])
        elif wire == 2:
            value, size = varints(data, np.array([pos + 1]))
            pos += 1 + int(size[0]) + int(value[0])
        elif wire == 1:
            pos += 9
        elif wire == 5:
            pos += 5
        else:
            raise WireError("a group in a line")
    if none is not None:
        return none
    raise WireError("the line's events were not found")


_CHUNK = 1 << 15
"""Events decoded together: their arrays stay in the processor's cache."""
_ASKED = 1 << 15
"""Events whose stats are read together when asked for (:meth:`StatRegions.named`)."""
_SPAN = 1 << 22
"""Bytes of a line whose events' stats are read together when asked for."""
_AROUND = 1 << 16
"""Bytes the kernel maps about a page of the file read (its fault-around): given back too."""


def _event_fields(
    data: Bytes, at: Ints, end: Ints, release: Release | None = None
) -> tuple[Ints, Ints, Ints, NDArray[np.int32], NDArray[np.int32]]:
    """The fields of the events whose payloads are ``data[at[i]:end[i]]``.

    Metadata id, offset, duration, and where each event's stats begin and end (see
    :class:`StatRegions`: their layout checked, their ids read when asked for), a chunk of
    events at a time.
    """
    n = len(at)
    metadata_id, offset_ps, duration_ps = (np.zeros(n, np.int64) for _ in _FIELDS)
    begin = np.zeros(n, np.int32)  # a line is under 2 GB: its positions fit
    released = 0
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        cur = at[lo:hi].copy()
        stop = end[lo:hi]
        for tag, column in zip(_FIELDS, (metadata_id, offset_ps, duration_ps), strict=True):
            _scalar(data, cur, stop, tag, column[lo:hi])
        _check_stats(data, cur, stop)
        begin[lo:hi] = cur
        if release is not None:  # the events decoded so far (the stats read later fault
            release(released, int(end[hi - 1]))  # their pages in again from the file)
            released = int(end[hi - 1])
    return metadata_id, offset_ps, duration_ps, begin, end.astype(np.int32)


def _scalar(data: Bytes, cur: Ints, end: Ints, tag: int, column: Ints) -> None:
    """One varint field (``tag``) of each event into ``column``; ``cur`` moves past it.

    Only where an event's payload goes on with it (the profiler leaves out a field that is 0).
    """
    word = word_at(data, cur)
    hit = (word & BYTE) == tag
    hit &= cur < end
    word >>= EIGHT  # (a new array: shifted in place)
    value, size, ok = leading_varint(word, 7)
    if hit.all() and ok.all():
        column[:] = value.view(np.int64)
        size += 1
        cur += size
        return
    fast = hit & ok
    column[fast] = value[fast].view(np.int64)
    cur += np.where(fast, 1 + size, 0)
    slow = np.flatnonzero(hit & ~ok)
    if len(slow):
        value, size = varints(data, cur[slow] + 1)
        column[slow] = value.view(np.int64)
        cur[slow] += 1 + size


def _check_stats(data: Bytes, cur: Ints, end: Ints) -> None:
    """Check that an event's fields from ``cur[i]`` to ``end[i]`` are as :func:`_stats` reads them.

    Stats, then perhaps a ``num_occurrences``; else :class:`WireError`. Their tags and
    lengths only, a stat after another (the rounds of :func:`_stat_rounds`,
    without their ids and starts).
    """
    if np.any(cur > end):
        raise WireError("an event's fields run past its end")
    live = cur < end
    here, stop_at = cur[live], end[live]
    last = len(data) - 1
    while len(here):
        if int(here.max()) < last:  # the usual round: stats with one-byte lengths
            tag, length = data[here], data[here + 1]
            if bool(np.all(tag == _STATS)) and int(length.max()) < 0x80:
                stop = here + 2
                stop += length
                if np.any(stop > stop_at):
                    raise WireError("a stat runs past its event")
                more = stop < stop_at
                here, stop_at = stop[more], stop_at[more]
                continue
        tag = data[here]
        is_stat = tag == _STATS
        if not is_stat.all():
            other = ~is_stat
            if np.any(tag[other] != _OCCURRENCES):
                raise WireError("an event field this decoder does not know")
            _, size = varints(data, here[other] + 1)
            if np.any(here[other] + 1 + size != stop_at[other]):  # it is their last field
                raise WireError("an event's fields run past its end")
            here, stop_at = here[is_stat], stop_at[is_stat]
        told, size = varints(data, here + 1)
        if np.any(told >= 1 << 31):
            raise WireError("a stat runs past its event")
        stop = here + 1 + size + told.astype(np.int64)
        if np.any(stop > stop_at):
            raise WireError("a stat runs past its event")
        more = stop < stop_at
        here, stop_at = stop[more], stop_at[more]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``data[at]`` and where it ends; :class:`WireError` past the end."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("a varint runs past the end")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, at
        shift += 7


def _check_ids(ids: Ints) -> None:
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= 1 << 31):
        raise WireError("a stat metadata id over 31 bits")


def _stats(
    data: Bytes, cur: Ints, end: Ints
) -> tuple[Ints, tuple[NDArray[np.int32], NDArray[np.int32]]]:
    """The stats of events whose stats start at ``cur`` and end at ``end``.

    How many each has, and their ids and starts grouped by event (:func:`_stat_rounds`).
    """
    owners, found = _stat_rounds(data, cur, end)
    counts = np.zeros(len(cur), np.int64)
    if not owners:
        return counts, (np.zeros(0, np.int32), np.zeros(0, np.int32))
    # Round k holds the k-th stat of each event it names: each goes to its event's k-th place.
    counts += np.bincount(np.concatenate(owners), minlength=len(cur))
    place = np.cumsum(counts) - counts
    total = int(counts.sum())
    stat_id = np.empty(total, np.int32)
    stat_at = np.empty(total, np.int32)
    for k, (owner, (ids, begin)) in enumerate(zip(owners, found, strict=True)):
        _check_ids(ids)
        where = place[owner]
        where += k
        stat_id[where] = ids
        stat_at[where] = begin
    return counts, (stat_id, stat_at)


def _stat_rounds(data: Bytes, cur: Ints, end: Ints) -> tuple[list[Ints], list[tuple[Ints, Ints]]]:
    """The stats of events whose stats start at ``cur`` and end at ``end``, in rounds.

    The first stat of each event, then the second...: for each round, the events (their
    indices in ``cur``) that have a stat in it, and those stats' ids and starts. ``cur``
    moves to each event's end.

    A stat's header, its length and its first field (the metadata id) are read from one
    word where the length is one byte and the id at most five; others a field at a time.
    """
    owners: list[Ints] = []
    found: list[tuple[Ints, Ints]] = []
    live = np.flatnonzero(cur < end)
    while len(live):
        here = cur[live]
        word = word_at(data, here)
        if np.all((word & _PLAIN_MASK) == _PLAIN):  # the common round: a few passes
            length = ((word >> EIGHT) & BYTE).astype(np.int64)
            stop = here + 2 + length
            if int(length.min()) >= 2 and not np.any(stop > end[live]):
                owners.append(live)
                found.append((((word >> _ID_AT) & BYTE).view(np.int64), here + 2))
                cur[live] = stop
                live = live[stop < end[live]]
                continue
        is_stat = (word & BYTE) == _STATS
        if not is_stat.all():
            other = live[~is_stat]
            if np.any(data[cur[other]] != _OCCURRENCES):
                raise WireError("an event field this decoder does not know")
            _, size = varints(data, cur[other] + 1)
            cur[other] += 1 + size
            live, here, word = live[is_stat], here[is_stat], word[is_stat]
        length = ((word >> EIGHT) & BYTE).astype(np.int64)
        # The id: one byte (under 128) or two; longer ones a field at a time below.
        low, high = (word >> _ID_AT) & BYTE, (word >> _ID_NEXT) & BYTE
        one = low < 0x80
        ok = one | (high < 0x80)
        ids = np.where(one, low, (low & _SEVEN_BITS) | (high << _SEVEN))
        size = np.where(one, 1, 2)
        begin = here + 2
        stop = begin + length
        fast = ok & (length < 0x80) & (((word >> np.uint64(16)) & BYTE) == _STAT_ID)
        fast &= length >= 1 + size
        if not fast.all():
            slow = np.flatnonzero(~fast)
            told, size = varints(data, here[slow] + 1)
            begin[slow] = here[slow] + 1 + size
            stop[slow] = begin[slow] + told.astype(np.int64)
            if np.any(told >= 1 << 31):
                raise WireError("a stat runs past its event")
            ids[slow] = _stat_ids(data, begin[slow], stop[slow]).view(np.uint64)
        if np.any(stop > end[live]):
            raise WireError("a stat runs past its event")
        owners.append(live)
        found.append((ids.view(np.int64), begin))
        cur[live] = stop
        live = live[stop < end[live]]
    if np.any(cur != end):
        raise WireError("an event's fields run past its end")
    return owners, found


def _stat_ids(data: Bytes, at: Ints, end: Ints) -> Ints:
    """Each stat's metadata id: its first field, as the profiler writes it.

    A stat that starts otherwise is parsed by the runtime.
    """
    ids = np.zeros(len(at), np.int64)
    nonempty = at < end
    plain = np.zeros(len(at), bool)
    plain[nonempty] = data[at[nonempty]] == _STAT_ID
    value, _ = varints(data, at[plain] + 1)
    ids[plain] = value.view(np.int64)
    for i in np.flatnonzero(nonempty & ~plain).tolist():
        ids[i] = xspace.parse_stat(bytes(data[int(at[i]) : int(end[i])])).metadata_id
    return ids
