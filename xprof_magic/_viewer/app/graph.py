"""The graph viewer's renderer, served from this machine, so that a graph draws offline.

XProf's graph viewer answers "Search Graph" with an HTML page of its own (the C++
converter's ``WrapDotInHtml``) that lays the graph out in the browser with graphviz compiled
to WebAssembly (``@hpcc-js/wasm``) and pans it with ``svg-pan-zoom``, both loaded from
``www.gstatic.com``. Without internet (here, a firewalled TPU VM) the page stays empty.

Where the two libraries are on this machine (:func:`assets_dir`: ``XPROF_MAGIC_GRAPH_ASSETS``,
else ``<sys.prefix>/share/xprof_magic/graph-viewer``, which ``make install`` fills from the
npm registry), the viewer serves them below its secret prefix (:data:`GRAPH_ROUTE`) and
points the page at them (:func:`graph_page`). Each file is served only if its SHA-256 is the
pinned one (:data:`ASSETS`), so a wrong version left in the folder is not loaded. Either way
the page says in one line when its renderer did not load, instead of staying blank, inside
the frame however narrow (XProf's graph container is 100% wide plus its padding, so its
right edge, and the end of that line, fell outside the frame: it is sized with its padding).

Standard library only: run in the viewer's process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ASSETS",
    "ASSETS_ENV",
    "GRAPH_ROUTE",
    "Asset",
    "asset",
    "assets_dir",
    "graph_page",
    "install",
    "local_assets",
]

GRAPH_ROUTE = "/xprof_magic/graph/dist"
"""Below the secret prefix. ``dist``, because @hpcc-js/wasm looks for its ``.wasm`` in
``<its script's folder>/../dist``."""
ASSETS_ENV = "XPROF_MAGIC_GRAPH_ASSETS"


@dataclass(frozen=True)
class Asset:
    """One file of the renderer: its name here, where it is in its npm package, its type."""

    name: str
    package: str
    path: str
    content_type: str
    sha256: str


ASSETS = (
    Asset(
        "index.min.js",
        "@hpcc-js/wasm@1.20.1",
        "dist/index.min.js",
        "text/javascript; charset=utf-8",
        "99dcf9250df252a3be23483785c6c95d0c10963b5b83f5f6d4282b151e9634e3",
    ),
    Asset(
        "graphvizlib.wasm",
        "@hpcc-js/wasm@1.20.1",
        "dist/graphvizlib.wasm",
        "application/wasm",
        "791124bccad50f6f0978ab6301ae97e7596653514fd9e2866fe8458bdff02649",
    ),
    Asset(
        "svg-pan-zoom.min.js",
        "svg-pan-zoom@3.6.2",
        "dist/svg-pan-zoom.min.js",
        "text/javascript; charset=utf-8",
        "9c8fc41b3359e699990766dd7a943595d234a80c880a90dfc14b920a273b99d8",
    ),
)
"""The versions XProf's page works with (it calls ``window["@hpcc-js/wasm"].graphviz.layout``,
the 1.x interface, and ``svgPanZoom``); Apache-2.0 and BSD-2-Clause."""

_HPCC = re.compile(
    rb'<script\s+src="https://www\.gstatic\.com/external_hosted/hpcc_js_wasm/index\.min\.js"'
    rb"[^>]*>\s*</script>"
)
_PAN_ZOOM = re.compile(
    rb'<script\s+src="https://www\.gstatic\.com/external_hosted/svg_pan_zoom/svg-pan-zoom\.js"'
    rb"[^>]*>\s*</script>"
)
# The page is XProf's data route (<prefix>/data/plugin/profile/data): three folders up is
# the prefix, whatever proxy path stands before it.
_UP = b"../../.." + GRAPH_ROUTE.encode()
_NOTICE = (
    b"<style>#graph-container{box-sizing:border-box}</style>"
    b"<script>(function(){var shown=false;function say(text){if(shown)return;shown=true;"
    b"var box=document.getElementById('graph-container')||document.body;"
    b"var line=document.createElement('p');line.className='xprof-magic-graph-notice';"
    b"line.style.cssText='margin:0;font:13px/1.4 sans-serif;overflow-wrap:anywhere';"
    b"line.textContent=text;box.replaceChildren?box.replaceChildren(line):box.appendChild(line)}"
    b"window.addEventListener('unhandledrejection',function(e){"
    b"say('xprof: graphviz could not lay out this graph: '+e.reason)});"
    b"window.addEventListener('load',function(){if(!window['@hpcc-js/wasm']||"
    b"!window.svgPanZoom)say(%s)})})();</script>"
)
_OFFLINE = (
    b"'xprof: the graph renderer (graphviz, from www.gstatic.com) did not load: no internet "
    b'here. Put it on this machine: make install, or see "Graph viewer offline" in '
    b"docs/guide/viewer.md.'"
)
_LOCAL_FAILED = (
    b"'xprof: the graph renderer served by this viewer did not load; reload the tool, or "
    b'see "Graph viewer offline" in docs/guide/viewer.md.\''
)


