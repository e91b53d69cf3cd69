"""A run killed mid-way (SIGKILL: the OOM killer, a CI timeout) keeps its tests up to its last
flush in the spool beside gpu_util.json, and ``gpuutil report RUN_DIR`` renders them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import SYNTHETIC_CONFTEST, run

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

KILLED_LATER = """
import os, signal
import pytest

@pytest.mark.parametrize("i", range(12))
def test_t(gpu, i):
    gpu.run(f"nvjet_sm90_tst_{i}", 100_000)
    if i == 11:
        os.kill(os.getpid(), signal.SIGKILL)  # after two flushes of five tests each
"""


def test_a_killed_run_keeps_its_flushed_tests_and_gpuutil_report_renders_them(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_killed=KILLED_LATER)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--gpu-util", "--gpu-util-flush", "tests=5 seconds=3600 megabytes=4096", "-q"],
                          cwd=pytester.path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    out = pytester.path / ".gpu_util"
    assert not (out / "gpu_util.json").exists()
    lines = (out / "gpu_util.partial.jsonl").read_text().splitlines()
    tests = [json.loads(line)["record"]["test"] for line in lines[1:]]
    assert tests == [f"test_killed.py::test_t[{i}]" for i in range(10)]
    report = subprocess.run([sys.executable, "-m", "pytest_gpuutil", "report", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "10 tests" in report.stdout
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "the run did not finish" in page
    assert "test_killed.py::test_t[9]" in page and "test_killed.py::test_t[11]" not in page


def test_a_finished_run_leaves_no_spool(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_ok="""
import pytest

@pytest.mark.parametrize("i", range(7))
def test_t(gpu, i):
    gpu.run("nvjet_sm90_tst", 100_000)
""")
    (pytester.path / ".gpu_util").mkdir()
    (pytester.path / ".gpu_util" / "gpu_util.partial.jsonl").write_text("an earlier run's\n")
    run(pytester, "--gpu-util", "--gpu-util-flush", "tests=3").assert_outcomes(passed=7)
    assert not (pytester.path / ".gpu_util" / "gpu_util.partial.jsonl").exists()
    assert len(json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["tests"]) == 7
