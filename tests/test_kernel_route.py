"""The kernel route's kernel side against a real XProf viewer: what it forwards, what it
refuses before any connection, the guard's refusals kept, replies in bounded chunks, and no
secret in anything sent to the browser. The browser side: ``test_browser_kernel_route``."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.test_viewer_server import RUN, captures, logdir, viewer, viewer_dir
from xprof_magic._viewer.process.client import Viewer, proxy_template
from xprof_magic._viewer.process.route import (
    ANSWER,
    ASK,
    CHUNK,
    Head,
    answer,
    forced_route,
    route_refusal,
    serve,
)

__all__ = ["captures", "logdir", "viewer", "viewer_dir"]

STATIC = Path(__import__("xprof").__file__).parent / "static"

REFUSED = [
    "",
    "data/plugin/profile/runs",
    "/",
    "/other",
    "/xprof_magic/health/../x",
    "/data/plugin/profile/../../etc/passwd",
    "/data/plugin/profile/%2e%2e/x",
    "/data/plugin/profile/%2F/x",
    "//evil.example/data/plugin/profile/runs",
    "/data/plugin//profile/runs",
    "/data/plugin/profile\\runs",
    "/data/plugin/profile/ runs",
    "/data/plugin/profile/http://evil.example/",
    "/data/plugin/profileX/runs",
    "/data/plugin/profile/" + "a" * 20_000,
    "/data/plugin/profile/data?run=x\r\nHost: evil.example",
    "/data/plugin/profile/data?run=a b",
]
SERVED = [
    "/data/plugin/profile/runs",
    "/data/plugin/profile/trace_viewer_index.js",
    "/data/plugin/profile/data?run=first&tag=trace_viewer%40&host=h",
    "/xprof_magic/health",
    "/xprof_magic/graph/dist/viz.js",
]


@pytest.mark.parametrize("path", REFUSED)
def test_only_the_viewers_own_routes_pass(path: str) -> None:
    assert route_refusal(path) is not None, path


@pytest.mark.parametrize("path", SERVED)
def test_the_viewers_routes_pass(path: str) -> None:
    assert route_refusal(path) is None, path


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_refused_path_reaches_no_server() -> None:
    """A refusal is said before any connection: here nothing listens, and the reply is the
    403 with its reason, not the 502 a connection attempt would give."""
    nowhere = Viewer(1, _closed_port(), "/nowhere", "s3cret", "xprof", "/dev/null", 0.0)
    parts = list(answer(nowhere, "/other?x=1"))
    assert isinstance(parts[0], Head) and parts[0].status == 403
    assert b"only the viewer's own routes" in b"".join(p for p in parts if isinstance(p, bytes))
    down = list(answer(nowhere, "/data/plugin/profile/runs"))
    assert isinstance(down[0], Head) and down[0].status == 502


def _whole(parts: list[Head | bytes]) -> tuple[Head, bytes]:
    head = parts[0]
    assert isinstance(head, Head)
    chunks = [p for p in parts[1:] if isinstance(p, bytes)]
    assert all(len(c) <= CHUNK for c in chunks)
    body = b"".join(chunks)
    if head.headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return head, body


def test_static_files_come_whole_in_chunks(viewer: Viewer) -> None:
    parts = list(answer(viewer, "/data/plugin/profile/trace_viewer_v2.wasm"))
    head, body = _whole(parts)
    assert head.status == 200
    assert body == (STATIC / "trace_viewer_v2.wasm").read_bytes()
    assert len(parts) > 2, "a 10 MB file came in one message"


def test_the_guards_refusals_hold_through_the_kernel(viewer: Viewer) -> None:
    for query in ("run=../../etc", "session_path=/etc", "host=../x&run=first&tag=x"):
        head, body = _whole(list(answer(viewer, f"/data/plugin/profile/data?{query}")))
        assert head.status == 403, (query, body)
        assert body.startswith(b"Forbidden:"), body


def test_a_runs_trace_comes_through_the_kernel(viewer: Viewer) -> None:
    hosts_head, hosts = _whole(
        list(answer(viewer, f"/data/plugin/profile/hosts?run={RUN}&tag=trace_viewer%40"))
    )
    assert hosts_head.status == 200
    host = json.loads(hosts)[0]["hostname"]
    query = f"run={RUN}&tag=trace_viewer%40&host={host}"
    head, body = _whole(list(answer(viewer, f"/data/plugin/profile/data?{query}")))
    assert head.status == 200
    assert "my_label" in {e.get("name") for e in json.loads(body)["traceEvents"]}


def test_serve_answers_in_order_and_never_sends_the_secret(viewer: Viewer) -> None:
    sent: list[tuple[dict[str, Any], list[bytes]]] = []
    serve(
        viewer,
        {"type": ASK, "id": 7, "path": "/data/plugin/profile/trace_viewer_v2.wasm"},
        lambda c, b: sent.append((c, b)),
    )
    assert [c["type"] for c, _ in sent] == [ANSWER] * len(sent)
    assert all(c["id"] == 7 for c, _ in sent)
    assert sent[0][0].get("taken") and sent[1][0]["head"]["status"] == 200
    assert sent[-1][0].get("last") and not any(c.get("last") for c, _ in sent[:-1])
    chunks = [b for _, buffers in sent for b in buffers]
    assert len(chunks) > 1 and all(len(b) <= CHUNK for b in chunks)
    text = json.dumps([c for c, _ in sent])
    assert viewer.secret not in text
    assert all(viewer.secret.encode() not in b for b in chunks)
    ignored: list[Any] = []
    serve(viewer, {"type": "other"}, lambda c, b: ignored.append(c))
    serve(viewer, "not a request", lambda c, b: ignored.append(c))
    assert ignored == []


def test_settings_still_force_a_route() -> None:
    assert forced_route({}) == "auto"
    assert forced_route({"XPROF_MAGIC_PROXY_URL": "kernel"}) == "kernel"
    assert proxy_template({"XPROF_MAGIC_PROXY_URL": "kernel"}) is None
    assert forced_route({"XPROF_MAGIC_PROXY_URL": "/user/x/proxy/%PORT%/"}) == "direct"
    assert forced_route({"TENSORBOARD_PROXY_URL": "/proxy/%PORT%/"}) == "direct"
