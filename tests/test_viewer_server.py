"""The viewer server manager against real servers, real captures and real processes.

One torch_xla subprocess makes the captures for the whole module; the servers are the real
XProf and TensorBoard apps. Every server started here is stopped in the fixtures' teardown,
which then checks that none is left.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest

from tests._kernel import free_port
from tests.conftest import missing
from xprof_magic._runs import store as _store
from xprof_magic._viewer.app import guard as _guard
from xprof_magic._viewer.app import memo as _memo
from xprof_magic._viewer.app import replies as _replies
from xprof_magic._viewer.process import client as _client
from xprof_magic._viewer.process import info as _viewer_info
from xprof_magic._viewer.process import manager as _viewer
from xprof_magic._viewer.process import os_process as _launch
from xprof_magic._viewer.process.client import Viewer, fetch_json
from xprof_magic._viewer.process.manager import (
    Failed,
    Launched,
    Restarted,
    Reused,
    ViewerOutcome,
    begin_viewer,
    ensure_viewer,
    find_viewer,
    list_viewers,
    stop_viewer,
)
from xprof_magic._viewer.process.os_process import VIEWER_DIR_ENV

HERE = Path(__file__).resolve().parent
LABEL = "my_label"
RUN = "first"


def _launched(outcome: ViewerOutcome) -> Viewer:
    assert isinstance(outcome, Launched | Restarted | Reused), outcome
    return outcome.viewer


def _get(viewer: Viewer, path: str) -> tuple[int, bytes]:
    """GET as a browser would: the fragment stays in the browser."""
    return _client.http_get(viewer.port, path.partition("#")[0], timeout=30)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _launch.pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _server_pids_using(directory: Path) -> list[int]:
    """Viewer processes whose command line names this test's info folder (Linux only)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        is_viewer = any(marker in cmdline for marker in _launch.SERVER_MARKERS)
        if is_viewer and str(directory).encode() in cmdline:
            state = (entry / "stat").read_text().rpartition(")")[2].split()[:1]
            if state != ["Z"]:
                pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def viewer_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private info folder for this module, and a check that no server outlives it."""
    directory = tmp_path_factory.mktemp("viewers")
    previous = os.environ.get(VIEWER_DIR_ENV)
    os.environ[VIEWER_DIR_ENV] = str(directory)
    try:
        yield directory
    finally:
        for viewer in list_viewers():
            stop_viewer(viewer)
        for child in list(_launch._children.values()):
            if child.poll() is None:
                child.kill()
                child.wait(5)
        if previous is None:
            os.environ.pop(VIEWER_DIR_ENV, None)
        else:
            os.environ[VIEWER_DIR_ENV] = previous
        if Path("/proc/self").exists():
            assert _server_pids_using(directory) == []


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real captures, ``first`` and ``second``, each with a ``my_label`` event."""
    out = tmp_path_factory.mktemp("captures")
    env = dict(os.environ, PJRT_DEVICE="CPU", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run(
        [sys.executable, str(HERE / "_viewer_capture.py"), str(out), RUN, "second"],
        check=True,
        env=env,
        capture_output=True,
        timeout=180,
    )
    return out


def _logdir(base: Path, captures: Path, *runs: str) -> Path:
    """A log directory holding copies of the named runs under ``plugins/profile``."""
    profile = base / "plugins" / "profile"
    profile.mkdir(parents=True)
    for run in runs:
        (profile / run).mkdir()
        for file in (captures / run).iterdir():
            (profile / run / file.name).write_bytes(file.read_bytes())
    return base


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, captures: Path) -> Path:
    return _logdir(tmp_path_factory.mktemp("logdir"), captures, RUN)


@pytest.fixture(scope="module")
def viewer(viewer_dir: Path, logdir: Path) -> Viewer:
    """One XProf viewer shared by the tests that only read from it."""
    return _launched(ensure_viewer(logdir, timeout=60))


@pytest.fixture
def fresh_logdir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


# Pure: refusals and URLs.


@pytest.mark.parametrize(
    ("path", "query", "refused"),
    [
        ("/data/plugin/profile/runs", [], False),
        ("/data/plugin/profile/run_tools", [("run", "first")], False),
        ("/data/plugin/profile/run_tools", [("run", "sub/first")], False),
        ("/data/plugin/profile/runs", [("session_path", "/LOG/plugins/profile/first")], False),
        ("/data/plugin/profile/runs", [("session_path", "/etc")], True),
        ("/data/plugin/profile/runs", [("session_path", "/LOG/../etc")], True),
        ("/data/plugin/profile/runs", [("session_path", "plugins/profile/first")], True),
        ("/data/plugin/profile/runs", [("session_path", "gs://bucket/x")], True),
        ("/data/plugin/profile/runs", [("run_path", "/")], True),
        ("/data/plugin/profile/run_tools", [("run", "../../etc/x")], True),
        ("/data/plugin/profile/run_tools", [("run", "/etc/x")], True),
        ("/data/plugin/profile/data", [("run", "first"), ("host", "../../x")], True),
        ("/data/plugin/profile/data", [("run", "first"), ("hosts", "a,b")], False),
        ("/data/plugin/profile/data", [("module_name", "a/b")], True),
        ("/data/plugin/profile/data", [("run", "fi\x00rst")], True),
        ("/data/plugin/profile/capture_profile", [("service_addr", "x:1")], True),
        ("/data/plugin/profile/capture_profile/", [], True),
    ],
)
def test_refusal(tmp_path: Path, path: str, query: list[tuple[str, str]], refused: bool) -> None:
    log = str(tmp_path)
    query = [(k, v.replace("/LOG", log)) for k, v in query]
    assert (_guard.refusal(path, query, log) is not None) == refused


