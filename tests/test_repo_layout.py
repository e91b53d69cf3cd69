"""The repository's rooms: no folder outside tests/ holds more than 12 files, each script folder has
a README, and the package's tests import nothing from the script folders.

The package's own layering is checked in ``tests/test_layout.py``; this is the repository around it.
"""
from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILES = 12
SCRIPT_FOLDERS = ("benchmarks", "validation", "scripts")
#: tests of the script folders' own helpers, which may import them
SCRIPT_TESTS = ("tests/benchmarks", "tests/validation")
#: folders never counted, by name: version control, environments, caches, build outputs, the
#: git-ignored folders a device run carries or writes
SKIP_NAMES = frozenset({".git", ".venv", "venv", "build", "dist", "__pycache__", ".pytest_cache", ".mypy_cache",
                        ".ruff_cache", ".gpu_util", ".benchmarks", ".whl", ".device", ".before"})
#: folders never counted, by path: the tests (their own rules), result folders, and the docs site,
#: whose pages are held to mkdocs.yml's nav instead (tests/docs/test_site.py: every page in the nav,
#: nothing in docs/ but the pages, their pictures and the build's hook)
SKIP_PATHS = frozenset({"tests", "benchmarks/results", "docs"})
#: files never counted: what a build compiles beside the sources
BUILD_SUFFIXES = (".so", ".pyd", ".pyc")


def git_ignored_folders() -> frozenset[str]:
    """Folders git ignores in this checkout (a developer's own scratch folders), relative; none outside git."""
    try:
        out = subprocess.run(["git", "status", "--ignored", "--porcelain"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(line[3:].rstrip("/") for line in out.splitlines() if line.startswith("!! ") and line.endswith("/"))


def _skipped(rel: str, name: str, ignored: frozenset[str] = frozenset()) -> bool:
    return name in SKIP_NAMES or name.endswith(".egg-info") or rel in SKIP_PATHS or rel in ignored


def counted_folders() -> dict[str, list[str]]:
    """Every folder the 12-file rule covers (relative path, "." for the root) with its direct files."""
    found: dict[str, list[str]] = {}
    ignored = git_ignored_folders()
    for here, dirs, files in os.walk(ROOT):
        rel = Path(here).relative_to(ROOT).as_posix()
        dirs[:] = [d for d in dirs if not _skipped(d if rel == "." else f"{rel}/{d}", d, ignored)]
        found[rel] = sorted(f for f in files if not f.endswith(BUILD_SUFFIXES))
    return found


def script_imports(path: Path) -> list[str]:
    """The absolute imports in ``path`` of a module under one of the script folders."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] in SCRIPT_FOLDERS]


def test_no_folder_outside_tests_holds_more_than_12_files():
    found = counted_folders()
    # the walk reaches the package's folders and the script folders, and skips what it should
    assert {".", "pytest_gpuutil", "pytest_gpuutil/traces", "benchmarks", "benchmarks/data", *SCRIPT_FOLDERS} <= set(found)
    assert not any(rel in ("tests", "docs") or rel.startswith(("tests/", "benchmarks/results", "docs/")) for rel in found)
    crowded = {rel: files for rel, files in found.items() if len(files) > MAX_FILES}
    assert not crowded, f"folders with more than {MAX_FILES} files: {crowded}"


@pytest.mark.parametrize("folder", SCRIPT_FOLDERS)
def test_each_script_folder_says_what_runs_where(folder: str):
    readme = ROOT / folder / "README.md"
    assert readme.is_file(), f"{folder}/ has no README.md"
    assert len(readme.read_text(encoding="utf-8").split()) >= 30, f"{folder}/README.md says too little"


def test_the_package_tests_import_nothing_from_the_script_folders():
    offending, allowed = {}, {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found = script_imports(path)
        if found:
            (allowed if rel.startswith(tuple(f"{t}/" for t in SCRIPT_TESTS)) else offending)[rel] = found
    assert allowed, "the tests of the script folders' helpers import them: the scan should see that"
    assert not offending, f"the package's tests import from {'/, '.join(SCRIPT_FOLDERS)}/ (move what they need to tests/helpers/): {offending}"
