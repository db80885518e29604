"""What a capture is asked to do, decided before any of it happens.

The magic turns ``%%xprof`` options into a :class:`Plan`, the script API turns
:func:`xprof_magic.capture`'s arguments into one; :class:`~xprof_magic._capture.capture.Capture`
carries it out. Which backend ``--backend auto`` means is decided before, by
:mod:`xprof_magic._backends.detect`. IPython-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from xprof_magic._backends.registry import DEFAULT_PORT
from xprof_magic._cell.step_window import StepWindow
from xprof_magic._runs import logdir as _logdir
from xprof_magic._runs import store as _store

__all__ = ["DEFAULT_PORT", "NO_SERVER_ENV", "Plan", "server_by_default"]

NO_SERVER_ENV = "XPROF_MAGIC_NO_SERVER"


def server_by_default() -> bool:
    """Whether the profiler server starts unless asked not to (``XPROF_MAGIC_NO_SERVER=1``)."""
    return os.environ.get(NO_SERVER_ENV, "").strip().lower() not in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Plan:
    """Everything a capture was asked to do, decided before any of it happens."""

    logdir: _logdir.Logdir = field(default_factory=_logdir.Logdir.parse)
    name: str | None = None
    labels: bool = True
    steps: bool = False
    step_window: StepWindow | None = None
    sync: bool = False
    server: bool = field(default_factory=server_by_default)
    port: int = DEFAULT_PORT
    backend: str = "torch_xla"
    cell: str | None = None
    cell_number: int | None = None
    cell_first_line: int = 1
    """The editor's number of ``cell``'s first line (see
    :attr:`~xprof_magic._runs.metadata.RunMetadata.cell_first_line`)."""
    cell_file: str = ""
    """The file name the cell's code is compiled under, once it is (see
    :attr:`~xprof_magic._runs.metadata.RunMetadata.cell_file`)."""
    options: dict[str, Any] = field(default_factory=dict)

    def with_name(self) -> Plan:
        """The plan with its run name made safe, or a default one that sorts by time; a
        :class:`~xprof_magic._capture.capture.Capture` calls it once. Raises ``ValueError`` for a
        name with no usable character."""
        if self.name is None:
            name = _store.default_run_name(datetime.now(), self.cell_number)
        else:
            name = _store.safe_run_name(self.name)
        return replace(self, name=name)
