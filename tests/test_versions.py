"""The lowest-versions session (``nox -s tests-lowest``) runs with exactly the floors pyproject.toml
declares: each direct requirement at its floor, or, where the floor has no wheel for this Python,
at the first release that has one (uv's resolver, asked in a dry run, confirms that none between has).

The check of the environment itself runs only in that session (it sets PYTEST_GPUUTIL_LOWEST and
passes the path of its uv); the reading of the floors runs everywhere.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from tests.helpers.versions import Floor, floors, installed_version, off_the_floor, read_pyproject

LOWEST = os.environ.get("PYTEST_GPUUTIL_LOWEST") == "1"


def test_every_requirement_declares_a_floor():
    declared = floors(read_pyproject(), extras=("test",), here=False)
    names = {f.name for f in declared}
    assert {"torch", "pytest", "numpy", "pytest-html", "pytest-xdist"} <= names
    assert [f.requirement for f in declared if f.floor is None] == []


def test_floors_are_read_with_their_markers():
    project = {"project": {"dependencies": ["torch>=2.5", "Tabulate >= 0.9"], "optional-dependencies": {
        "test": ["tomli>=2.0; python_version < '3.0'", "pytest-html>=4.1,<5"]}}}
    assert floors(project) == [Floor("torch", Version("2.5"), "torch>=2.5"), Floor("tabulate", Version("0.9"), "Tabulate >= 0.9"),
                               Floor("pytest-html", Version("4.1"), "pytest-html>=4.1,<5")]
    assert len(floors(project, here=False)) == 4


def test_an_environment_above_a_floor_is_named():
    declared = [Floor("torch", Version("2.5"), "torch>=2.5"), Floor("numpy", Version("1.21"), "numpy>=1.21"),
                Floor("tabulate", Version("0.9"), "tabulate>=0.9")]
    wrong = off_the_floor(declared, {"torch": Version("2.5.0"), "numpy": Version("1.23.2")})
    assert wrong == {"numpy": "1.23.2 installed, floor 1.21", "tabulate": "not installed"}


def first_with_a_wheel(uv: str, floor: Floor, have: Version) -> bool:
    """Whether uv finds no release in [floor, have) with a wheel for this Python (so ``have`` is the first)."""
    result = subprocess.run(
        [uv, "pip", "compile", "-", "--only-binary", ":all:", "--no-deps", "-q", "--python", sys.executable],
        input=f"{floor.name}>={floor.floor},<{have}\n", capture_output=True, text=True, timeout=300,
    )
    return result.returncode != 0 and "unsatisfiable" in result.stderr


@pytest.mark.skipif(not LOWEST, reason="checks the environment of the nox session tests-lowest")
def test_the_lowest_session_installed_exactly_the_floors():
    declared = floors(read_pyproject())
    installed = {f.name: installed_version(f.name) for f in declared}
    wrong = off_the_floor(declared, installed)
    uv = os.environ["UV"]
    explained = {name for name, why in wrong.items()
                 if installed[name] is not None and installed[name] > next(f.floor for f in declared if f.name == name)
                 and first_with_a_wheel(uv, next(f for f in declared if f.name == name), installed[name])}
    print("installed:", {name: str(v) for name, v in installed.items()})
    assert {name: why for name, why in wrong.items() if name not in explained} == {}


def test_a_temporary_directory_inside_the_project_is_refused():
    """nox's ``session.create_tmp()`` once pointed TMPDIR into ``.nox/``: the pytester sandboxes then took the
    project's pyproject.toml as their ini file and tests failed that pass elsewhere; the root conftest now refuses that."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TMP", "TEMP"))}
    env["TMPDIR"] = str(root)
    result = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "tests/test_versions.py"],
                            cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"the temporary directory {root} (TMPDIR) is inside the project" in result.stderr
