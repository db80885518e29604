"""The trace viewer's conversion of one run, ahead of the click, in a process of its own.

XProf converts a run's XSpace for its trace viewer on the first ``trace_viewer@`` request:
the whole capture, whatever window or resolution was asked, into ``<host>.SSTABLE``,
``<host>.metadata.SSTABLE`` and ``<host>.trie.SSTABLE`` beside ``<host>.xplane.pb``. It then
writes ``cache_version.txt`` in the run, and uses the caches of a run only when that file
holds a version at least its own; without it, it converts again and overwrites them.

:mod:`xprof_magic._viewer.prepare.queue` starts this module as a child of the viewer's process
(:func:`command`), with a scratch folder that holds a hard link (or a copy) of each host's
``xplane.pb``; the child converts there, with XProf's own converter, at the lowest CPU
priority, and exits. The parent then moves the caches into the run and writes
``cache_version.txt`` last (:func:`commit`), so a conversion killed at any point leaves
either no cache XProf reads, or a whole one.

Standard library (and :mod:`xprof_magic._runs.store`) only at import; XProf is imported in
:func:`main`, in the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from xprof_magic._runs import store as _store
from xprof_magic._viewer.prepare import preview

__all__ = [
    "CACHE_SUFFIXES",
    "CACHE_VERSION_FILE",
    "DELAY_ENV",
    "MAX_MB_ENV",
    "TRACE_TOOL",
    "URGENT_ENV",
    "cache_files",
    "clean_scratch",
    "command",
    "commit",
    "cpu_s",
    "hurry",
    "is_prepared",
    "last_line",
    "main",
    "memory_bound",
    "remove_scratch",
    "rss",
    "scratch_for",
    "start",
    "why_ended",
    "xprof_version",
]

TRACE_TOOL = "trace_viewer@"
CACHE_VERSION_FILE = "cache_version.txt"
CACHE_SUFFIXES = (".metadata.SSTABLE", ".trie.SSTABLE", ".SSTABLE")
"""What XProf's trace viewer conversion writes per host, the one it looks for last."""
MAX_MB_ENV = "XPROF_MAGIC_PREPARE_MAX_MB"
"""The memory bound of one conversion, in MB; a conversion that grows past it is killed."""
DELAY_ENV = "XPROF_MAGIC_TEST_PREPARE_DELAY_S"
"""Tests only: seconds the child waits after it converted, before it exits: the "preparing"
state lasts, with a whole cache in the scratch folder and none in the run."""
URGENT_ENV = "XPROF_MAGIC_PREPARE_URGENT"
"""``1`` in the child's environment: someone waits for this run and the machine is busy with
other work, so it converts at normal priority, as XProf's own conversion would."""
_XPLANE = ".xplane.pb"
_PR_SET_PDEATHSIG = 1


def xprof_version() -> str:
    """The installed XProf's version (``xprof.version.__version__``).

    As its profile plugin writes it in the cache version file and compares it there.
    """
    from xprof import version

    return str(version.__version__)


def cache_files(folder: Path, host: str) -> list[Path]:
    """The trace viewer caches of ``host`` in ``folder``, :data:`CACHE_SUFFIXES` order."""
    return [folder / f"{host}{suffix}" for suffix in CACHE_SUFFIXES]


def is_prepared(run_dir: Path, hosts: tuple[str, ...], version: str) -> bool:
    """Whether XProf would serve ``run_dir``'s trace viewer from its caches.

    It would when its cache version file says at least ``version`` (XProf compares the strings)
    and every host's last cache file is there.
    """
    try:
        written = (run_dir / CACHE_VERSION_FILE).read_text().strip()
    except OSError:
        return False
    if not hosts or written < version:
        return False
    return all((run_dir / f"{host}.SSTABLE").is_file() for host in hosts)


def scratch_for(run_dir: Path, scratch: Path, hosts: tuple[str, ...]) -> None:
    """Fill ``scratch`` with each host's ``xplane.pb`` of the run.

    Each is a hard link (the same file, no bytes copied), or a copy where the file system has
    none. The log directory is never made again: one removed meanwhile fails this, not recreated
    empty.
    """
    scratch.parent.mkdir(exist_ok=True)
    scratch.mkdir()
    for host in hosts:
        source, target = run_dir / f"{host}{_XPLANE}", scratch / f"{host}{_XPLANE}"
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


def remove_scratch(scratch: Path) -> None:
    """Remove a conversion's scratch folder, and the folder that holds them once empty."""
    shutil.rmtree(scratch, ignore_errors=True)
    with contextlib.suppress(OSError):
        scratch.parent.rmdir()


def clean_scratch(folder: Path) -> None:
    """Remove what the conversions of viewers no longer running left in ``folder``.

    Each is named ``<pid>-<hex>``.
    """
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            pid = entry.name.partition("-")[0]
            if not (pid.isdigit() and _store.process_alive(int(pid))):
                shutil.rmtree(entry.path, ignore_errors=True)


def commit(scratch: Path, run_dir: Path, hosts: tuple[str, ...], version: str) -> bool:
    """Move the caches the child wrote in ``scratch`` into ``run_dir``, each with one rename.

    Each host's ``.SSTABLE`` goes after its other two, then :data:`CACHE_VERSION_FILE` through a
    temporary file: until that last rename XProf ignores them. False, and nothing written, when a
    cache file is missing.
    """
    if not all(path.is_file() for host in hosts for path in cache_files(scratch, host)):
        return False
    for host in hosts:
        for path in cache_files(scratch, host):
            os.replace(path, run_dir / path.name)
    tmp = run_dir / f".{CACHE_VERSION_FILE}.{os.getpid()}.tmp"
    tmp.write_text(version)
    os.replace(tmp, run_dir / CACHE_VERSION_FILE)
    return True


