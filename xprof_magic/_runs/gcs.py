"""Log directories on Google Cloud Storage: ``--logdir gs://bucket/prefix``.

A capture never writes to the bucket directly. It stages and commits in the log directory's
local mirror (:func:`xprof_magic._runs.store.local_logdir`) exactly as in a local folder, so a run
is complete, named once and never overwritten there; then :func:`upload` copies the committed
run to ``gs://bucket/prefix/plugins/profile/<run>/``. Objects are created with
``ifGenerationMatch=0``, so an object that exists is never replaced, and the timelines
(``*.xplane.pb``) go last, since XProf lists a run's tools and hosts from them. The run name
is chosen free in the bucket as well as in the mirror (:func:`check` lists the names taken).
A failed upload loses nothing: the run stays in the mirror, and the message says where.

The summary reads the mirror (no download for this kernel's own captures), and the viewer
serves the mirror: :func:`sync` first copies down the runs other hosts wrote to the bucket.
XProf could serve ``gs://`` itself, but its C++ converters read the timelines through TSL's
GCS client, which always calls ``www.googleapis.com`` (no emulator endpoint, so untestable
here), and it would write its caches into the bucket.

This uses google-cloud-storage (a dependency of XProf) with Application Default
Credentials; ``STORAGE_EMULATOR_HOST`` points it at an emulator with anonymous credentials.
It is imported only when a ``gs://`` log directory is used. IPython-free.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xprof_magic._runs import store as _store
from xprof_magic._units import data_size, seconds

__all__ = [
    "EMULATOR_ENV",
    "UPLOADED_FILE",
    "Remote",
    "Synced",
    "UploadError",
    "Uploaded",
    "check",
    "parse",
    "problem",
    "sync",
    "taken",
    "upload",
]

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
CHECK_TIMEOUT_S = (5.0, 30.0)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
# Files of a run worth copying down; XProf's caches (``.cached_tools.json``, ``*.SSTABLE``,
# ``*.op_stats_v2.pb``, ...) are rebuilt locally instead.
_RUN_FILES = (_store.XPLANE_SUFFIX, ".trace.json.gz", _store.METADATA_FILE)
UPLOADED_FILE = "xprof_magic.uploaded"
"""Written last by :func:`upload`: the run's files, so a copy down knows the run is whole."""
_CLAIM_ATTEMPTS = 20
TAKEN_TIMEOUT_S = 10.0
_CREDENTIALS_FIX = (
    "on Colab run `from google.colab import auth; auth.authenticate_user()`, elsewhere "
    "`gcloud auth application-default login` (a TPU VM uses its service account)"
)


class UploadError(Exception):
    """A run could not be copied to the bucket; the message names the local copy kept."""


@dataclass(frozen=True)
class Remote:
    """A ``gs://bucket/prefix`` log directory."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def mirror(self) -> Path:
        """The local folder its runs are written to and served from."""
        return _store.local_logdir(self.url)

    def profile_prefix(self) -> str:
        """The object prefix runs live under: ``prefix/plugins/profile/``."""
        return "/".join([*filter(None, [self.prefix]), *_store.PROFILE_DIR, ""])

    def run_url(self, run: str) -> str:
        return f"gs://{self.bucket}/{self.profile_prefix()}{run}"


@dataclass(frozen=True)
class Uploaded:
    """A run copied to the bucket, and its local copy.

    ``run_dir`` is its local copy, renamed when another writer had taken the name in the bucket
    meanwhile.
    """

    url: str
    files: int
    size: int
    seconds: float
    run_dir: Path

    def text(self) -> str:
        return (
            f"uploaded to {self.url} ({self.files} files, {data_size(self.size)}, "
            f"{seconds(self.seconds)})"
        )


@dataclass(frozen=True)
class Synced:
    """Runs copied down into the mirror, and one line per run that could not be."""

    runs: tuple[str, ...] = ()
    failures: tuple[str, ...] = field(default_factory=tuple)


def parse(url: str) -> Remote:
    """``gs://bucket[/prefix]`` as a :class:`Remote`.

    :class:`~xprof_magic._runs.store.LogdirError` when it is not one.
    """
    bucket, _, prefix = url.removeprefix(_store.GCS_SCHEME).partition("/")
    parts = [p for p in prefix.split("/") if p]
    if not _BUCKET.match(bucket) or any(p in (".", "..") for p in parts):
        raise _store.LogdirError(
            f"--logdir {url} is not a Cloud Storage location; give gs://BUCKET/PATH, "
            "e.g. gs://my-bucket/xprof"
        )
    return Remote(bucket, "/".join(parts))


def _endpoint() -> str:
    return os.environ.get(EMULATOR_ENV) or "https://storage.googleapis.com"


@functools.lru_cache(maxsize=4)
def _client_for(endpoint: str) -> Any:
    from google.cloud import storage

    # No project: listing and writing objects need none, and Colab's credentials name none
    # ("Project was not passed and could not be determined").
    return storage.Client(project=None)


def _client() -> Any:
    """One client per endpoint; ``STORAGE_EMULATOR_HOST`` is read when it is made."""
    return _client_for(_endpoint())


def problem(error: BaseException, remote: Remote, doing: str) -> str | None:
    """One line naming a Cloud Storage problem and its fix, or None for other errors."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from requests import exceptions as http

    where = f"gs://{remote.bucket}"
    if isinstance(error, auth.DefaultCredentialsError):
        return f"no Google Cloud credentials found for {doing} {remote.url}: {_CREDENTIALS_FIX}"
    if isinstance(error, (auth.RefreshError, api.Unauthorized)):
        return (
            f"the Google Cloud credentials were refused for {doing} {remote.url} (expired or "
            f"revoked?): {_CREDENTIALS_FIX}"
        )
    if isinstance(error, api.NotFound):
        return (
            f"bucket {where} does not exist: create it (gcloud storage buckets create {where}) "
            "or pass --logdir an existing bucket"
        )
    if isinstance(error, api.Forbidden):
        return (
            f"no permission for {doing} {remote.url}: grant your account roles/storage."
            f"objectAdmin on {where}, or pass --logdir a bucket you can write"
        )
    if isinstance(error, (http.ConnectionError, http.Timeout, auth.TransportError)):
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return (
            f"cannot reach Cloud Storage at {_endpoint()} for {doing} {remote.url} ({reason}); "
            f"check the network{' and ' + EMULATOR_ENV if os.environ.get(EMULATOR_ENV) else ''}"
        )
    if isinstance(error, api.GoogleAPICallError):
        return f"Cloud Storage refused {doing} {remote.url}: {str(error).splitlines()[0][:300]}"
    return None


