"""Which of a run's tools have something to show, asked of XProf, and why not.

XProf lists every tool for every run (``run_tools``), yet on a CPU capture the device tools
are empty, and a tool opened empty looks broken. So the widget asks each tool's cheap data
reply (or, for the tools of one XLA program, the ``module_list``) and marks a tool without
data with the reason in a few words; the tools with data lead the dropdown. The per-program
tools open on a program the capture ran (its saved summary says which), the largest of them,
not on the first name in the list, which may be an earlier cell's.

Each question is answered by XProf in milliseconds once it has converted the run (the
conversion is shared by all tools); a question that fails counts as "has data", so that a
tool is never hidden by a slow or new XProf.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xprof_magic._runs.store import SUMMARY_FILE
from xprof_magic._viewer.prepare.waiting_page import BACKGROUND
from xprof_magic._viewer.process.client import Viewer, ViewerError, fetch_json, http_get

__all__ = ["CPU_MEMORY_VIEWER", "NO_DEVICE_OPS", "NO_PROGRAMS", "Survey", "survey_tools"]

NO_DEVICE_OPS = "no device ops in a CPU capture"
NO_DEVICE_MEMORY = "no device memory in a CPU capture"
NO_PROGRAMS = "no XLA program in this run"
_ON_A_DEVICE = {
    NO_DEVICE_OPS: "no device ops in this run",
    NO_DEVICE_MEMORY: "no device memory in this run",
}

CPU_MEMORY_VIEWER = (
    "xprof: on XLA's CPU client the memory viewer's \"HBM\" is host memory, and its figures "
    "are the compiled program's planned buffers, not allocations, which the CPU client does "
    "not record; the summary's Device memory section has what was measured."
)
"""The line under XProf's memory viewer on a CPU capture, whose page says nothing of it (and
can show "Peak memory allocation: MiB, MiB" with no figure: seen on a JAX CPU run)."""

PROGRAM_TOOLS = ("memory_viewer", "graph_viewer")
"""The tools that show one XLA program (module) at a time, chosen from ``module_list``."""


@dataclass(frozen=True)
class Survey:
    """What the tools of one run have.

    ``empty`` maps a tool to why it shows nothing; ``program`` is the XLA program the per-program
    tools open on (None: XProf's first); ``node`` the op the graph viewer draws at once (its
    entry's root; None: it waits); ``said`` maps a tool whose page shows to the line said under it
    (why its figures are not what they seem: :data:`CPU_MEMORY_VIEWER`).
    """

    empty: dict[str, str] = field(default_factory=dict)
    program: str | None = None
    node: str | None = None
    said: dict[str, str] = field(default_factory=dict)


_ENTRY_ROOT = re.compile(r"^ENTRY [^\n]*\{\n(?:[^\n]*\n)*?\s*ROOT %?(?P<op>[\w.\-]+) = ", re.M)


def entry_root(viewer: Viewer, run: str, program: str, timeout: float = 30.0) -> str | None:
    """The root op of ``program``'s entry computation, from XProf's HLO text of it."""
    path = viewer.data_path(
        "data", run=run, tag="graph_viewer", module_name=program, type="short_txt", **BACKGROUND
    )
    status, body = http_get(viewer.port, path, timeout)
    found = _ENTRY_ROOT.search(body.decode("utf-8", "replace")) if status == 200 else None
    return found["op"] if found else None


def _rows(table: Any) -> int:
    if isinstance(table, dict):
        rows = table.get("rows")
        return len(rows) if isinstance(rows, list) else 0
    if isinstance(table, list):
        return sum(_rows(t) for t in table)
    return 0


def _op_profile_empty(reply: Any) -> bool:
    program = reply.get("byProgram") if isinstance(reply, dict) else None
    if not isinstance(program, dict):
        return False
    metrics = program.get("metrics") or {}
    return not program.get("children") and not metrics.get("rawTime")


def _memory_profile_empty(reply: Any) -> bool:
    return isinstance(reply, dict) and not reply.get("memoryIds")


_EMPTY: dict[str, tuple[Callable[[Any], bool], str]] = {
    "op_profile": (_op_profile_empty, NO_DEVICE_OPS),
    "hlo_stats": (lambda reply: _rows(reply) == 0, NO_DEVICE_OPS),
    "roofline_model": (lambda reply: _rows(reply) == 0, NO_DEVICE_OPS),
    "memory_profile": (_memory_profile_empty, NO_DEVICE_MEMORY),
}


def _host(viewer: Viewer, run: str, tool: str, timeout: float) -> str | None:
    hosts = fetch_json(viewer, "hosts", run=run, tag=tool, timeout=timeout, **BACKGROUND)
    if isinstance(hosts, list) and hosts and isinstance(hosts[0], dict):
        name = hosts[0].get("hostname")
        return str(name) if name else None
    return None


def modules(viewer: Viewer, run: str, timeout: float = 30.0) -> list[str]:
    """The XLA programs of a run, as XProf names them (``name(program id)``)."""
    path = viewer.data_path("module_list", run=run, tag="memory_viewer", **BACKGROUND)
    status, body = http_get(viewer.port, path, timeout)
    if status != 200:
        raise ViewerError(f"module_list answered {status}")
    return [m for m in body.decode("utf-8", "replace").split(",") if m.strip()]


def ran(programs: Sequence[str], run_dir: Path | None) -> list[str]:
    """Those of ``programs`` that ran in the capture, most time first, from its saved summary.

    The capture's metadata lists every program the process holds, an earlier cell's too. All of
    ``programs`` when the summary is not saved yet or names none.
    """
    try:
        saved = json.loads((run_dir / SUMMARY_FILE).read_text("utf-8")) if run_dir else {}
        timed = [str(name) for name, _ in saved.get("programs") or ()]
    except (OSError, ValueError, TypeError, AttributeError):
        timed = []
    listed = set(programs)
    return [p for p in timed if p in listed] or list(programs)


def largest(programs: Sequence[str], run_dir: Path | None) -> str | None:
    """The program whose HLO is the largest.

    XProf caches each one it has read as ``<program>.hlo_proto.pb`` in the run's folder; without
    those, None (XProf's first).
    """
    if run_dir is None or len(programs) < 2:
        return None
    sizes: dict[str, int] = {}
    for program in programs:
        try:
            sizes[program] = os.stat(run_dir / f"{program}.hlo_proto.pb").st_size
        except (OSError, ValueError):
            continue
    return max(sizes, key=lambda p: (sizes[p], p)) if sizes else None


def survey_tools(
    viewer: Viewer, run: str, tools: Iterable[str], run_dir: Path | None, timeout: float = 30.0
) -> Survey:
    """Ask XProf, tool by tool, whether ``run`` has data for it (see the module's doc)."""
    tools = list(tools)
    empty: dict[str, str] = {}
    program = node = None
    if any(t in PROGRAM_TOOLS for t in tools):
        try:
            programs = modules(viewer, run, timeout)
        except (ViewerError, OSError, http.client.HTTPException):
            programs = None
        if programs is not None and not programs:
            empty.update({t: NO_PROGRAMS for t in tools if t in PROGRAM_TOOLS})
        elif programs:
            candidates = ran(programs, run_dir)
            program = largest(candidates, run_dir) or candidates[0]
            if "graph_viewer" in tools:
                with contextlib.suppress(ViewerError, OSError, http.client.HTTPException):
                    node = entry_root(viewer, run, program, timeout)
    cpu_only, cpu_seen = True, False
    for tool in tools:
        check = _EMPTY.get(tool)
        if check is None:
            continue
        try:
            host = _host(viewer, run, tool, timeout)
            reply = fetch_json(
                viewer, "data", run=run, tag=tool, host=host, timeout=timeout, **BACKGROUND
            )
        except (ViewerError, OSError, http.client.HTTPException, ValueError):
            continue
        if isinstance(reply, dict) and reply.get("deviceType") not in (None, "CPU_ONLY"):
            cpu_only = False
        cpu_seen = cpu_seen or (isinstance(reply, dict) and reply.get("deviceType") == "CPU_ONLY")
        is_empty, reason = check
        if is_empty(reply):
            empty[tool] = reason
    if not cpu_only:  # A device was there: the capture is not a CPU one.
        empty = {t: _ON_A_DEVICE.get(r, r) for t, r in empty.items()}
    said = {}
    if cpu_only and cpu_seen and "memory_viewer" in tools and "memory_viewer" not in empty:
        said["memory_viewer"] = CPU_MEMORY_VIEWER
    return Survey(empty, program, node, said)
