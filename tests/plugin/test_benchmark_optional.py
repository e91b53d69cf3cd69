"""pytest-benchmark is an extra (``pytest-gpuutil[benchmark]``): without it the plugin is silent about it.

A fresh venv without pytest-benchmark would take a minute; instead the inner runs block its plugin
(``-p no:benchmark``) in a fresh process and check that nothing of pytest-benchmark was imported or
printed, with ``--gpu-util`` on and off, the fixtures used, and the plugin's optional hook
(``pytest_benchmark_update_machine_info``) registered. The interop itself, where pytest-benchmark is
installed, is tested in tests/report/test_benchmark_interop.py; the wheel's metadata in
tests/test_build.py; a real install without the extra by scripts/check_package.sh (.ci/run).
"""
from __future__ import annotations

import json

import pytest

from tests.helpers import output

TWO_TESTS = """
def test_one():
    assert sum(range(10)) == 45

def test_two(kernel_bench, metric_table):
    assert kernel_bench(sum, range(100), warmup_ms=1, rep_ms=2).label == "sum"
    metric_table("sizes", ["n", "ms"]).add_row({"n": 1, "ms": 0.5})
"""

#: at the end of the inner session: which pytest-benchmark modules are loaded, and whether the plugin is
REPORT_MODULES = """
import json, sys

def pytest_unconfigure(config):
    loaded = sorted(m for m in sys.modules if m == "pytest_benchmark" or m.startswith("pytest_benchmark."))
    with open("modules.json", "w") as handle:
        json.dump({"benchmark": loaded, "gpuutil": config.pluginmanager.has_plugin("gpuutil")}, handle)
"""


@pytest.mark.parametrize("args", [("--gpu-util",), ()], ids=["gpu-util", "off"])
def test_without_pytest_benchmark_nothing_of_it_is_imported_or_printed(pytester: pytest.Pytester, args) -> None:
    pytester.makepyfile(test_two=TWO_TESTS)
    pytester.makeconftest(REPORT_MODULES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:xdist", *args)
    result.assert_outcomes(passed=2)
    loaded = json.loads((pytester.path / "modules.json").read_text())
    assert loaded == {"benchmark": [], "gpuutil": True}
    text = "\n".join(line for line in output(result).splitlines() if not line.startswith("rootdir:"))
    assert "benchmark:" not in text and "pytest_benchmark" not in text and "pytest-benchmark" not in text
    if args:
        assert "GPU utilization (pytest-gpuutil)" in text


def test_with_pytest_benchmark_its_header_and_the_machine_info_hook_work(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_benchmark")
    # under xdist the inner pytest would inherit the worker's variable and pytest-benchmark write no JSON
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_b="def test_sum(benchmark):\n    assert benchmark(sum, range(100)) == 4950\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--benchmark-json=out.json",
                                           "--benchmark-max-time=0.01", "--benchmark-min-rounds=1")
    result.assert_outcomes(passed=1)
    assert "benchmark:" in output(result)  # pytest-benchmark's own header: it is loaded and working
    info = json.loads((pytester.path / "out.json").read_text())["machine_info"]
    assert set(info["gpu_util"]) == {"gpu_model", "gpu_count", "driver", "cuda"}