def memory_bound(xplane_bytes: int) -> int:
    """The bytes one conversion may hold.

    :data:`MAX_MB_ENV`, else 60 times the capture (XProf held 37 times a 30 MB capture), at least
    1 GiB, at most half the memory.
    """
    with contextlib.suppress(KeyError, ValueError):
        return int(float(os.environ[MAX_MB_ENV]) * 1e6)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(max(60 * xplane_bytes, 2**30), total / 2))


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cpu_s(pid: int) -> float:
    """The CPU seconds process ``pid`` has used, all its threads (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def last_line(path: Path) -> str:
    try:
        lines = path.read_bytes().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def why_ended(code: int, log: Path) -> str:
    """Why the child ended with exit ``code``.

    The signal that stopped it (``signal 35`` for one without a name, the real-time ones), else
    the last line it wrote to ``log``.
    """
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"the conversion was stopped by {signal.Signals(-code).name}"
        return f"the conversion was stopped by signal {-code}"
    return last_line(log) or f"the conversion ended with exit code {code}"


def command(root: str, scratch: Path, hosts: tuple[str, ...]) -> list[str]:
    """The child's command line: :func:`main` over ``scratch`` and the hosts.

    Run by this interpreter, with ``root`` (the viewer's package root) first on ``sys.path``.
    """
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from xprof_magic._viewer.prepare.convert import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, root, str(scratch), *hosts]


def start(
    root: str,
    scratch: Path,
    hosts: tuple[str, ...],
    urgent: bool,
    log: IO[bytes],
    keep: int = 0,
) -> subprocess.Popen[bytes]:
    """Start the child (:func:`command`), its output into ``log``.

    ``urgent``: see :data:`URGENT_ENV`; ``keep``: the events its preview keeps (0: none).
    """
    env = {**os.environ, URGENT_ENV: "1" if urgent else "0", preview.KEEP_ENV: str(keep)}
    return subprocess.Popen(
        command(root, scratch, hosts),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd="/",
    )


def hurry(pid: int) -> bool:
    """Raise running child ``pid``, each of its threads, to normal priority in place.

    Normal is ``SCHED_OTHER``, nice 0; its work is kept. False where this user may not (lowering a
    nice value takes root or ``RLIMIT_NICE``): the caller then starts it again at normal
    priority.
    """
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setscheduler(int(task), os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, int(task), 0)
    except (OSError, AttributeError, ValueError):
        return False
    return True


def _priority(urgent: bool) -> None:
    """Die with the viewer (``PR_SET_PDEATHSIG``) and, unless ``urgent``, run only on idle CPUs.

    Idle: the CPUs have nothing else to do; nice 19, and ``SCHED_IDLE`` where Linux has it.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if urgent:
        return
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _to_trace_viewer(folder: Path, host: str) -> None:
    """XProf's trace viewer conversion of ``host``'s ``xplane.pb`` in ``folder``.

    As its first ``trace_viewer@`` request would do it: the caches beside it.
    """
    from xprof.convert import raw_to_tool_data

    xplane = str(folder / f"{host}{_XPLANE}")
    params = {
        "use_saved_result": True,
        "hosts": [host],
        "trace_viewer_options": {"resolution": 8000},
    }
    raw_to_tool_data.xspace_to_tool_data([xplane], TRACE_TOOL, params)


def _preview(scratch: Path, hosts: list[str], keep: int) -> None:
    """Each host's capture in ``scratch`` cut to its first ``keep`` events and converted.

    Cut by :func:`~xprof_magic._viewer.prepare.preview.cut` into ``scratch/preview``, converted
    there, then its :data:`CACHE_VERSION_FILE` and, last, what it shows: until then the preparer
    leaves it alone (:meth:`~xprof_magic._viewer.prepare.preview.Previews.take`).
    """
    folder = scratch / preview.FOLDER
    folder.mkdir()
    spans = [
        preview.cut(scratch / f"{host}{_XPLANE}", folder / f"{host}{_XPLANE}", keep)
        for host in hosts
    ]
    for host in hosts:
        _to_trace_viewer(folder, host)
    (folder / CACHE_VERSION_FILE).write_text(xprof_version())
    _store.write_json(folder / preview.SPAN_FILE, spans[0])


def main(argv: list[str] | None = None) -> int:
    """Convert each host's ``xplane.pb`` in the scratch folder ``argv[0]`` for the trace viewer.

    As XProf's first ``trace_viewer@`` request would; the exit code says whether all were
    written, and a failure's reason is the last line of standard error.
    """
    args = sys.argv[1:] if argv is None else argv
    scratch, hosts = Path(args[0]), args[1:]
    _priority(os.environ.get(URGENT_ENV) == "1")
    keep = int(os.environ.get(preview.KEEP_ENV, "0") or 0)
    if keep > 0:  # a first look, while the whole converts: a failure only loses the look
        try:
            _preview(scratch, hosts, keep)
        except Exception as error:
            sys.stderr.write(f"no preview: {type(error).__name__}: {error}\n")
    try:
        for host in hosts:
            _to_trace_viewer(scratch, host)
            if not (scratch / f"{host}.SSTABLE").is_file():
                sys.stderr.write(f"XProf wrote no trace viewer cache for host {host}\n")
                return 1
    except Exception as error:  # the reason goes to the parent, in one line
        sys.stderr.write(f"{type(error).__name__}: {error}\n".replace("\n", " ").strip() + "\n")
        return 1
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    if delay > 0:  # tests: the caches are written, not yet committed
        time.sleep(delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
