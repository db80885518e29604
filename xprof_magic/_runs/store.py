"""The log directory: where runs live, how they are named, and how they get there safely.

A run is ``<logdir>/plugins/profile/<run>/``, the layout XProf and TensorBoard list. The
profiler writes into a private staging folder; the finished session folder, metadata
included, is then moved into place with one ``rename``. So a run appears only when
complete, two captures in the same second never collide, and no run is ever overwritten.

A ``gs://bucket/prefix`` log directory is written through a local mirror folder
(:func:`local_logdir`), where all of the above holds; :mod:`xprof_magic._runs.logdir` commits
there and hands the run to :mod:`xprof_magic._runs.gcs` for upload. This module only knows where
the mirror is: no network here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "GCS_CACHE_ENV",
    "LOGDIR_ENV",
    "METADATA_FILE",
    "SUMMARY_FILE",
    "LogdirError",
    "RunInfo",
    "Staging",
    "begin",
    "capturing",
    "commit",
    "default_logdir",
    "default_logdir_text",
    "default_run_name",
    "discard",
    "hosts",
    "is_remote",
    "local_logdir",
    "process_alive",
    "profile_dir",
    "read_metadata",
    "rename_run",
    "run_path",
    "runs",
    "safe_run_name",
    "working",
    "write_json",
    "xplane_bytes",
    "xplanes",
]

LOGDIR_ENV = "XPROF_MAGIC_LOGDIR"
GCS_CACHE_ENV = "XPROF_MAGIC_GCS_CACHE"
GCS_SCHEME = "gs://"
METADATA_FILE = "xprof_magic.json"
SUMMARY_FILE = "xprof_magic_summary.json"
"""A run's saved summary (:mod:`xprof_magic._analysis.cache` writes it)."""
PROFILE_DIR = ("plugins", "profile")
XPLANE_SUFFIX = ".xplane.pb"
STAGING_DIR = ".xprof_magic_staging"
"""Under the log directory: one folder per capture in progress, ``<pid>-<hex>``, named by the
process that captures (:func:`capturing` reads it); removed when the run is committed."""
_STAGED = re.compile(r"(?P<pid>[0-9]+)-[0-9a-f]{32}(?P<summary>-summary)?")
NAME_MAX_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+@-]+")


class LogdirError(Exception):
    """The log directory cannot hold captures; the message says why and what to do."""


@dataclass(frozen=True)
class Staging:
    """A private folder the profiler writes into before the run is moved into place.

    ``taken``: run names a bucket already had when the capture started.
    """

    logdir: Path
    path: Path
    taken: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RunInfo:
    """One run in a log directory."""

    name: str
    path: Path
    hosts: tuple[str, ...]
    metadata: dict[str, Any] | None
    created: float


def default_logdir_text() -> str:
    """``$XPROF_MAGIC_LOGDIR`` as given (a folder or ``gs://...``), else ``xprof_logs``."""
    return os.environ.get(LOGDIR_ENV) or "xprof_logs"


def default_logdir() -> Path:
    """The local folder of the default log directory (see :func:`local_logdir`)."""
    return local_logdir(default_logdir_text())


def is_remote(logdir: object) -> bool:
    """Whether ``logdir`` names a Cloud Storage location, ``gs://bucket/prefix``."""
    return isinstance(logdir, str) and logdir.startswith(GCS_SCHEME)


def gcs_cache() -> Path:
    """Where ``gs://`` log directories are mirrored.

    ``$XPROF_MAGIC_GCS_CACHE``, else ``~/.cache/xprof_magic/gcs``.
    """
    configured = os.environ.get(GCS_CACHE_ENV)
    if configured:
        return Path(configured).expanduser().absolute()
    return Path.home() / ".cache" / "xprof_magic" / "gcs"


def local_logdir(logdir: str | os.PathLike[str]) -> Path:
    """The folder where runs of ``logdir`` are written and read.

    A local folder is itself; ``gs://bucket/prefix`` is its mirror,
    ``<gcs_cache()>/bucket/prefix``, so captures stage, commit and are summarized locally.
    Empty, ``.`` and ``..`` parts of the URL are dropped, so the mirror stays in the cache.
    """
    if not is_remote(logdir):
        return Path(logdir).expanduser()
    parts = [p for p in str(logdir)[len(GCS_SCHEME) :].split("/") if p not in ("", ".", "..")]
    return gcs_cache().joinpath(*parts)


