"""The wheel carries the child bootstrap's .pth at its root (so it lands in site-packages) and,
where a C compiler is found, the injection library. (An editable install puts the .pth there too:
setup.py's build_py writes it into the editable wheel; checked by hand in a fresh venv.)"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="setuptools is not installed")
def test_the_wheel_holds_the_pth_at_its_root_and_the_injection_library(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_gpuutil", source / "pytest_gpuutil",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source),
                             "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pytest_gpuutil_children.pth" in names  # the root: installed into site-packages itself
    line = zipfile.ZipFile(wheel).read("pytest_gpuutil_children.pth").decode()
    assert line.startswith("import os;") and "PYTEST_GPUUTIL_SPOOL" in line and line.count("\n") == 1
    if shutil.which("cc") or shutil.which("gcc"):
        assert any(n.startswith("pytest_gpuutil/children/_inject") and n.endswith(".so") for n in names)
