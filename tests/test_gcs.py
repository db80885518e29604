"""``gs://`` log directories, against a real Cloud Storage emulator and real captures.

The emulator is gcp-storage-emulator (PyPI, in the ``dev`` extra), run as a process on a free
loopback port with in-memory storage; ``STORAGE_EMULATOR_HOST`` points google-cloud-storage at
it with anonymous credentials. What it cannot check: XProf serving ``gs://`` itself (its C++
converters always call www.googleapis.com; the viewer serves the local mirror instead), and
``ifGenerationMatch`` (the emulator ignores preconditions, so names are kept apart by listing).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._kernel import free_port
from tests.conftest import missing, run
from xprof_magic._runs import gcs as _gcs
from xprof_magic._runs import metadata as _metadata
from xprof_magic._runs import store as _store
from xprof_magic._viewer.process.client import fetch_json
from xprof_magic._viewer.process.manager import Launched, Reused, ensure_viewer

BUCKET = "xprof-test"
CELL = "import torch, torch_xla\nx = (torch.ones(8, 8, device=torch_xla.device()) * 2).sum().item()"


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The emulator's endpoint, with bucket ``xprof-test``; the mirror in a private folder."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        missing("needs the Cloud Storage emulator: pip install gcp-storage-emulator")
    port = free_port()
    command = ["start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", *command, "--default-bucket", BUCKET],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    saved = {k: os.environ.get(k) for k in (_gcs.EMULATOR_ENV, _store.GCS_CACHE_ENV)}
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert process.poll() is None, "the emulator exited at start"
            assert time.monotonic() < deadline, "the emulator did not listen within 30 s"
            time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        os.environ[_gcs.EMULATOR_ENV] = endpoint
        os.environ[_store.GCS_CACHE_ENV] = str(tmp_path_factory.mktemp("gcs-mirror"))
        yield endpoint
    finally:
        process.kill()
        process.wait()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def objects(prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` in the test bucket: name relative to it -> content."""
    client = _gcs._client()
    return {
        blob.name[len(prefix) :]: blob.download_as_bytes()
        for blob in client.list_blobs(BUCKET, prefix=prefix)
    }


def test_urls_and_mirrors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_store.GCS_CACHE_ENV, str(tmp_path))
    remote = _gcs.parse("gs://my-bucket//team/xprof/")
    assert remote == _gcs.Remote("my-bucket", "team/xprof")
    assert remote.url == "gs://my-bucket/team/xprof"
    assert remote.profile_prefix() == "team/xprof/plugins/profile/"
    assert _gcs.parse("gs://my-bucket").profile_prefix() == "plugins/profile/"
    assert remote.mirror == tmp_path / "my-bucket" / "team" / "xprof"
    assert _store.local_logdir("gs://b/../../etc") == tmp_path / "b" / "etc"
    assert _store.local_logdir("logs") == Path("logs")
    for bad in ("gs://", "gs://B", "gs://bucket/../x", "gs://bucket/./x", "gs://a"):
        with pytest.raises(_store.LogdirError, match="gs://BUCKET/PATH"):
            _gcs.parse(bad)


LOCAL_ONLY = """
import sys, xprof_magic
from xprof_magic._capture import ondemand as _ondemand
with xprof_magic.capture(logdir=sys.argv[1], name="local", server=False):
    pass
try:
    _ondemand.capture([sys.argv[2]], sys.argv[1], _ondemand.Options(duration_ms=100))
except _ondemand.CaptureError:
    pass
print(sorted(m for m in sys.modules if m.startswith(("xprof_magic._runs.gcs", "google.cloud"))))
"""


def test_local_log_directories_never_load_the_cloud_code(tmp_path: Path) -> None:
    dead = f"localhost:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_ONLY, str(tmp_path), dead],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert [r.name for r in _store.runs(tmp_path)] == ["local"]


