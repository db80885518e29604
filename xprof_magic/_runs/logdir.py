"""A log directory as one value, and the one way every capture stores a run in it.

A :class:`Logdir` is parsed once, where the user gives it: its local folder, and the
``gs://bucket/prefix`` it mirrors, if any. :func:`stage` opens a capture's staging folder
(checking the bucket first); :func:`store` commits the run there and uploads it, for
``%%xprof``, :func:`xprof_magic.capture` and ``%xprof capture`` alike, with the same errors.
:mod:`xprof_magic._runs.gcs` (and google-cloud-storage) is imported only for a ``gs://`` log
directory. IPython-free.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprof_magic._runs import store as _store

if TYPE_CHECKING:
    from xprof_magic._runs.gcs import Remote

__all__ = ["Logdir", "StoreError", "Stored", "stage", "store"]


@dataclass(frozen=True)
class Logdir:
    """A log directory, parsed once: the local folder runs are written to and read, and its mirror.

    The mirror is the ``gs://`` location it mirrors, if any. ``str()`` gives what the user typed.
    """

    text: str
    local: Path
    remote: Remote | None = None

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str | os.PathLike[str] | None = None) -> Logdir:
        """A folder or ``gs://bucket/prefix`` as given; None: the default.

        The default is ``$XPROF_MAGIC_LOGDIR``, else ``xprof_logs``. Raises
        :class:`~xprof_magic._runs.store.LogdirError` for a ``gs://`` text that names no bucket.
        """
        given = _store.default_logdir_text() if text is None else os.fspath(text)
        if not _store.is_remote(given):
            return cls(given, Path(given).expanduser())
        from xprof_magic._runs import gcs as _gcs

        remote = _gcs.parse(given)
        return cls(given, remote.mirror, remote)


class StoreError(_store.LogdirError):
    """A finished capture could not be stored, and nothing of it was kept."""

    @classmethod
    def of(cls, logdir: Logdir, error: BaseException) -> StoreError:
        """The one line for ``error``, raised while storing into ``logdir``, and its fix."""
        if isinstance(error, StoreError):
            return error
        full = (isinstance(error, OSError) and error.errno == errno.ENOSPC) or (
            "No space left" in str(error)
        )
        hint = (
            "free space or choose another --logdir"
            if full
            else f"check that {logdir.local} can be written, or choose another --logdir"
        )
        return cls(f"the capture could not be stored in {logdir.local}: {error}; {hint}")


@dataclass(frozen=True)
class Stored:
    """A committed run: its folder, and how its upload went.

    The folder is renamed if the bucket took its name meanwhile; how the upload went is one line (""
    for a local log directory).
    """

    run_dir: Path
    upload: str = ""


def stage(logdir: Logdir) -> _store.Staging:
    """Check that ``logdir`` (and its bucket) can hold a run and open a staging folder.

    Raises :class:`~xprof_magic._runs.store.LogdirError` before anything is written.
    """
    taken: frozenset[str] = frozenset()
    if logdir.remote is not None:
        from xprof_magic._runs import gcs as _gcs

        taken = frozenset(_gcs.check(logdir.remote))
    staging = _store.begin(logdir.local)
    return _store.Staging(staging.logdir, staging.path, taken)


def store(logdir: Logdir, staging: _store.Staging, name: str, metadata: dict[str, Any]) -> Stored:
    """Commit a staged run into ``logdir``, then upload it to the bucket it mirrors.

    This is the one way every capture is stored; the commit is
    :func:`xprof_magic._runs.store.commit`.

    Raises :class:`StoreError` when the run could not be committed (the staging folder is gone, no
    run half-written); an upload that fails keeps the local run and says so.
    """
    try:
        taken = set(staging.taken)
        if logdir.remote is not None:
            from xprof_magic._runs import gcs as _gcs

            taken |= _gcs.taken(logdir.remote)  # best effort: never raises for the network
        run_dir = _store.commit(staging, name, metadata, taken)
    except Exception as error:
        _store.discard(staging)
        raise StoreError.of(logdir, error) from error
    if logdir.remote is None:
        return Stored(run_dir)
    from xprof_magic._runs import gcs as _gcs

    try:
        uploaded = _gcs.upload(logdir.remote, run_dir)
    except (_gcs.UploadError, _store.LogdirError) as error:
        return Stored(run_dir, f"warning: {error}")
    return Stored(uploaded.run_dir, uploaded.text())
