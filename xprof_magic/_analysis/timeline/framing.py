"""Where each event of a big serialized line starts, found with numpy, without the runtime.

A line's events are ``events`` fields one after another: a tag (``0x22``), a length (a
varint) and the event's bytes; the next starts right after. Finding them is a walk whose
every step depends on the one before, and the protobuf runtime that walked it for
:mod:`.wire` copied the whole line twice (the buffer into ``bytes``, then every event into
its arena: 80 MB for the biggest line of a 100 MB capture) and made one Python ``bytes``
per event only for its length.

Here many walkers step side by side, one step each per round of array operations. The
first starts at the first event; each other one at a guess in a block of the line of its
own (a byte ``0x22`` there). A walker that starts on a stat or inside a value usually lands
on a real event within one event: from there its path is the true one, since a step
depends on nothing but the bytes where it starts. After a few steps each walker marks
where it stands; a walker goes on until it stands exactly where the next walker marked
(that mark is then on the true path, and the next walker's path from it is the true one),
or past it (the next walker had not joined the true path: it is dropped, and the walker
goes on to the one after), or until the events end. Only exact meetings join paths, so
the events found are those a walk from the first one finds, and a walker that never
joins the true path costs time, not the result.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline.line_arrays import Ints
from xprof_magic._analysis.timeline.varint import Bytes, WireError, leading_varint, word_at

__all__ = ["event_headers"]

_EVENTS = 0x22  # XLine.events: field 4, length-delimited
_MARK_AFTER = 8
"""Steps a walker takes before marking where it stands (it has joined the true path by
then, unless its guess was far off)."""
_EVENTS_A_BLOCK = 96
"""About how many events each walker's block holds."""
_PROBE = 32
"""Steps of the first walker, alone, to measure the events' size, hence the blocks'."""
_RUNNING, _MET, _ENDED, _BROKEN = range(4)
_PATH_CHUNK = 512
"""Walkers whose steps are copied out together."""


def event_headers(data: Bytes, first: int) -> tuple[Ints, int]:
    """Where each ``events`` field starts, and where they stop.

    From ``first`` (the first one) on, one after another; they stop at the end, or at the
    first field that is not one. :class:`~.varint.WireError` where a length runs past the end
    of the line.
    """
    n = len(data)
    if n < 2 or not 0 <= first < n or n >= 1 << 31:
        raise WireError("no events to walk, or a line of 2 GB or more")
    probe, stop, state = _walk_alone(data, first, _PROBE)
    if state != _RUNNING:  # a short line: walked already
        if state == _BROKEN:
            raise WireError("an event runs past the end of its line")
        return probe, stop
    size = max(2.0, (stop - first) / len(probe))
    block = max(256, int(size * _EVENTS_A_BLOCK))
    starts = _guesses(data, np.arange(stop, n - 1, block, dtype=np.int64))
    starts = np.concatenate(([stop], starts))
    headers, end = _walk_together(data, starts)
    found: Ints = np.concatenate((probe, headers), dtype=np.int64)  # one copy, in int64
    return found, end


def _walk_alone(data: Bytes, at: int, steps: int) -> tuple[Ints, int, int]:
    """One walker, ``steps`` steps at most: its events, where it stands, its state."""
    found: list[int] = []
    here = np.array([at], np.int64)
    for _ in range(steps):
        after, state = _step(data, here)
        if state is not None and state[0] != _RUNNING:
            return np.array(found, np.int64), int(here[0]), int(state[0])
        found.append(int(here[0]))
        here = after
    return np.array(found, np.int64), int(here[0]), _RUNNING


def _guesses(data: Bytes, bounds: Ints) -> Ints:
    """A guess at where an event starts in each block.

    For each block's start, the first byte ``0x22`` in the 24 from it whose event would start
    with a metadata id (``0x08``), or else the block's start.
    """
    if not len(bounds):
        return bounds
    last = len(data) - 1
    window = np.minimum(bounds[:, None] + np.arange(24), last - 2)
    hit = (data[window] == _EVENTS) & (data[window + 2] == 0x08)
    return np.where(hit.any(axis=1), window[np.arange(len(bounds)), hit.argmax(axis=1)], bounds)


def _step(data: Bytes, here: Ints) -> tuple[Ints, Ints | None]:
    """Each walker's next position (where its event ends), and its state.

    The state is running (it stood on an event), ended (at the end, or on another field) or
    broken (a length that runs past the end, or a bad varint); None: all running.
    """
    n = len(data)
    if len(here) and int(here.max()) < n - 1:  # the usual round: one-byte lengths
        length = data[here + 1]
        if bool(np.all(data[here] == _EVENTS)) and int(length.max()) < 0x80:
            after = here + 2 + length
            if int(after.max()) <= n:
                return after, None
    tag = data[np.minimum(here, n - 1)]
    event = (here < n) & (tag == _EVENTS)
    length = data[np.minimum(here + 1, n - 1)].astype(np.int64)
    size = np.ones(len(here), np.int64)
    ok = here + 1 < n
    longer = np.flatnonzero(event & (length >= 0x80))
    if len(longer):
        value, grown, fits = leading_varint(word_at(data, here[longer] + 1), 5)
        length[longer] = value.astype(np.int64)
        size[longer] = grown
        ok[longer] &= fits
    after = here + 1 + size + length
    ok &= after <= n
    state: Ints = np.where(event, np.where(ok, _RUNNING, _BROKEN), _ENDED)
    return after, state