def _names(remote: Remote, retry: Any, timeout: Any) -> set[str]:
    blobs = _client().list_blobs(
        remote.bucket,
        prefix=remote.profile_prefix(),
        delimiter="/",
        retry=retry,
        timeout=timeout,
    )
    for _ in blobs:
        pass
    start = len(remote.profile_prefix())
    return {str(p)[start:].rstrip("/") for p in blobs.prefixes}


def check(remote: Remote) -> set[str]:
    """The run names taken in the bucket; ``LogdirError`` when the bucket cannot be listed.

    The :class:`~xprof_magic._runs.store.LogdirError` says why in one line: credentials, bucket,
    permission, network.

    One request without retries, so that a cell with an unusable log directory is refused at once
    instead of after minutes of backoff.
    """
    try:
        return _names(remote, None, CHECK_TIMEOUT_S)
    except Exception as error:
        line = problem(error, remote, "listing") or (
            f"cannot list {remote.url}: {_one_line(error)}; check --logdir and the "
            "credentials (gcloud auth application-default login)"
        )
        raise _store.LogdirError(line) from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


def taken(remote: Remote) -> set[str]:
    """The run names taken in the bucket now, for naming a run at commit: best effort.

    A few retries for :data:`TAKEN_TIMEOUT_S`, then none known, since the capture must be stored
    whatever the network does; the upload's claim (:func:`upload`) still keeps two runs apart.
    """
    from google.cloud.storage.retry import DEFAULT_RETRY

    try:
        return _names(remote, DEFAULT_RETRY.with_timeout(TAKEN_TIMEOUT_S), TAKEN_TIMEOUT_S)
    except Exception:
        return set()