def default_run_name(when: datetime, cell: int | None) -> str:
    """Names that sort by time and say which cell ran: ``20261130-021533-cell7``."""
    stamp = when.strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-cell{cell}" if cell is not None else f"{stamp}-capture"


def safe_run_name(name: str) -> str:
    """A readable name that stays one folder inside the log directory.

    Separators, ``..`` and other unsafe characters become ``_``; the result is never empty,
    hidden or longer than 100 characters.
    """
    cleaned = _UNSAFE.sub("_", name.strip()).strip("._")
    cleaned = cleaned[:NAME_MAX_CHARS].rstrip("._")
    if not cleaned:
        raise ValueError(
            f"run name {name!r} has no usable characters; use letters, digits, '.', '-' or '_'"
        )
    return cleaned


def profile_dir(logdir: str | os.PathLike[str]) -> Path:
    """``<logdir>/plugins/profile``: the folder XProf and TensorBoard list runs from."""
    return Path(logdir).joinpath(*PROFILE_DIR)


def run_path(logdir: str | os.PathLike[str], run: str) -> Path:
    """The folder of run ``run`` in ``logdir``."""
    return profile_dir(logdir) / run


def xplanes(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The run's timelines, one ``<host>.xplane.pb`` per host, sorted by host."""
    return sorted(Path(run_dir).glob(f"*{XPLANE_SUFFIX}"))


def hosts(run_dir: str | os.PathLike[str]) -> tuple[str, ...]:
    """The hosts of a run: its timelines' file names without ``.xplane.pb``."""
    return tuple(path.name[: -len(XPLANE_SUFFIX)] for path in xplanes(run_dir))


def xplane_bytes(run_dir: str | os.PathLike[str]) -> int:
    """The size of a run's timelines together, in bytes (0 if they vanished)."""
    total = 0
    for path in xplanes(run_dir):
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total


def begin(logdir: Path) -> Staging:
    """Check that ``logdir`` can hold a run and open a staging folder in it.

    Raises :class:`LogdirError` before anything is written when the folder cannot be made
    or written.
    """
    logdir = logdir.expanduser().absolute()
    if logdir.exists() and not logdir.is_dir():
        raise LogdirError(f"log directory {logdir} is a file; pass --logdir a folder")
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LogdirError(
            f"cannot create log directory {logdir}: {error.strerror or error}; "
            "pass --logdir a folder you can write"
        ) from None
    if not os.access(logdir, os.W_OK | os.X_OK):
        raise LogdirError(
            f"log directory {logdir} is not writable; pass --logdir a folder you can write"
        )
    profile = profile_dir(logdir)
    if profile.exists() and not (profile.is_dir() and os.access(profile, os.W_OK | os.X_OK)):
        raise LogdirError(
            f"{profile} is not a writable folder, so runs cannot be stored; "
            "pass --logdir another folder"
        )
    staging = logdir / STAGING_DIR / f"{os.getpid()}-{uuid.uuid4().hex}"
    try:
        staging.mkdir(parents=True)
    except OSError as error:
        raise LogdirError(
            f"cannot write in log directory {logdir}: {error.strerror or error}; "
            "pass --logdir a folder you can write"
        ) from None
    return Staging(logdir, staging)


def capturing(logdir: str | os.PathLike[str], summaries: bool = False) -> bool:
    """Whether a capture into ``logdir`` is in progress (with ``summaries``, or a run's summary).

    In progress means a staging folder :func:`begin` made whose process still runs (one left by a
    killed kernel does not count); a summary's is marked by :func:`working`.
    """
    try:
        names = os.listdir(Path(logdir) / STAGING_DIR)
    except OSError:
        return False
    for name in names:
        staged = _STAGED.fullmatch(name)
        if staged is None or (staged["summary"] and not summaries):
            continue
        if process_alive(int(staged["pid"])):
            return True
    return False


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (another user's counts).

    This is what names a staging folder, or a viewer's conversion scratch folder, as still in use.
    """
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass
    return True


@contextlib.contextmanager
def working(run_dir: Path) -> Iterator[None]:
    """Mark a run's summary, read right after its capture, as in progress in its log directory.

    ``capturing(logdir, summaries=True)`` says so: the viewer's conversion, which yields the CPUs to
    it anyway, then never claims normal priority beside it. Where the folder cannot be made, nothing
    is marked.
    """
    name = f"{os.getpid()}-{uuid.uuid4().hex}-summary"
    marker = run_dir.parent.parent.parent / STAGING_DIR / name
    try:
        marker.mkdir(parents=True)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        discard(Staging(run_dir, marker))


def discard(staging: Staging) -> None:
    """Remove a staging folder and, when it was the last one, the staging parent."""
    shutil.rmtree(staging.path, ignore_errors=True)
    with contextlib.suppress(OSError):
        staging.path.parent.rmdir()


def commit(
    staging: Staging, name: str, metadata: dict[str, Any], taken: Collection[str] = ()
) -> Path:
    """Move the staged session into ``<logdir>/plugins/profile/<name>`` and return it.

    The metadata is written into the session before the move, so the run is complete
    the moment it appears. A name already taken gets ``-2``, ``-3``, ... ; the rename itself
    refuses to replace a non-empty folder, so concurrent writers cannot overwrite each
    other. Names in ``taken`` (runs that exist elsewhere, e.g. in a bucket) are skipped too.
    The staging folder is removed whatever happens.
    """
    try:
        session = _staged_session(staging)
        write_json(session / METADATA_FILE, {**metadata, "run": name})
        profile = profile_dir(staging.logdir)
        profile.mkdir(parents=True, exist_ok=True)
        target = _claim(profile, name, session, frozenset(taken))
        if target.name != name:
            write_json(target / METADATA_FILE, {**metadata, "run": target.name})
        return target
    finally:
        discard(staging)


def rename_run(run_dir: Path, taken: Collection[str] = ()) -> Path:
    """Give a committed run the next free name, its metadata saying so; the run's new folder.

    The next free name is ``-2``, ``-3``, ...; none in ``taken`` either.
    """
    metadata = read_metadata(run_dir) or {}
    target = _claim(run_dir.parent, run_dir.name, run_dir, frozenset(taken) | {run_dir.name})
    if metadata:
        write_json(target / METADATA_FILE, {**metadata, "run": target.name})
    return target


def _staged_session(staging: Staging) -> Path:
    sessions = [p for p in profile_dir(staging.path).glob("*") if p.is_dir()]
    if len(sessions) != 1:
        raise LogdirError(
            f"the profiler wrote {len(sessions)} sessions into {staging.path}, expected one"
        )
    return sessions[0]


def _claim(profile_dir: Path, name: str, session: Path, taken: frozenset[str]) -> Path:
    number = 1
    while True:
        candidate = profile_dir / (name if number == 1 else f"{name}-{number}")
        number += 1
        if candidate.name in taken or candidate.exists():
            continue
        try:
            os.rename(session, candidate)
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
        return candidate


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half of it."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_metadata(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``xprof_magic.json``, or None for runs written by other tools."""
    try:
        data = json.loads((run_dir / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def runs(logdir: Path | str | None = None) -> list[RunInfo]:
    """Every run in the log directory that holds a capture, newest first."""
    root = profile_dir(local_logdir(logdir) if logdir is not None else default_logdir())
    found: list[RunInfo] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        path = Path(entry.path)
        names = hosts(path)
        if not names:
            continue
        metadata = read_metadata(path)
        created = _created(metadata, entry)
        found.append(RunInfo(entry.name, path, names, metadata, created))
    found.sort(key=lambda r: (r.created, r.name), reverse=True)
    return found


def _created(metadata: dict[str, Any] | None, entry: os.DirEntry[str]) -> float:
    if metadata and isinstance(metadata.get("end_ns"), int):
        return float(metadata["end_ns"]) / 1e9
    try:
        return entry.stat().st_mtime
    except OSError:
        return 0.0