def test_a_cell_lands_complete_in_the_bucket_and_is_never_overwritten(
    emulator: str, ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    logdir = f"gs://{BUCKET}/cells"
    result = run(ip, logdir, CELL, "--name first")  # type: ignore[arg-type]
    assert result.error_in_exec is None
    shown = capsys.readouterr().out
    url = f"{logdir}/plugins/profile/first"
    assert f"uploaded to {url} (" in shown, shown
    mirror = _store.local_logdir(logdir)
    (local,) = _store.runs(mirror)
    assert "xprof: run first (ok)" in shown and f"stored in {local.path}\n" in shown, shown
    assert "labelled blocks" in shown, shown  # --no-display: no summary, so the text has them
    stored = objects("cells/plugins/profile/first/")
    xplane = f"{local.hosts[0]}.xplane.pb"
    assert stored[xplane] == (local.path / xplane).read_bytes()
    meta = _metadata.read(local.path)
    assert meta is not None and meta.status == "ok" and meta.run == "first"
    assert stored[_store.METADATA_FILE] == (local.path / _store.METADATA_FILE).read_bytes()

    # The same name again, and a name another host already took in the bucket (not in the
    # mirror): each gets a free name, and nothing in the bucket changes.
    _gcs._client().bucket(BUCKET).blob(
        "cells/plugins/profile/first-2/h.xplane.pb"
    ).upload_from_string(b"theirs")
    before = objects("cells/")
    result = run(ip, logdir, CELL, "--name first")  # type: ignore[arg-type]
    assert result.error_in_exec is None
    assert f"uploaded to {url}-3 (" in capsys.readouterr().out
    after = objects("cells/")
    assert {k: v for k, v in after.items() if k in before} == before
    assert {k.split("/")[2] for k in after} == {"first", "first-2", "first-3"}
    assert _store.read_metadata(mirror / "plugins" / "profile" / "first-3") is not None


@pytest.mark.slow
def test_on_demand_capture_of_a_worker_lands_in_the_bucket(
    emulator: str, ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_ondemand import labels_of, start_worker

    port = free_port()
    worker = start_worker(port, "gcs_worker", 0)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        ip.run_line_magic(
            "xprof",
            f"capture localhost:{port} --duration-ms 1000 --logdir gs://{BUCKET}/od "
            "--name demand --no-display",
        )
    finally:
        worker.kill()
        worker.wait()
    shown = capsys.readouterr().out
    assert f"uploaded to gs://{BUCKET}/od/plugins/profile/demand (" in shown, shown
    host = f"localhost_{port}"
    stored = objects("od/plugins/profile/demand/")
    assert set(stored) == {f"{host}.xplane.pb", _store.METADATA_FILE, _gcs.UPLOADED_FILE}
    assert json.loads(stored[_gcs.UPLOADED_FILE])["files"] == [
        _store.METADATA_FILE,
        f"{host}.xplane.pb",
    ], "the metadata claims the name first, the timeline goes last"
    local = _store.run_path(_store.local_logdir(f"gs://{BUCKET}/od"), "demand")
    assert stored[f"{host}.xplane.pb"] == (local / f"{host}.xplane.pb").read_bytes()
    assert labels_of(local / f"{host}.xplane.pb", {"gcs_worker"}) == {"gcs_worker"}


@pytest.mark.parametrize(
    ("logdir", "endpoint", "message"),
    [
        ("gs://no-such-bucket/x", None, "bucket gs://no-such-bucket does not exist: create it"),
        (f"gs://{BUCKET}/x", "dead", "cannot reach Cloud Storage at http://127.0.0.1:"),
    ],
)
def test_an_unusable_bucket_is_one_line_and_the_cell_does_not_run(
    emulator: str,
    ip: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    logdir: str,
    endpoint: str | None,
    message: str,
) -> None:
    if endpoint == "dead":
        monkeypatch.setenv(_gcs.EMULATOR_ENV, f"http://127.0.0.1:{free_port()}")
    ip.user_ns.pop("ran", None)
    result = run(ip, logdir, "ran = True")  # type: ignore[arg-type]
    shown = capsys.readouterr()
    lines = [line for line in (shown.out + shown.err).splitlines() if message in line]
    assert len(lines) == 1 and "UsageError" in lines[0], shown
    assert not result.success and "ran" not in ip.user_ns
    assert not _store.profile_dir(_store.local_logdir(logdir)).exists()


def test_no_credentials_is_one_line_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_gcs.EMULATOR_ENV, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(_store.LogdirError) as caught:
        _gcs.check(_gcs.parse("gs://some-bucket/x"))
    message = str(caught.value)
    assert message.startswith("no Google Cloud credentials found for listing gs://some-bucket/x")
    assert "auth.authenticate_user()" in message and "application-default login" in message
    assert "\n" not in message


def test_a_failed_upload_keeps_the_run_and_says_where(emulator: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "plugins" / "profile" / "kept"
    run_dir.mkdir(parents=True)
    (run_dir / "vm.xplane.pb").write_bytes(b"x")
    with pytest.raises(_gcs.UploadError) as caught:
        _gcs.upload(_gcs.parse("gs://no-such-bucket/x"), run_dir)
    message = str(caught.value)
    assert "bucket gs://no-such-bucket does not exist" in message and "\n" not in message
    assert f"the run is kept in {run_dir}" in message
    assert (run_dir / "vm.xplane.pb").read_bytes() == b"x"


def test_the_viewer_lists_and_serves_runs_other_hosts_wrote(
    emulator: str, ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    logdir = f"gs://{BUCKET}/shared"
    assert run(ip, logdir, CELL, "--name mine").error_in_exec is None  # type: ignore[arg-type]
    mirror = _store.local_logdir(logdir)
    (mine,) = _store.runs(mirror)
    host = mine.hosts[0]
    bucket = _gcs._client().bucket(BUCKET)
    # Another host's finished run; one still uploading (its timeline is there, the list of
    # its files not yet); one of another tool (a timeline, no metadata of ours).
    files = [_store.METADATA_FILE, f"{host}.xplane.pb"]
    for name in files:
        for run_name in ("theirs", "half"):
            blob = bucket.blob(f"shared/plugins/profile/{run_name}/{name}")
            blob.upload_from_filename(str(mine.path / name))
    listing = json.dumps({"files": files}).encode()
    bucket.blob(f"shared/plugins/profile/theirs/{_gcs.UPLOADED_FILE}").upload_from_string(listing)
    other = bucket.blob(f"shared/plugins/profile/other_tool/{host}.xplane.pb")
    other.upload_from_filename(str(mine.path / f"{host}.xplane.pb"))
    capsys.readouterr()
    ip.run_line_magic("xprof", f"runs {logdir}")
    shown = capsys.readouterr().out
    assert f"copied 2 run(s) from {logdir}: other_tool, theirs" in shown, shown
    assert {r.name for r in _store.runs(mirror)} == {"mine", "theirs", "other_tool"}
    assert not (mirror / "plugins" / "profile" / "half").exists()

    outcome = ensure_viewer(mirror)
    assert isinstance(outcome, (Launched, Reused)), outcome
    viewer = outcome.viewer
    assert set(fetch_json(viewer, "runs")) >= {"mine", "theirs"}
    assert fetch_json(viewer, "hosts", run="theirs", tag="overview_page") == [{"hostname": host}]
    trace = fetch_json(viewer, "data", run="theirs", tag="trace_viewer@", host=host)
    assert trace["traceEvents"]


@pytest.fixture
def preconditions(monkeypatch: pytest.MonkeyPatch) -> None:
    """What real Cloud Storage does and the emulator does not: refuse, with 412, to create
    an object that exists (``ifGenerationMatch=0``). The one fake of this file."""
    from google.api_core import exceptions as api
    from google.cloud.storage import Blob

    real = Blob.upload_from_string

    def upload(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("if_generation_match") == 0 and self.bucket.get_blob(self.name):
            raise api.PreconditionFailed("At least one of the pre-conditions did not hold.")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Blob, "upload_from_string", upload)


def _local_run(ip: Any, tmp_path: Path, name: str) -> Path:
    assert run(ip, str(tmp_path), CELL, f"--name {name}").error_in_exec is None  # type: ignore[arg-type]
    (found,) = [r for r in _store.runs(tmp_path) if r.name == name]
    return found.path


def test_two_hosts_uploading_one_name_get_two_runs(
    emulator: str, preconditions: None, ip: Any, tmp_path: Path
) -> None:
    run_dir = _local_run(ip, tmp_path, "race")
    remote = _gcs.parse(f"gs://{BUCKET}/claims")
    # The other host claimed "race" a moment earlier: its metadata is there, ours is not.
    theirs = b'{"run": "race", "host": "other-host"}'
    claim = f"claims/plugins/profile/race/{_store.METADATA_FILE}"
    _gcs._client().bucket(BUCKET).blob(claim).upload_from_string(theirs)
    uploaded = _gcs.upload(remote, run_dir)
    assert uploaded.run_dir == run_dir.with_name("race-2") and uploaded.run_dir.is_dir()
    assert not run_dir.exists(), "the local copy was renamed, not copied"
    meta = _metadata.read(uploaded.run_dir)
    assert meta is not None and meta.run == "race-2"
    assert objects("claims/plugins/profile/race/") == {_store.METADATA_FILE: theirs}
    stored = objects("claims/plugins/profile/race-2/")
    assert stored[_store.METADATA_FILE] == (uploaded.run_dir / _store.METADATA_FILE).read_bytes()
    assert (
        _gcs.UPLOADED_FILE in stored
        and len(stored) == len(list(run_dir.parent.glob("race-2/*"))) + 1
    )


def test_a_retried_write_of_the_same_bytes_is_not_a_clash_but_other_bytes_are(
    emulator: str, preconditions: None, ip: Any, tmp_path: Path
) -> None:
    run_dir = _local_run(ip, tmp_path, "again")
    remote = _gcs.parse(f"gs://{BUCKET}/retried")
    bucket = _gcs._client().bucket(BUCKET)
    prefix = "retried/plugins/profile/again/"
    # A first attempt's metadata arrived although its answer was lost: the same bytes.
    metadata = (run_dir / _store.METADATA_FILE).read_bytes()
    bucket.blob(prefix + _store.METADATA_FILE).upload_from_string(metadata)
    assert _gcs.upload(remote, run_dir).run_dir == run_dir
    (xplane,) = run_dir.glob("*.xplane.pb")
    assert objects(prefix)[xplane.name] == xplane.read_bytes()

    other = _local_run(ip, tmp_path, "clash")
    (timeline,) = other.glob("*.xplane.pb")
    bucket.blob(f"retried/plugins/profile/clash/{timeline.name}").upload_from_string(b"theirs")
    with pytest.raises(_gcs.UploadError) as caught:
        _gcs.upload(remote, other)
    message = str(caught.value)
    assert "nothing there was replaced" in message and f"the run is kept in {other}" in message
    assert objects("retried/plugins/profile/clash/")[timeline.name] == b"theirs"
    assert _gcs.UPLOADED_FILE not in objects("retried/plugins/profile/clash/")