def _walk_together(data: Bytes, starts: Ints) -> tuple[NDArray[np.int32], int]:
    """The walk from ``starts[0]`` (a true event), helped by walkers from the others."""
    count = len(starts)
    here = starts.copy()
    state = np.full(count, _RUNNING, np.int64)
    rounds = _Steps(count, 2 * _EVENTS_A_BLOCK + 4 * _MARK_AFTER)
    for _ in range(_MARK_AFTER):
        _round(data, here, state, rounds, np.flatnonzero(state == _RUNNING))
    marked = state == _RUNNING  # walkers whose mark may be met
    marked[0] = False  # the first one is met by no one
    mark = here.copy()
    target = _next_marked(marked)
    met = np.full(count, -1, np.int64)  # whom each walker met
    far = len(data) + 1
    # Each walker's goal: the mark of the walker it may meet (made again when one is dropped).
    goal = np.where(target >= 0, mark[np.maximum(target, 0)], far)
    live = np.flatnonzero(state == _RUNNING)
    while len(live):
        # Meetings and passes before each step: a pass drops the walker passed.
        at = here[live]
        while True:
            passed = live[at > goal[live]]
            if not len(passed):
                break
            marked[np.unique(target[passed])] = False
            target = _next_marked(marked)
            goal = np.where(target >= 0, mark[np.maximum(target, 0)], far)
        meeting = at == goal[live]
        if meeting.any():
            meet = live[meeting]
            met[meet] = target[meet]
            state[meet] = _MET
            rounds.stopped(meet)
            live = live[~meeting]
        if _round(data, here, state, rounds, live):
            live = live[state[live] == _RUNNING]
    return _stitched(starts, here, state, met, mark, rounds)


class _Steps:
    """Where each walker stood at each of its steps.

    Round ``k``'s row holds the ``k``-th step of the walkers that took one (a walker steps in
    every round until it stops). One array, grown by doubling, not an array per round: the
    line's part of the heap stays in one piece.
    """

    def __init__(self, walkers: int, rounds: int):
        self.at = np.zeros((rounds, walkers), np.int32)
        self.taken = np.full(walkers, -1, np.int64)  # -1: still walking
        self.rounds = 0

    def add(self, who: Ints, where: Ints) -> None:
        if self.rounds == len(self.at):
            self.at = np.concatenate((self.at, np.zeros_like(self.at)))
        self.at[self.rounds, who] = where
        self.rounds += 1

    def stopped(self, who: Ints) -> None:
        """Those walkers took their last step in the last round.

        Each steps in every round until it stops (so its steps are counted once, here, not
        in every round); one that stopped before is left as it was.
        """
        who = who[self.taken[who] < 0]
        self.taken[who] = self.rounds

    def path(self, walkers: list[int], first: Ints) -> NDArray[np.int32]:
        """The steps of ``walkers``, in turn, each from its step ``first[i]`` on.

        A few hundred walkers at a time (a copy of all their steps was as big as the steps).
        """
        chosen = np.array(walkers, np.int64)
        step = np.arange(self.rounds)[:, None]
        pieces = []
        for lo in range(0, len(chosen), _PATH_CHUNK):
            who, since = chosen[lo : lo + _PATH_CHUNK], first[lo : lo + _PATH_CHUNK]
            keep = (step >= since[None, :]) & (step < self.taken[who][None, :])
            pieces.append(self.at[: self.rounds, who].T[keep.T])
        found: NDArray[np.int32] = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        return found


def _round(data: Bytes, here: Ints, state: Ints, rounds: _Steps, who: Ints) -> bool:
    """One step of each walker in ``who``: its event kept where it stood on one.

    Whether any of them stopped (stood on no event).
    """
    if not len(who):
        return False
    where = here[who]
    after, now = _step(data, where)
    if now is None:
        rounds.add(who, where)
        here[who] = after
        return False
    running = now == _RUNNING
    if running.all():
        rounds.add(who, where)
        here[who] = after
        return False
    rounds.stopped(who[~running])  # their last step was the round before this one
    rounds.add(who[running], where[running])
    here[who[running]] = after[running]
    state[who[~running]] = now[~running]
    return True


def _next_marked(marked: np.ndarray) -> Ints:
    """For each walker, the next one after it with a mark that may be met (-1: none)."""
    count = len(marked)
    index = np.where(marked, np.arange(count), count)
    following = np.minimum.accumulate(index[::-1])[::-1]
    target = np.concatenate((following[1:], [count]))
    return np.where(target < count, target, -1)


def _stitched(
    starts: Ints, here: Ints, state: Ints, met: Ints, mark: Ints, rounds: _Steps
) -> tuple[NDArray[np.int32], int]:
    """The true path through the line's events, pieced from the walkers that met.

    The first walker's events up to the mark it met, then those of the walker it met from
    there (its steps from its mark on), and so on to the walker that reached the end.
    """
    del starts, mark  # the first walker's path starts at its start, each other's at its mark
    walker = 0
    chain = [0]
    while state[walker] == _MET:
        walker = int(met[walker])
        chain.append(walker)
    if state[walker] != _ENDED:
        raise WireError("an event runs past the end of its line")
    first = np.full(len(chain), _MARK_AFTER, np.int64)
    first[0] = 0
    return rounds.path(chain, first), int(here[walker])
