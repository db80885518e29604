"""The docs against the code: the reference's generated tables, the pages' hand-written
lists (environment variables, test files), and the README's front page and its links.

``make docs`` builds the site with ``mkdocs build --strict`` (a broken link or anchor fails
it); these tests hold what a build cannot see.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def hooks() -> ModuleType:
    """``docs/hooks.py``, the build's table generator, imported as MkDocs imports it."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_options_page_is_the_magics_parser() -> None:
    from xprof_magic._notebook.magic import XprofMagics

    page = hooks().expand((DOCS / "reference" / "options.md").read_text(encoding="utf-8"))
    rows = [line for line in page.splitlines() if line.startswith("| `--")]
    documented = {re.match(r"\| `(--[a-z-]+)", row).group(1) for row in rows}  # type: ignore[union-attr]
    parser = XprofMagics.xprof.parser
    real = {a.option_strings[-1] for a in parser._actions if "--help" not in a.option_strings}
    assert len(real) >= 12 and documented == real
    assert "<!-- generated" not in page
    steps = next(row for row in rows if row.startswith("| `--steps"))
    assert "[A:B]" in steps and "B-1" in steps and "%%" not in steps


def test_an_unknown_marker_fails_the_build() -> None:
    with pytest.raises(ValueError, match="no generator for <!-- generated: nothing -->"):
        hooks().expand("before <!-- generated: nothing --> after")


def test_the_reference_names_every_public_name_and_saved_field() -> None:
    import dataclasses

    import xprof_magic
    from xprof_magic._analysis.model.summary import Summary
    from xprof_magic._runs.metadata import RunMetadata

    generator = hooks()
    api = generator.api_section()
    public = [n for n in xprof_magic.__all__ if not n.startswith("__") and "extension" not in n]
    assert all(f"## `{name}`" in api for name in public), api
    assert " at 0x" not in api, "a default shown by its address changes with every build"
    for cls, table in (
        (RunMetadata, generator.metadata_table()),
        (Summary, generator.summary_table()),
    ):
        assert all(f"| `{f.name}` |" in table for f in dataclasses.fields(cls))
    assert "The editor's number of `cell`'s first line" in generator.metadata_table()


def test_every_environment_variable_is_documented() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "xprof_magic").rglob("*.py"))
    used = set(re.findall(r"XPROF_MAGIC_[A-Z_]+[A-Z]", code))
    page = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    assert len(used) >= 10
    missing = sorted(name for name in used if f"`{name}`" not in page)
    assert not missing, f"docs/reference/environment.md lacks {missing}"


def test_every_test_file_is_described() -> None:
    page = (DOCS / "development" / "testing.md").read_text(encoding="utf-8")
    missing = [
        p.name for p in sorted((ROOT / "tests").glob("test_*.py")) if f"`{p.name}`" not in page
    ]
    assert not missing, f"docs/development/testing.md says nothing of {missing}"


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200
    first_screen = "\n".join(lines[:60])
    for needed in ("## Install", "pip install", "make demo", "make test"):
        assert needed in first_screen, needed
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 15
    broken = sorted({link for link in links if not (ROOT / link).exists()})
    assert not broken, f"README.md links to {broken}, which are not in the project"
