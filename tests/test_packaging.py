"""Installing the project, as ``make`` does: no warning of the project's own packaging."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import missing

ROOT = Path(__file__).resolve().parent.parent
# What setuptools says of a project's own configuration: a deprecated field (a license as a
# TOML table), or how it made an editable install ("Editable installation. Please be careful
# with folders in your working directory ...").
WARNING = re.compile(r"Warning|deprecated|Please be careful", re.IGNORECASE)


@pytest.mark.slow
def test_an_editable_install_prints_no_warning_of_the_projects_own(tmp_path: Path) -> None:
    """``pip install -e .`` (no dependencies) into a fresh environment, by this environment's
    pip, which shows what the build backend warns even with ``-q``."""
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    pip = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python")]
    done = subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--disable-pip-version-check", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    if done.returncode != 0 and "No matching distribution found" in said:
        missing(f"the build backend could not be installed: {said[-500:]}")
    assert done.returncode == 0, said
    # pip's own notes about this machine's package indexes are not the project's.
    lines = [line for line in said.splitlines() if "is ignored: it is neither" not in line]
    assert not [line for line in lines if WARNING.search(line)], "\n".join(lines)
    check = subprocess.run(
        [str(target / "bin" / "python"), "-c", "import xprof_magic; print(xprof_magic.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert Path(check.stdout.strip()) == ROOT / "xprof_magic" / "__init__.py", check.stderr
