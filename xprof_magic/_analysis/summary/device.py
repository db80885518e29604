"""Which device ran the cell, how busy it and the host threads were, and the top operations."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xprof_magic._analysis.model.summary import DeviceBusy, DeviceInfo, OpRow, ThreadGroup
from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._analysis.timeline.intervals import measure, merge
from xprof_magic._backends import NEUTRAL, Vocabulary

__all__ = ["TOP_OPS", "busy_ns", "device_info", "top_host_ops", "top_ops"]

TOP_OPS = 10


KINDS = {"CUDA": "GPU", "ROCM": "GPU"}
"""The runtime's words for a kind of device, as the summary says it (torch_xla's
``PJRT_DEVICE=CUDA`` is a GPU)."""


def busy_ns(facts: TraceFacts) -> float | None:
    """How long the device ran executions in the window (None: no execution seen).

    Measured from the timeline's spans with :mod:`~xprof_magic._analysis.timeline.intervals`.
    """
    pieces = facts.spans.get("device")
    if not pieces:
        return None
    spans = merge(pieces)
    lo, hi = facts.window or (float(spans[0][0]), float(spans[1][-1]))
    return float(measure(spans, np.array([lo]), np.array([hi]))[0])


def device_info(
    declared: str, facts: TraceFacts | None, words: Vocabulary = NEUTRAL, name: str = ""
) -> DeviceInfo:
    """The device that ran the cell, as the capture declared it or as the timeline shows it.

    ``declared`` by the capture (``name``: as its runtime named it), else from the timeline (its
    device planes and the names they carry).
    """
    declared = KINDS.get(declared.upper(), declared.upper())
    device_planes = [n for n in facts.planes if n.startswith("/device:")] if facts else []
    seen = {n.split(":")[1] for n in device_planes if n.count(":") >= 2}
    kind = declared or (
        next(iter(sorted(seen)))
        if seen
        else "CPU"
        if facts is not None and facts.has_cpu_client
        else "unknown"
    )
    mine = [n for n in device_planes if n.startswith(f"/device:{kind}")]
    named = [facts.device_names[n] for n in mine if facts and n in facts.device_names]
    name = name if name and name.upper() != kind else ""
    name = name or (named[0] if named else "")
    window_s = (facts.window[1] - facts.window[0]) / 1e9 if facts and facts.window else None
    on_cpu = kind == "CPU"
    if facts is None:
        return DeviceInfo(kind, on_cpu, window_s, name=name)
    threads = tuple(
        ThreadGroup(
            name=group,
            threads=g.threads,
            busy_s=g.busy_ns / 1e9,
            share=g.busy_ns / 1e9 / window_s if window_s else 0.0,
        )
        for group, g in sorted(facts.groups.items(), key=lambda kv: -kv[1].busy_ns)
    )
    devices = tuple(
        DeviceBusy(
            plane,
            busy / 1e9,
            busy / 1e9 / window_s if window_s else 0.0,
            facts.device_copy_ns[plane] / 1e9 if plane in facts.device_copy_ns else None,
        )
        for plane, busy in facts.devices
    )
    busy_s: float | None = None
    if devices:
        busy_s = sum(d.busy_s for d in devices) / len(devices)
    elif facts.has_cpu_client:
        # Executions, launch to completion: the op events cover only part of each one.
        executions = busy_ns(facts)
        busy_s = (executions if executions is not None else facts.cpu_xla_busy_ns) / 1e9
    share = busy_s / window_s if busy_s is not None and window_s else None
    silent = not on_cpu and kind != "unknown" and not mine
    return DeviceInfo(
        kind, on_cpu, window_s, busy_s, share, devices, threads, name, silent, planes=len(mine)
    )


def top_ops(
    table: Mapping[str, list[float]] | Mapping[tuple[str, str], list[float]], category: str
) -> tuple[OpRow, ...]:
    """The :data:`TOP_OPS` largest by self time; a key is a name or (name, category)."""
    total = sum(v[1] for v in table.values()) or 1.0
    best = sorted(table.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
    return tuple(
        OpRow(
            name=key[0] if isinstance(key, tuple) else str(key),
            category=key[1] if isinstance(key, tuple) else category,
            count=int(v[0]),
            self_s=v[1] / 1e9,
            share=v[1] / total,
        )
        for key, v in best
        if v[1] > 0
    )


def top_host_ops(facts: TraceFacts | None) -> tuple[OpRow, ...]:
    """The host's busiest runtime operations, waits left out."""
    if facts is None:
        return ()
    work = {k: v for k, v in facts.host_ops.items() if "wait" not in k[0].lower()}
    return top_ops(work, "runtime")
