"""The wheel builds in a fresh virtual environment from what ``[build-system]`` states, with and
without build isolation.

A fresh venv of Python 3.9 to 3.11 comes with an old setuptools (65.5 on 3.11) that has no
``bdist_wheel``; 3.12's has none at all. Without isolation the builder installs
``[build-system].requires`` itself: here at their floors, so the floor is what is tested.
Both need the package index (pip fetches the build requirements); without it they skip.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from tests.helpers.versions import read_pyproject

ROOT = Path(__file__).resolve().parents[1]


def floor_pins(requirements: list[str]) -> list[str]:
    """``name>=X`` -> ``name==X``; a requirement without a floor stays as it is."""
    return [re.sub(r"\s*>=\s*", "==", r, count=1) if ">=" in r else r for r in requirements]


def source_tree(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_gpuutil", source / "pytest_gpuutil", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return source


def fresh_venv(tmp_path: Path) -> Path:
    """A new venv with the pip and setuptools that this Python's ensurepip brings, nothing else."""
    location = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(location)
    return location / "bin" / "python"


def pip(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env=env)


def index_reachable(python: Path, cwd: Path) -> bool:
    probe = pip(python, "download", "--no-deps", "-q", "-d", str(cwd / "probe"), "--only-binary", ":all:", "six", cwd=cwd)
    return probe.returncode == 0


def check_wheel(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pytest_gpuutil_children.pth" in names
    assert "pytest_gpuutil/report/html_report/assets/report.js" in names
    assert any(n.startswith("pytest_gpuutil-0.1.0.dist-info/") for n in names)
    check_metadata(zipfile.ZipFile(wheel).read("pytest_gpuutil-0.1.0.dist-info/METADATA").decode())
    assert "pytest_gpuutil-0.1.0.dist-info/licenses/LICENSE" in names


def check_metadata(metadata: str) -> None:
    """What PyPI shows and what pip installs: licence, links, readme, pytest-benchmark only as an extra."""
    headers = [line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line]
    values: dict[str, list[str]] = {}
    for key, value in headers:
        values.setdefault(key, []).append(value)
    assert values["License-Expression"] == ["BSD-3-Clause"] and values["License-File"] == ["LICENSE"]
    assert {u.split(",")[0] for u in values["Project-URL"]} >= {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    assert values["Description-Content-Type"] == ["text/markdown"]
    assert "Framework :: Pytest" in values["Classifier"]
    benchmark = [r for r in values["Requires-Dist"] if r.startswith("pytest-benchmark")]
    assert benchmark and all("extra ==" in r for r in benchmark), benchmark  # never installed without an extra
    assert 'extra == "benchmark"' in " ".join(benchmark)


def test_the_metadata_states_licence_links_and_the_benchmark_extra():
    project = read_pyproject(ROOT / "pyproject.toml")["project"]
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("BSD 3-Clause License")
    assert not any(r.startswith("pytest-benchmark") for r in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(r.startswith("pytest-benchmark") for r in extras["benchmark"])
    assert any(r.startswith("pytest-benchmark") for r in extras["test"])  # the interop's tests run in CI


def test_build_requirements_are_stated_with_a_floor_that_has_bdist_wheel():
    requires = read_pyproject(ROOT / "pyproject.toml")["build-system"]["requires"]
    setuptools = [r for r in requires if re.match(r"setuptools\b", r)]
    assert setuptools, requires
    floor = tuple(int(x) for x in re.search(r">=\s*([0-9.]+)", setuptools[0]).group(1).split("."))
    assert floor >= (70, 1)  # setuptools' own bdist_wheel; older ones need the wheel package's (gone in wheel 0.46)


@pytest.mark.parametrize("isolation", [True, False], ids=["isolated", "not-isolated"])
def test_the_wheel_builds_in_a_fresh_venv(tmp_path: Path, isolation: bool) -> None:
    python = fresh_venv(tmp_path)
    if not index_reachable(python, tmp_path):
        pytest.skip("no package index reachable: pip cannot fetch the build requirements")
    source = source_tree(tmp_path)
    args = ["wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist")]
    if not isolation:
        requires = floor_pins(read_pyproject(ROOT / "pyproject.toml")["build-system"]["requires"])
        installed = pip(python, "install", "-q", *requires, cwd=tmp_path)
        assert installed.returncode == 0, installed.stderr[-2000:]
        args.append("--no-build-isolation")
    built = pip(python, *args, str(source), cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    check_wheel(tmp_path / "dist")