def test_refusal_follows_symlinks_out_of_the_logdir(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    log = tmp_path / "log"
    (log / "plugins" / "profile").mkdir(parents=True)
    (log / "plugins" / "profile" / "link").symlink_to(outside)
    link = str(log / "plugins" / "profile" / "link")
    assert _guard.refusal("/x", [("run", "link")], str(log)) is not None
    assert _guard.refusal("/x", [("session_path", link)], str(log)) is not None


def test_paths_carry_secret_and_proxy_prefix() -> None:
    viewer = Viewer(1, 8000, "/logs", "s3cret-s3cret-s3cret", "xprof", "/log", 0.0)
    assert viewer.base_path == "/s3cret-s3cret-s3cret"
    assert "s3cret" not in repr(viewer)
    assert viewer.data_path("run_tools", run="a b") == (
        "/s3cret-s3cret-s3cret/data/plugin/profile/run_tools?run=a+b"
    )
    tool = urlsplit(viewer.tool_path("r1", "trace_viewer@", "vm", prefix="/proxy/8000"))
    assert tool.path == "/proxy/8000/s3cret-s3cret-s3cret/data/plugin/profile/trace_viewer@"
    assert parse_qs(tool.query) == {"run": ["r1"], "tag": ["trace_viewer@"], "host": ["vm"]}

    page = urlsplit(viewer.trace_viewer_path("r1", "vm", prefix="/proxy/8000"))
    assert page.path.endswith("/data/plugin/profile/trace_viewer_index.html")
    params = parse_qs(page.query)
    assert params["is_streaming"] == ["true"]
    data = urlsplit(params["trace_data_url"][0])
    assert data.path == "/proxy/8000/s3cret-s3cret-s3cret/data/plugin/profile/data"
    assert parse_qs(data.query) == {"run": ["r1"], "tag": ["trace_viewer@"], "host": ["vm"]}

    assert params["xprof_magic"] == ["inline"] and "view_start" not in params
    window = parse_qs(
        urlsplit(viewer.trace_viewer_path("r1", "vm", view_start=2.5, view_end=9)).query
    )
    assert (window["view_start"], window["view_end"]) == (["2.500"], ["9.000"])
    embedded = urlsplit(viewer.embedded_path("r1", "memory_viewer", "vm", module_name="m(1)"))
    assert embedded.path == urlsplit(viewer.tool_path("r1", "memory_viewer", "vm")).path
    assert parse_qs(embedded.query) == {
        "run": ["r1"],
        "tag": ["memory_viewer"],
        "host": ["vm"],
        "new_nav": ["true"],
        "xprof_magic": ["inline"],
        "module_name": ["m(1)"],
    }

    board = Viewer(1, 8000, "/logs", "s3cret-s3cret-s3cret", "tensorboard", "/log", 0.0)
    assert board.tool_path("r1", "overview_page").startswith("/s3cret-s3cret-s3cret/?run=r1")
    assert board.tool_path("r1", "overview_page").endswith("#profile")


# One shared XProf viewer: what it serves and what it refuses.


def test_serves_a_run(viewer: Viewer) -> None:
    assert RUN in fetch_json(viewer, "runs")
    assert "trace_viewer@" in fetch_json(viewer, "run_tools", run=RUN)
    hosts = fetch_json(viewer, "hosts", run=RUN, tag="trace_viewer@")
    host = hosts[0]["hostname"]
    trace = fetch_json(viewer, "data", run=RUN, tag="trace_viewer@", host=host)
    assert LABEL in {event.get("name") for event in trace["traceEvents"]}


def test_ui_assets_and_pages_answer_under_the_prefix(viewer: Viewer) -> None:
    status, index = _get(viewer, viewer.ui_path())
    assert status == 200
    assert b"/data/plugin/profile" in index
    for asset in ("styles.css", "zone.js", "runtime.js", "bundle.js"):
        assert asset.encode() in index
        assert _get(viewer, viewer.ui_path() + asset)[0] == 200, asset
    assert _get(viewer, viewer.tool_path(RUN, "trace_viewer@", "vm"))[0] == 200
    status, page = _get(viewer, viewer.trace_viewer_path(RUN, "vm"))
    assert status == 200
    assert b"trace_viewer_index.js" in page
    assert _get(viewer, viewer.ui_path() + "trace_viewer_index.js")[0] == 200
    for path in (viewer.base_path, viewer.base_path + "/"):
        response = _raw_get(viewer, path)
        assert response.status == 302
        location = urljoin(f"http://h/proxy/1{path}", response.getheader("Location") or "")
        assert location == f"http://h/proxy/1{viewer.ui_path()}"


def test_xprofs_files_are_kept_by_the_browser_and_its_replies_gzipped_fast(
    viewer: Viewer,
) -> None:
    """Each frame under a cell fetched XProf's 3 MB trace viewer script again, gzipped at
    level 9 each time; now the browser keeps it, and XProf's replies come at level 1."""

    def get(path: str) -> tuple[dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
        connection.request("GET", path, headers={"Accept-Encoding": "gzip"})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        assert response.status == 200, path
        return {k.lower(): v for k, v in response.getheaders()}, body

    for asset in ("trace_viewer_index.js", "bundle.js", "styles.css"):
        headers, _ = get(viewer.ui_path() + asset)
        assert headers.get("cache-control") == _replies.STATIC_CACHE, (asset, headers)
    for page in (viewer.ui_path(), viewer.trace_viewer_path(RUN, "vm")):
        headers, _ = get(page)
        assert "max-age" not in headers.get("cache-control", ""), (page, headers)
    headers, body = get(viewer.data_path("run_tools", run=RUN))
    assert headers.get("content-encoding") == "gzip" and "max-age" not in str(headers)
    # The gzip header's XFL byte: 2 for level 9, 4 for level 1 (RFC 1952).
    assert body[:2] == b"\x1f\x8b" and body[8] == 4, body[:10]
    assert "trace_viewer@" in json.loads(gzip.decompress(body))


def test_a_runs_data_is_made_once_for_identical_requests(viewer: Viewer) -> None:
    """Two widgets of one run ask the same questions at once, and ``%xprof view`` asks again
    for a run shown above: XProf makes each reply once (its log has one line a reply)."""
    hosts = fetch_json(viewer, "hosts", run=RUN, tag="op_profile")
    log = Path(viewer.log_path)

    def made(tag: str) -> int:
        lines = log.read_text().splitlines()
        return sum('"httpRequest"' in line and f"tag={tag}&" in line for line in lines)

    for tag in ("op_profile", "overview_page"):
        params = {"run": RUN, "tag": tag, "host": hosts[0]["hostname"]}
        before = made(tag)
        with ThreadPoolExecutor(3) as pool:
            asks = [pool.submit(fetch_json, viewer, "data", **params) for _ in range(3)]
            replies = [ask.result() for ask in asks]
        again = fetch_json(viewer, "data", **params, xprof_magic_background="1")
        assert replies[0] and all(reply == replies[0] for reply in [*replies, again]), tag
        assert made(tag) == before + 1, (tag, made(tag) - before)


def test_a_kept_reply_is_for_the_same_capture_only(tmp_path: Path) -> None:
    """A run removed and captured again under its name is asked for again; a failed reply,
    one for a folder named by path and a page (the graph viewer's, which a renderer's
    install changes) are never kept; a preview's is, as the run's own."""
    run_dir = _store.run_path(tmp_path, "run")
    run_dir.mkdir(parents=True)
    (run_dir / "vm.xplane.pb").write_bytes(b"one")
    calls: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        calls.append(environ["QUERY_STRING"])
        failed = "fail" in environ["QUERY_STRING"]
        kind = "text/html" if "graph" in environ["QUERY_STRING"] else "application/json"
        start_response("500 Error" if failed else "200 OK", [("Content-Type", kind)])
        return [str(len(calls)).encode()]

    kept = _memo.remembered(app, str(tmp_path))

    def get(query: str) -> bytes:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": _guard.PROFILE_ROUTE + "/data",
            "QUERY_STRING": query,
        }
        return b"".join(kept(environ, lambda *args: None))

    assert get("run=run&tag=op_profile") == get("tag=op_profile&run=run") == b"1"
    (run_dir / "vm.xplane.pb").unlink()
    (run_dir / "vm.xplane.pb").write_bytes(b"two")
    assert get("run=run&tag=op_profile") == b"2"
    assert get("run=run&tag=fail") == b"3" and get("run=run&tag=fail") == b"4"
    assert get("run=run&session_path=/x") == b"5" and get("run=run&session_path=/x") == b"6"
    assert get("run=gone&tag=op_profile") == b"7" and get("run=gone&tag=op_profile") == b"8"
    assert get("run=run&tag=graph_viewer") == b"9" and get("run=run&tag=graph_viewer") == b"10"
    assert get("run=run&xprof_magic_preview=1") == get("run=run&xprof_magic_preview=1") == b"11"


def _raw_get(viewer: Viewer, path: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=10)
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_refuses_requests_without_the_secret(viewer: Viewer) -> None:
    assert _get(viewer, "/data/plugin/profile/runs")[0] == 404
    assert _get(viewer, "/")[0] == 404
    wrong = "/" + "x" * len(viewer.secret) + "/data/plugin/profile/runs"
    assert _get(viewer, wrong)[0] == 404
    assert _get(viewer, viewer.secret + "/data/plugin/profile/runs")[0] in (400, 404)


def test_origin_form_collapses_slash_runs_in_the_path_only() -> None:
    assert _guard.origin_form(b"//s//data/plugin//x?u=a//b") == b"/s/data/plugin/x?u=a//b"
    assert _guard.origin_form(b"/s/data") == b"/s/data"
    assert _guard.origin_form(b"s//data") == b"s//data"
    assert _guard.origin_form(b"http://h//s") == b"http://h//s"


def test_doubled_slashes_around_the_prefix_are_served_under_the_guard(viewer: Viewer) -> None:
    """XProf's graph viewer asks for origin + '/' + prefix + '/' + route."""
    doubled = f"//{viewer.secret}//data/plugin/profile/"
    response = _raw_get(viewer, doubled + "runs")
    assert response.status == 200
    connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    connection.request("GET", doubled + "hosts?run=" + RUN + "&tag=graph_viewer")
    hosts = connection.getresponse()
    assert hosts.status == 200
    body = hosts.read()
    if hosts.getheader("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    assert json.loads(body)
    connection.close()
    other = "//" + "x" * len(viewer.secret) + "//data/plugin/profile/runs"
    assert _raw_get(viewer, other).status == 404
    assert _raw_get(viewer, "//data/plugin/profile/runs").status == 404
    assert _raw_get(viewer, f"//{viewer.secret}//data/plugin/profile/runs?run_path=/").status == 403


def test_label_threads_first_rewrites_or_adds_the_sort_index() -> None:
    def name(tid: int, thread: str) -> str:
        return f'{{"args":{{"name":"{thread}"}},"name":"thread_name","ph":"M","pid":7,"tid":{tid}}}'

    def sort(tid: int, index: int) -> str:
        return (
            f'{{"args":{{"sort_index":{index}}},"name":"thread_sort_index","ph":"M",'
            f'"pid":7,"tid":{tid}}}'
        )

    def process(pid: int, named: str) -> str:
        return f'{{"args":{{"name":"{named}"}},"name":"process_name","ph":"M","pid":{pid}}}'

    sent = "[" + ",".join([name(1, "tf_x"), sort(1, 1), name(9, "python"), sort(9, 9)]) + "]"
    got = json.loads(_replies.label_threads_first(sent.encode()))
    indexes = {e["tid"]: e["args"]["sort_index"] for e in got if e["name"] == "thread_sort_index"}
    assert indexes == {1: 1, 9: _replies.TOP_SORT_INDEX}
    # The kernel's thread as its program named it (python3), on the host; a device's lines
    # (named, not tf_*) keep their order.
    host = [process(7, "vm /host:CPU"), name(1, "tf_XLAPjRtCpuClient/1"), sort(1, 1)]
    host += [name(9, "python3"), sort(9, 9)]
    device = [process(8, "/device:TPU:0"), name(2, "XLA Ops").replace('"pid":7', '"pid":8')]
    got = json.loads(_replies.label_threads_first(("[" + ",".join(host + device) + "]").encode()))
    indexes = {e["tid"]: e["args"]["sort_index"] for e in got if e["name"] == "thread_sort_index"}
    assert indexes == {1: 1, 9: _replies.TOP_SORT_INDEX}
    without = json.loads(
        _replies.label_threads_first(f"[{name(1, 'tf_a')},{name(9, 'python')}]".encode())
    )
    assert [e["tid"] for e in without if e["name"] == "thread_sort_index"] == [9]
    assert _replies.label_threads_first(b'{"traceEvents":[]}') == b'{"traceEvents":[]}'


def test_the_trace_reply_puts_the_label_thread_first(viewer: Viewer) -> None:
    """The ``python`` thread, which holds the labels, sorts above the runtime's threads."""
    hosts = fetch_json(viewer, "hosts", run=RUN, tag="trace_viewer@")
    trace = fetch_json(viewer, "data", run=RUN, tag="trace_viewer@", host=hosts[0]["hostname"])
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    order = {
        e["tid"]: e["args"]["sort_index"] for e in events if e.get("name") == "thread_sort_index"
    }
    python = [tid for tid, thread in names.items() if thread == "python"]
    assert python and len(names) > 1
    assert order[python[0]] == _replies.TOP_SORT_INDEX
    assert all(order[python[0]] < order.get(tid, 0) for tid in names if tid != python[0])
    assert LABEL in {e.get("name") for e in events if e.get("tid") == python[0]}


def test_xprof_pages_forget_a_saved_trace_viewer_v2_without_webgpu(viewer: Viewer) -> None:
    script = _replies.FORGET_FAILED_V2
    for path in (viewer.ui_path(), viewer.tool_path(RUN, "trace_viewer@", "vm")):
        status, page = _get(viewer, path)
        assert status == 200 and page.count(script) == 1, path
        assert page.index(script) < page.index(b"<app></app>")
    status, styles = _get(viewer, viewer.ui_path() + "styles.css")
    assert status == 200 and script not in styles
    assert _replies.forget_failed_v2(b"<head></head>{}") == b"<head></head>{}"
    assert b"requestAdapter" in script and b"use_trace_viewer_v2" in script


def test_the_embedded_pages_come_without_xprofs_menu(viewer: Viewer) -> None:
    """The pages the widget embeds (their URL says ``xprof_magic=inline``) get the style that
    hides XProf's toolbar and menu and the watch on its loading indicators; the same pages
    without it, as "open in new tab" asks, come as XProf sends them."""
    from xprof_magic._viewer.app import inline

    embedded = _get(viewer, viewer.embedded_path(RUN, "overview_page", "vm"))[1]
    full = _get(viewer, viewer.tool_path(RUN, "overview_page", "vm"))[1]
    assert embedded.count(inline.PAGE_STYLE) == embedded.count(inline.WATCH_BUSY) == 1
    assert embedded.count(_replies.FORGET_FAILED_V2) == 1
    assert embedded.index(inline.PAGE_STYLE) < embedded.index(b"<app></app>")
    assert inline.PAGE_STYLE not in full and inline.WATCH_BUSY not in full
    assert embedded.replace(inline.OWN_STORAGE + inline.PAGE_STYLE + inline.WATCH_BUSY, b"") == full
    # The timeline's page itself once the run is prepared (before, the page that waits).
    _get(viewer, viewer.data_path("data", run=RUN, tag="trace_viewer@", host="vm"))
    timeline = _get(viewer, viewer.trace_viewer_path(RUN, "vm"))[1]
    plain = _get(viewer, viewer.trace_viewer_path(RUN, "vm").replace(inline.INLINE_QUERY, ""))[1]
    added = inline.OWN_STORAGE + inline.TRACE_STYLE + inline.TRACE_PREFETCH + inline.TRACE_SETTLE
    added += inline.WATCH_BUSY
    assert embedded.count(inline.OWN_STORAGE) == timeline.count(inline.OWN_STORAGE) == 1
    assert timeline.count(inline.TRACE_SETTLE) == timeline.count(inline.WATCH_BUSY) == 1
    assert timeline.count(inline.TRACE_PREFETCH) == 1
    assert timeline.replace(added, b"") == plain
    assert b"trace_viewer_index.js" in plain and inline.WATCH_BUSY not in plain
    assert inline.embedded("a=1&xprof_magic=inline") and not inline.embedded("xprof_magic=no")


def _graph_page(viewer: Viewer, prefix: str = "") -> tuple[str, bytes]:
    """XProf's graph page of the run's first program, at its root op, as "Search Graph" asks."""
    from xprof_magic._viewer import survey

    program = survey.modules(viewer, RUN)[0]
    node = survey.entry_root(viewer, RUN, program)
    assert node, program
    path = viewer.data_path(
        "data",
        prefix=prefix,
        run=RUN,
        tag="graph_viewer",
        module_name=program,
        node_name=node,
        type="graph",
        format="html",
        graph_width=3,
    )
    status, page = _get(viewer, path)
    assert status == 200, (status, page[:300])
    return path, page


def test_the_graph_page_loads_its_renderer_from_this_viewer(viewer: Viewer) -> None:
    """The graph draws offline: graphviz (WebAssembly) and svg-pan-zoom come from the
    viewer's own route, each the pinned file, at a URL relative to the page that stays right
    under the doubled slashes XProf's front end sends and under a proxy's prefix."""
    from xprof_magic._viewer.app import graph

    if graph.local_assets(graph.assets_dir()) is None:
        missing(f"the graph viewer's renderer is not in {graph.assets_dir()} (make install)")
    path, page = _graph_page(viewer)
    assert b"gstatic" not in page and b"digraph" in page
    sources = re.findall(rb'<script src="([^"]+)"', page)
    assert len(sources) == 2, sources
    pinned = {a.name: a for a in graph.ASSETS}
    doubled = "//" + path.lstrip("/").replace("/", "//", 1)
    for base in (path, doubled):
        for source in sources:
            url = urljoin("http://h" + base, source.decode())
            status, body = _get(viewer, urlsplit(url).path)
            name = url.rsplit("/", 1)[1]
            assert status == 200, url
            assert hashlib.sha256(body).hexdigest() == pinned[name].sha256, url
    wasm = _raw_get(viewer, f"/{viewer.secret}{graph.GRAPH_ROUTE}/graphvizlib.wasm")
    assert wasm.getheader("Content-Type") == "application/wasm"
    for name in ("nothing.js", "../graph.py", "", "index.min.js/x"):
        assert _get(viewer, f"/{viewer.secret}{graph.GRAPH_ROUTE}/{name}")[0] == 404, name
    assert _get(viewer, f"/wrong{graph.GRAPH_ROUTE}/index.min.js")[0] == 404
    assert page.count(b"xprof-magic-graph-notice") == 1


def test_without_the_renderer_the_graph_page_keeps_xprofs_and_says_so(
    viewer_dir: Path, captures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A viewer whose renderer folder holds a wrong file: XProf's own internet copies stay, the
    file is not served, and the page says in one line why it is blank offline."""
    from xprof_magic._viewer.app import graph

    folder = tmp_path / "renderer"
    folder.mkdir()
    for item in graph.ASSETS:
        (folder / item.name).write_bytes(b"not " + item.name.encode())
    monkeypatch.setenv(graph.ASSETS_ENV, str(folder))
    other = _launched(ensure_viewer(_logdir(tmp_path / "logs", captures, RUN), timeout=60))
    try:
        _, page = _graph_page(other)
        assert b"www.gstatic.com/external_hosted/hpcc_js_wasm/index.min.js" in page
        assert b"no internet here" in page and page.count(b"xprof-magic-graph-notice") == 1
        route = f"/{other.secret}{graph.GRAPH_ROUTE}/index.min.js"
        assert _get(other, route)[0] == 404
    finally:
        stop_viewer(other)
    assert graph.graph_page(b"<html>other</html>") == b"<html>other</html>"


def test_the_renderer_command_installs_the_pinned_files_or_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m xprof_magic graph-renderer FOLDER``: npm packs the pinned versions and
    only files with the pinned SHA-256 land; without npm, one line says what to do."""
    import shutil

    from xprof_magic.__main__ import main
    from xprof_magic._viewer.app import graph

    if shutil.which("npm") is None:
        missing("npm is not on PATH (Debian's nodejs package has it)")
    folder = tmp_path / "renderer"
    assert main(["graph-renderer", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(a.name for a in graph.ASSETS)
    assert graph.local_assets(folder) is not None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["graph-renderer", str(tmp_path / "other")]) == 1
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert "npm is not on PATH" in said and not (tmp_path / "other").exists()


def test_refuses_session_path_outside_the_logdir(viewer: Viewer, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "vm.xplane.pb").write_bytes(b"")
    for route, params in [
        ("runs", {"session_path": str(outside)}),
        ("run_tools", {"run": "elsewhere", "session_path": str(outside)}),
        ("run_tools", {"run": "x", "run_path": "/"}),
        ("run_tools", {"run": "../../../etc/x"}),
        ("capture_profile", {"service_addr": "192.0.2.1:1"}),
    ]:
        status, body = _get(viewer, viewer.data_path(route, **params))
        assert status == 403, (route, params, body)
    inside = Path(viewer.logdir) / "plugins" / "profile" / RUN
    assert fetch_json(viewer, "runs", session_path=str(inside)) == [RUN]


def test_listens_on_loopback_only(viewer: Viewer) -> None:
    addresses = _listening_addresses(viewer.pid)
    assert addresses == {("127.0.0.1", viewer.port)}


def _listening_addresses(pid: int) -> set[tuple[str, int]]:
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return _listening_from_proc(pid)
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def _listening_from_proc(pid: int) -> set[tuple[str, int]]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:
                continue
            raw, port = fields[1].split(":")
            packed = bytes.fromhex(raw)
            if family == socket.AF_INET:
                packed = packed[::-1]
            else:
                packed = b"".join(packed[i : i + 4][::-1] for i in range(0, 16, 4))
            found.add((socket.inet_ntop(family, packed), int(port, 16)))
    return found


def test_logs_go_to_the_log_file(viewer: Viewer, capfd: pytest.CaptureFixture[str]) -> None:
    fetch_json(viewer, "runs")
    out, err = capfd.readouterr()
    assert "httpRequest" not in out + err
    log = Path(viewer.log_path)
    assert oct(log.stat().st_mode & 0o777) == oct(0o600)
    assert "httpRequest" in log.read_text()


def test_info_file_is_private(viewer: Viewer, viewer_dir: Path) -> None:
    info = Path(_viewer_info.info_path(str(viewer_dir), viewer.pid))
    assert info.stat().st_mode & 0o777 == 0o600
    assert viewer_dir.stat().st_mode & 0o777 == 0o700
    record = json.loads(info.read_text())
    assert record["secret"] == viewer.secret
    assert record["format"] == _viewer_info.INFO_FORMAT == 2


def test_a_new_kernel_finds_and_reuses_the_viewer(viewer: Viewer, logdir: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json
        from xprof_magic._viewer import ensure_viewer, fetch_json, find_viewer
        RUN = {RUN!r}
        found = find_viewer({str(logdir)!r})
        outcome = ensure_viewer({str(logdir)!r})
        print(json.dumps([found.pid, found.port, type(outcome).__name__,
                          RUN in fetch_json(found, "runs")]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(result.stdout) == [viewer.pid, viewer.port, "Reused", True]


def test_a_viewer_outlives_the_kernel_that_started_it(viewer_dir: Path, fresh_logdir: Path) -> None:
    script = textwrap.dedent(
        f"""
        from xprof_magic._viewer import ensure_viewer
        print(ensure_viewer({str(fresh_logdir)!r}).viewer.pid)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    pid = int(result.stdout)
    assert pid not in _launch._children
    found = find_viewer(fresh_logdir)
    assert found is not None
    assert found.pid == pid
    assert stop_viewer(found) is True
    assert _wait_gone(pid, 5)
    assert find_viewer(fresh_logdir) is None


def test_the_secret_is_not_on_the_command_line(viewer: Viewer) -> None:
    cmdline = Path(f"/proc/{viewer.pid}/cmdline")
    if not cmdline.exists():
        missing("needs /proc (Linux)")
    assert viewer.secret.encode() not in cmdline.read_bytes()


def test_a_new_run_is_served_at_once(viewer: Viewer, captures: Path) -> None:
    """The store moves a finished run into place with one rename; no reload is needed."""
    staged = Path(viewer.logdir) / "staged-second"
    staged.mkdir()
    for file in (captures / "second").iterdir():
        (staged / file.name).write_bytes(file.read_bytes())
    os.rename(staged, Path(viewer.logdir) / "plugins" / "profile" / "second")
    assert "trace_viewer@" in fetch_json(viewer, "run_tools", run="second")
    trace = fetch_json(viewer, "data", run="second", tag="trace_viewer@", host="vm")
    assert LABEL in {event.get("name") for event in trace["traceEvents"]}


# Lifecycle: each test has its own log directory and servers.


def test_launch_reuse_stop(viewer_dir: Path, fresh_logdir: Path) -> None:
    start = begin_viewer(fresh_logdir, idle_timeout=120)
    assert start.pid is not None
    first = start.wait(60)
    assert isinstance(first, Launched), first
    assert first.viewer.pid == start.pid
    assert first.viewer.logdir == str(fresh_logdir.resolve())
    assert start.wait(1) is first

    again = ensure_viewer(fresh_logdir)
    assert isinstance(again, Reused), again
    assert again.viewer == first.viewer
    assert f"pid {first.viewer.pid}" in again.message
    assert find_viewer(fresh_logdir) == first.viewer

    assert stop_viewer(first.viewer) is True
    assert _wait_gone(first.viewer.pid, 5)
    assert find_viewer(fresh_logdir) is None
    assert not Path(_viewer_info.info_path(str(viewer_dir), first.viewer.pid)).exists()
    assert stop_viewer(first.viewer) is False


def test_restarts_after_the_server_is_killed(viewer_dir: Path, fresh_logdir: Path) -> None:
    old = _launched(ensure_viewer(fresh_logdir))
    os.kill(old.pid, signal.SIGKILL)
    assert _wait_gone(old.pid, 5)
    assert find_viewer(fresh_logdir) is None

    old = _launched(ensure_viewer(fresh_logdir))
    os.kill(old.pid, signal.SIGKILL)
    assert _wait_gone(old.pid, 5)
    outcome = ensure_viewer(fresh_logdir)
    assert isinstance(outcome, Restarted), outcome
    assert f"pid {old.pid}" in outcome.reason
    assert outcome.viewer.pid != old.pid
    assert fetch_json(outcome.viewer, "runs") == []
    stop_viewer(outcome.viewer)


def test_given_port(viewer_dir: Path, fresh_logdir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    viewer = _launched(ensure_viewer(fresh_logdir, port=port))
    assert viewer.port == port
    assert _get(viewer, viewer.data_path("runs"))[0] == 200
    stop_viewer(viewer)


def test_busy_given_port_fails_naming_the_port(viewer_dir: Path, fresh_logdir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        outcome = ensure_viewer(fresh_logdir, port=port)
        assert isinstance(outcome, Failed), outcome
        assert f"Port {port}" in outcome.message
        assert find_viewer(fresh_logdir) is None


def test_port_taken_during_startup_fails_naming_the_port(
    viewer_dir: Path, fresh_logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port can be taken between the kernel's check and the server's bind."""
    monkeypatch.setattr(_viewer, "port_free", lambda port: True)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        outcome = ensure_viewer(fresh_logdir, port=port)
    assert isinstance(outcome, Failed), outcome
    assert f"Port {port}" in outcome.message


def test_exits_after_idle_timeout(viewer_dir: Path, fresh_logdir: Path) -> None:
    viewer = _launched(ensure_viewer(fresh_logdir, idle_timeout=1.0))
    assert _wait_gone(viewer.pid, 10)
    assert not Path(_viewer_info.info_path(str(viewer_dir), viewer.pid)).exists()
    assert "no request for 1 s" in Path(viewer.log_path).read_text()


def test_server_that_dies_at_startup_fails_with_its_log(
    viewer_dir: Path, fresh_logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = tmp_path / "stub_server.py"
    stub.write_text("import sys\nprint('stub: cannot start, disk on fire', file=sys.stderr)\n")
    monkeypatch.setattr(_launch, "_SERVER_SCRIPT", str(stub))
    outcome = ensure_viewer(fresh_logdir)
    assert isinstance(outcome, Failed), outcome
    assert "disk on fire" in outcome.message
    assert outcome.log_path is not None


def test_server_that_never_answers_times_out(
    viewer_dir: Path, fresh_logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = tmp_path / "stub_server.py"
    stub.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(_launch, "_SERVER_SCRIPT", str(stub))
    start = begin_viewer(fresh_logdir)
    outcome = start.wait(0.3)
    assert isinstance(outcome, Failed), outcome
    assert f"pid {start.pid}" in outcome.message
    assert start.poll() is None
    assert begin_viewer(fresh_logdir) is start
    assert start.pid is not None
    os.kill(start.pid, signal.SIGKILL)
    assert _wait_gone(start.pid, 5)


def test_tensorboard_kind(viewer_dir: Path, logdir: Path) -> None:
    outcome = ensure_viewer(logdir, kind="tensorboard", timeout=90)
    board = _launched(outcome)
    assert isinstance(outcome, Launched)
    assert board.kind == "tensorboard"
    assert RUN in fetch_json(board, "runs")
    assert "trace_viewer@" in fetch_json(board, "run_tools", run=RUN)
    assert _get(board, board.base_path + "/")[0] == 200
    assert _get(board, board.tool_path(RUN, "trace_viewer@", "vm"))[0] == 200
    assert _get(board, board.trace_viewer_path(RUN, "vm"))[0] == 200
    assert _get(board, "/data/plugin/profile/runs")[0] == 404
    status, _ = _get(board, board.data_path("runs", session_path="/"))
    assert status == 403
    assert _listening_addresses(board.pid) == {("127.0.0.1", board.port)}
    assert find_viewer(logdir, kind="tensorboard") == board
    assert stop_viewer(board)


# Viewers started by the earlier layout (``xprof_magic/_viewer_server.py``, info files without
# "format"), and info files of a newer format.

# What the earlier layout's server answers that the manager relies on: its health route under
# the secret. Its file name puts ``_viewer_server`` on the command line, as the old one did.
OLD_SERVER = """
import http.server, json, os, sys
secret, logdir = sys.argv[1], sys.argv[2]

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/" + secret + "/xprof_magic/health":
            self.send_error(404)
            return
        body = json.dumps({"pid": os.getpid(), "logdir": logdir}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Health)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
OLD_COMMAND = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"


def _old_record(
    viewer_dir: Path, pid: int, port: int, logdir: Path, secret: str, **extra: object
) -> Path:
    """An info file as the earlier layout wrote it: ``"version": 1``, no ``"format"``."""
    path = Path(_viewer_info.info_path(str(viewer_dir), pid))
    info = {
        "version": 1,
        "pid": pid,
        "port": port,
        "logdir": str(logdir.resolve()),
        "secret": secret,
        "kind": "xprof",
        "log_path": str(viewer_dir / "old.log"),
        "started": time.time(),
        "idle_timeout": 3600.0,
        **extra,
    }
    path.write_text(json.dumps(info))
    return path


@pytest.fixture
def old_server(tmp_path: Path, fresh_logdir: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A live process started the way the earlier layout started its server."""
    script = tmp_path / "xprof_magic" / "_viewer_server.py"
    script.parent.mkdir()
    script.write_text(OLD_SERVER)
    secret = "old-layout-secret-0123456789"
    process = subprocess.Popen(
        [sys.executable, "-c", OLD_COMMAND, str(script), secret, str(fresh_logdir.resolve())],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(5)


def test_a_viewer_of_the_earlier_layout_is_found_reused_and_stopped(
    viewer_dir: Path, fresh_logdir: Path, old_server: tuple[subprocess.Popen[str], int]
) -> None:
    process, port = old_server
    record = _old_record(
        viewer_dir, process.pid, port, fresh_logdir, "old-layout-secret-0123456789"
    )
    assert b"_viewer_server" in Path(f"/proc/{process.pid}/cmdline").read_bytes()

    assert process.pid in [v.pid for v in list_viewers()]
    found = find_viewer(fresh_logdir)
    assert found is not None and (found.pid, found.port) == (process.pid, port)
    reused = ensure_viewer(fresh_logdir)
    assert isinstance(reused, Reused) and reused.viewer == found

    assert stop_viewer(found) is True
    assert process.wait(5) == -signal.SIGTERM
    assert not record.exists()
    assert find_viewer(fresh_logdir) is None


def test_an_old_record_of_an_unrelated_process_never_signals_it(
    viewer_dir: Path, fresh_logdir: Path
) -> None:
    """The pid was recycled: the process lives, but its command line is not a viewer's."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        record = _old_record(viewer_dir, other.pid, free_port(), fresh_logdir, "x" * 20)
        stale = _viewer_info.read_info(record)
        assert stale is not None and stale.pid == other.pid
        assert stop_viewer(stale) is False
        assert other.poll() is None
        assert not record.exists()

        record = _old_record(viewer_dir, other.pid, free_port(), fresh_logdir, "x" * 20)
        assert other.pid not in [v.pid for v in list_viewers()]
        assert find_viewer(fresh_logdir) is None
        assert other.poll() is None
        assert not record.exists()
    finally:
        other.kill()
        other.wait(5)


def test_a_record_of_a_newer_format_is_left_alone(
    viewer_dir: Path, fresh_logdir: Path, old_server: tuple[subprocess.Popen[str], int]
) -> None:
    process, port = old_server
    secret = "old-layout-secret-0123456789"
    record = _old_record(viewer_dir, process.pid, port, fresh_logdir, secret, format=99)
    try:
        assert process.pid not in [v.pid for v in list_viewers()]
        assert find_viewer(fresh_logdir) is None
        assert record.exists()
        assert process.poll() is None
    finally:
        record.unlink()


def _kernel(logdir: Path, grace_s: float) -> subprocess.Popen[str]:
    """A stand-in for a kernel: gets the viewer, prints its pid and how, lives until stdin
    closes."""
    script = textwrap.dedent(
        f"""
        import sys
        from xprof_magic._viewer.process import manager
        outcome = manager.ensure_viewer({str(logdir)!r}, grace_s={grace_s!r})
        print(outcome.viewer.pid, type(outcome).__name__, flush=True)
        sys.stdin.read()
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _viewer_of(kernel: subprocess.Popen[str]) -> tuple[int, str]:
    assert kernel.stdout is not None
    pid, how = kernel.stdout.readline().split()
    return int(pid), how


def _end(kernel: subprocess.Popen[str]) -> None:
    assert kernel.stdin is not None
    kernel.stdin.close()
    kernel.wait(30)


@pytest.mark.slow
def test_the_viewer_exits_a_grace_period_after_its_last_kernel(
    viewer_dir: Path, fresh_logdir: Path
) -> None:
    first = _kernel(fresh_logdir, grace_s=3.0)
    pid, how = _viewer_of(first)
    assert how == "Launched"
    clients = Path(_viewer_info.clients_path(str(viewer_dir), pid))
    assert [p.name for p in clients.iterdir()] == [str(first.pid)]
    found = find_viewer(fresh_logdir)
    assert found is not None and found.pid == pid
    _end(first)
    # A kernel restarted within the grace period reuses the viewer and registers with it.
    second = _kernel(fresh_logdir, grace_s=3.0)
    try:
        assert _viewer_of(second) == (pid, "Reused")
        assert str(second.pid) in [p.name for p in clients.iterdir()]
        # While that kernel lives, the viewer stays, well past the grace period.
        assert not _wait_gone(pid, 8)
    finally:
        _end(second)
    assert _wait_gone(pid, 30)
    assert find_viewer(fresh_logdir) is None
    assert not Path(_viewer_info.info_path(str(viewer_dir), pid)).exists()
    assert not clients.exists()
    log = Path(found.log_path).read_text()
    assert "no kernel using it, and no request, for 3 s; exiting" in log


@pytest.mark.slow
def test_a_request_keeps_the_viewer_past_its_kernels(viewer_dir: Path, fresh_logdir: Path) -> None:
    kernel = _kernel(fresh_logdir, grace_s=2.0)
    pid, _ = _viewer_of(kernel)
    _end(kernel)
    found = find_viewer(fresh_logdir)
    assert found is not None and found.pid == pid
    for _ in range(12):  # someone still browsing the viewer, a request every half second
        assert _client.answers(found)
        time.sleep(0.5)
    assert _launch.pid_alive(pid)
    assert _wait_gone(pid, 30)
