"""pytest-benchmark interop: machine_info, extra_info, and kernel_bench timings as benchmark rounds."""
from __future__ import annotations

import json
import re

import pytest

from pytest_gpuutil.timing_stats import TimingResult
from pytest_gpuutil.capture.timing import bench
from pytest_gpuutil.machine.identity import machine_info
from pytest_gpuutil.report.benchmark_interop import as_benchmark

pytest.importorskip("pytest_benchmark")
# The runs are in-process (pytester.runpytest) for speed. pytester drops the modules a run first
# imported, and torch (with the parts profiling imports lazily) cannot be imported twice in one
# process: torch is imported here and warm_torch (tests/conftest.py, used by the whole module)
# loads the rest first.
torch = pytest.importorskip("torch")
from tests.helpers import CPU_WORK_FIXTURE  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_torch")


FAST = ("--benchmark-max-time=0.01", "--benchmark-min-rounds=1", "--benchmark-disable-gc")


@pytest.fixture(autouse=True)
def _not_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-benchmark turns itself off inside xdist workers; the inner runs here are not workers
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *FAST, *args)


PLAIN_BENCHMARK = """
def test_sum(benchmark):
    assert benchmark(sum, range(100)) == 4950
"""


@pytest.mark.parametrize("gpu_util", [True, False])
def test_machine_info_gets_the_gpu_setup(pytester, gpu_util):
    pytester.makepyfile(test_b=PLAIN_BENCHMARK)
    result = run(pytester, "--benchmark-json=out.json", *(["--gpu-util"] if gpu_util else []))
    assert result.ret == 0
    info = json.loads((pytester.path / "out.json").read_text())["machine_info"]["gpu_util"]
    here = machine_info()  # the visible GPUs, as gpu_util.json and baselines describe them
    assert info == {
        "gpu_model": here["gpu_model"],
        "gpu_count": here["gpu_count"],
        "driver": here["driver"],
        "cuda": torch.version.cuda,  # torch is loaded here, so known with or without --gpu-util
    }
    if gpu_util:
        run_info = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["machine_info"]
        assert (run_info["gpu_model"], run_info["gpu_count"]) == (info["gpu_model"], info["gpu_count"])


def test_extra_info_has_gpu_metrics_only_when_measured_on_a_gpu(pytester):
    pytester.makepyfile(test_b=PLAIN_BENCHMARK)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu", "--benchmark-json=out.json")
    assert result.ret == 0
    result.assert_outcomes(passed=1)
    (bench_doc,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    record = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["tests"][0]
    assert record["wall_ms"] > 0  # the call phase was profiled (CPU activity)
    if torch.cuda.is_available():
        keys = {"gpu_busy_ms", "busy_pct", "mm_conv_pct", "kernel_count", "top_kernel"}
        assert set(bench_doc["extra_info"]["gpu_util"]) == keys
    else:  # a CPU-only profile has no GPU numbers: zeros there would read as "idle GPU"
        assert "gpu_util" not in bench_doc["extra_info"]
        assert record["busy_pct"] is None and record["note"] == "no CUDA device"


KERNEL_BENCH_AS_BENCHMARK = CPU_WORK_FIXTURE + """
import json
from pathlib import Path

HERE = Path(__file__).parent
SLEEP_S = float((HERE / "sleep_s.txt").read_text())

def test_kb(benchmark, kernel_bench, cpu_work):  # (timed on a perf_counter the work alone moves)
    result = kernel_bench(cpu_work, SLEEP_S, warmup_ms=2, rep_ms=20, label="sleepy")
    kernel_bench.as_benchmark(benchmark, result)
    (HERE / "kb.json").write_text(json.dumps({"median": result.median, "reps": result.reps, "timer": result.timer}))
"""


def test_benchmark_compare_fail_acts_on_kernel_bench_times(pytester):
    pytester.makepyfile(test_kb=KERNEL_BENCH_AS_BENCHMARK)
    (pytester.path / "sleep_s.txt").write_text("0.001")
    result = run(pytester, "--benchmark-save=kb", "--benchmark-save-data")
    assert result.ret == 0
    (saved_file,) = (pytester.path / ".benchmarks").glob("*/0001_kb.json")
    (saved,) = json.loads(saved_file.read_text())["benchmarks"]
    kb = json.loads((pytester.path / "kb.json").read_text())
    assert saved["stats"]["median"] == pytest.approx(kb["median"] / 1000, rel=1e-12)  # seconds
    assert saved["stats"]["rounds"] == kb["reps"] == len(saved["stats"]["data"])
    assert saved["stats"]["iterations"] == 1
    assert saved["options"]["timer"] == f"pytest_gpuutil.kernel_bench[{kb['timer']}]"
    assert saved["extra_info"]["kernel_bench"]["label"] == "sleepy"

    (pytester.path / "sleep_s.txt").write_text("0.003")  # three times slower
    result = run(pytester, "--benchmark-compare=0001", "--benchmark-compare-fail=median:5%")
    assert result.ret != 0  # pytest-benchmark ends the run with its PerformanceRegression (INTERNALERROR)
    text = result.stdout.str() + result.stderr.str()
    assert "Performance has regressed" in text
    assert re.search(r"test_kb \(0001_kb\) - Field 'median' has failed PercentageRegressionCheck", text), text

    (pytester.path / "sleep_s.txt").write_text("0.001")
    result = run(pytester, "--benchmark-compare=0001", "--benchmark-compare-fail=median:50%")
    assert result.ret == 0, result.stdout.str()


def test_as_benchmark_under_benchmark_disable_only_fills_extra_info(pytester):
    pytester.makepyfile(test_kb=KERNEL_BENCH_AS_BENCHMARK)
    (pytester.path / "sleep_s.txt").write_text("0")
    result = run(pytester, "--benchmark-disable", "--benchmark-json=out.json")
    assert result.ret == 0
    result.assert_outcomes(passed=1)
    out = pytester.path / "out.json"  # pytest-benchmark < 5.3 writes the file anyway, empty
    assert not out.exists() or not out.read_text().strip() or json.loads(out.read_text())["benchmarks"] == []


def test_as_benchmark_uses_the_fixture_up(pytester):
    pytester.makepyfile(test_twice="""
        def test_twice(benchmark, kernel_bench):
            kernel_bench.as_benchmark(benchmark, kernel_bench(lambda: None, warmup_ms=1, rep_ms=1))
            benchmark(sum, range(3))
    """)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*FixtureAlreadyUsed: Fixture can only be used once. Previously it was used in kernel_bench.as_benchmark(...) mode."]
    )


def test_as_benchmark_rejects_results_without_times_and_other_fixtures():
    timed = bench(lambda: None, warmup_ms=1, rep_ms=1, label="noop")
    assert len(timed.times_ms) == timed.reps > 0
    read_back = TimingResult.from_dict(json.loads(json.dumps(timed.to_dict())))
    assert "times_ms" not in timed.to_dict() and read_back == timed and read_back.times_ms == ()

    class NotABenchmark:
        extra_info: dict = {}

    with pytest.raises(ValueError, match="'noop' carries no per-rep times"):
        as_benchmark(NotABenchmark(), read_back)
    with pytest.raises(TypeError, match="expected pytest-benchmark's benchmark fixture, got NotABenchmark"):
        as_benchmark(NotABenchmark(), timed)
    with pytest.raises(TypeError, match="expected a TimingResult"):
        as_benchmark(NotABenchmark(), timed.to_dict())  # type: ignore[arg-type]