def assets_dir() -> Path:
    """Where the renderer's files are looked for.

    :data:`ASSETS_ENV`, else the environment's ``share/xprof_magic/graph-viewer``.
    """
    given = os.environ.get(ASSETS_ENV)
    return Path(given) if given else Path(sys.prefix) / "share" / "xprof_magic" / "graph-viewer"


@functools.lru_cache(maxsize=4)
def local_assets(folder: Path) -> dict[str, bytes] | None:
    """Every file of :data:`ASSETS` in ``folder``, by name, if all are there with their pinned hash.

    The hash is SHA-256. Otherwise None (the page keeps XProf's internet copies).
    """
    found = {}
    for item in ASSETS:
        try:
            data = (folder / item.name).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != item.sha256:
            return None
        found[item.name] = data
    return found


def asset(name: str) -> tuple[bytes, str] | None:
    """The body and content type of the renderer's file ``name``, if this machine has it."""
    files = local_assets(assets_dir())
    kinds = {a.name: a.content_type for a in ASSETS}
    if files is None or name not in files:
        return None
    return files[name], kinds[name]


def graph_page(page: bytes) -> bytes:
    """XProf's graph page pointed at this viewer's renderer where the machine has it.

    Also made to say in one line when its renderer did not load. Any other page as it is.
    """
    if not _HPCC.search(page):
        return page
    local = local_assets(assets_dir()) is not None
    if local:
        page = _HPCC.sub(b'<script src="' + _UP + b'/index.min.js"></script>', page, count=1)
        page = _PAN_ZOOM.sub(
            b'<script src="' + _UP + b'/svg-pan-zoom.min.js"></script>', page, count=1
        )
    notice = _NOTICE % (_LOCAL_FAILED if local else _OFFLINE)
    head = page.find(b"<head>")
    at = head + len(b"<head>") if head >= 0 else 0
    return page[:at] + notice + page[at:]


def install(folder: Path) -> str | None:
    """Put :data:`ASSETS` into ``folder``, from the npm registry by ``npm pack``.

    Each is checked against its pinned SHA-256. Returns None when done, else why not, in one
    line.
    """
    npm = shutil.which("npm")
    if npm is None:
        return (
            "npm is not on PATH: install Node.js, or copy the files by hand "
            "(docs/guide/viewer.md, Graph viewer offline)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for package in dict.fromkeys(a.package for a in ASSETS):
            packed = subprocess.run(
                [npm, "pack", "--silent", "--pack-destination", work, package],
                capture_output=True,
                text=True,
                check=False,
            )
            if packed.returncode != 0:
                return f"npm pack {package} failed: {packed.stderr.strip()[-300:]}"
            with tarfile.open(Path(work) / packed.stdout.split()[-1]) as tar:
                for item in (a for a in ASSETS if a.package == package):
                    member = tar.extractfile("package/" + item.path)
                    data = member.read() if member is not None else b""
                    if hashlib.sha256(data).hexdigest() != item.sha256:
                        return f"{package}'s {item.path} is not the pinned file; nothing replaced"
                    (folder / (item.name + ".part")).write_bytes(data)
        for item in ASSETS:
            os.replace(folder / (item.name + ".part"), folder / item.name)
    local_assets.cache_clear()
    return None