def _upload_order(run_dir: Path) -> list[Path]:
    """Every file of the run in upload order: the metadata first, the timelines last.

    The metadata claims the name; XProf finds a run's tools through the timelines.
    """
    files = [p for p in run_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    return sorted(
        files,
        key=lambda p: (
            p.name != _store.METADATA_FILE,
            p.name.endswith(_store.XPLANE_SUFFIX),
            p.name,
        ),
    )


def upload(remote: Remote, run_dir: Path) -> Uploaded:
    """Copy a committed run to ``gs://.../plugins/profile/<run>/``, never replacing an object.

    The run's metadata goes first and claims the name: when another writer (another host of
    a pod, running the same cell) created it first, the local run takes the next free name
    (``-2``, ``-3``, ...) and claims that. The timelines go last, then
    :data:`UPLOADED_FILE`, listing the files, which says the run is whole. A retried write
    that finds its own object already there carries on. Raises :class:`UploadError` (one
    line, naming the local copy that is kept) for anything else.
    """
    from google.api_core import exceptions as api

    started = time.perf_counter()
    bucket = _client().bucket(remote.bucket)
    try:
        run_dir = _claim(remote, bucket, run_dir, _upload_order(run_dir)[0].name)
        files = _upload_order(run_dir)
        for path in files[1:]:
            _put(remote, bucket, run_dir, path.name, path.read_bytes())
        listing = json.dumps({"files": [p.name for p in files]}, indent=1).encode()
        _put(remote, bucket, run_dir, UPLOADED_FILE, listing)
    except api.PreconditionFailed as error:
        raise UploadError(
            f"the upload to {remote.run_url(run_dir.name)} stopped: {error.message}; "
            f"nothing there was replaced; {_keep(remote, run_dir)}"
        ) from None
    except UploadError:
        raise
    except Exception as error:
        line = problem(error, remote, "writing to") or _one_line(error)
        raise UploadError(f"the upload failed: {line}; {_keep(remote, run_dir)}") from None
    size = sum(p.stat().st_size for p in files)
    return Uploaded(
        remote.run_url(run_dir.name), len(files), size, time.perf_counter() - started, run_dir
    )


def _keep(remote: Remote, run_dir: Path) -> str:
    url = remote.run_url(run_dir.name)
    return f"the run is kept in {run_dir}; copy it with: gcloud storage cp -n {run_dir}/* {url}/"


def _claim(remote: Remote, bucket: Any, run_dir: Path, first: str) -> Path:
    """Create the run's first object (its metadata) under a name nobody has.

    Returns the run's local copy, renamed to that name if it had to change.
    """
    from google.api_core import exceptions as api

    for _ in range(_CLAIM_ATTEMPTS):
        try:
            _put(remote, bucket, run_dir, first, (run_dir / first).read_bytes())
            return run_dir
        except api.PreconditionFailed:
            run_dir = _store.rename_run(run_dir, taken(remote))
    raise UploadError(
        f"no free run name found in {remote.url} after {_CLAIM_ATTEMPTS} tries; "
        f"{_keep(remote, run_dir)}"
    )


def _put(remote: Remote, bucket: Any, run_dir: Path, name: str, data: bytes) -> None:
    """Create one object of the run, only if absent.

    One already there with the very same bytes (a write retried after its answer was lost) counts as
    written.
    """
    from google.api_core import exceptions as api
    from google.cloud.storage.retry import DEFAULT_RETRY

    blob = bucket.blob(f"{remote.profile_prefix()}{run_dir.name}/{name}")
    try:
        blob.upload_from_string(data, if_generation_match=0, retry=DEFAULT_RETRY)
    except api.PreconditionFailed:
        there = bucket.get_blob(blob.name)
        if there is None or there.size != len(data) or there.download_as_bytes() != data:
            raise


def _complete(names: set[str], listing: dict[str, Any] | None) -> bool:
    """Whether a run in the bucket is whole.

    One this package uploaded (it has our metadata) is whole once :data:`UPLOADED_FILE` is there and
    every file it lists; a run written by another tool, once it has a timeline.
    """
    if _store.METADATA_FILE not in names:
        return any(n.endswith(_store.XPLANE_SUFFIX) for n in names)
    files = (listing or {}).get("files")
    return isinstance(files, list) and {str(f) for f in files} <= names


def sync(remote: Remote) -> Synced:
    """Copy down the runs of the bucket that the mirror lacks (written by other hosts).

    Each run lands in the mirror in one rename, like a capture; a run still being uploaded
    is left for a later sync. Raises :class:`~xprof_magic._runs.store.LogdirError` when the bucket
    cannot be listed.
    """
    names = check(remote)
    profile = _store.profile_dir(remote.mirror)
    missing = sorted(n for n in names if n and not n.startswith(".") and not (profile / n).exists())
    copied: list[str] = []
    failures: list[str] = []
    for name in missing:
        try:
            if _download(remote, name, profile):
                copied.append(name)
        except Exception as error:
            line = problem(error, remote, "reading") or f"{type(error).__name__}: {error}"
            failures.append(f"run {name} of {remote.url} was not copied: {line}")
    return Synced(tuple(copied), tuple(failures))


def _download(remote: Remote, name: str, profile: Path) -> bool:
    prefix = f"{remote.profile_prefix()}{name}/"
    blobs = {
        str(b.name)[len(prefix) :]: b
        for b in _client().list_blobs(remote.bucket, prefix=prefix, delimiter="/")
    }
    wanted = {n: b for n, b in blobs.items() if n.endswith(_RUN_FILES)}
    listing = None
    if UPLOADED_FILE in blobs:
        with contextlib.suppress(ValueError):
            listing = json.loads(blobs[UPLOADED_FILE].download_as_bytes())
    if not _complete(set(blobs), listing if isinstance(listing, dict) else None):
        return False
    staging = remote.mirror / _store.STAGING_DIR / uuid.uuid4().hex
    folder = staging / name
    try:
        folder.mkdir(parents=True)
        for file_name, blob in wanted.items():
            blob.download_to_filename(str(folder / file_name))
        profile.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(folder, profile / name)
        except OSError:
            return False
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            staging.parent.rmdir()
