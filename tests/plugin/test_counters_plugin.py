"""Hardware counters end to end (pytester), on a synthetic GPU and synthetic counters: no CUDA needed.

The activity comes from tests/helpers SYNTHETIC_CONFTEST (the ``pytest_gpuutil_event_source``
hook), the counters from tests/helpers/counters.py (the ``pytest_gpuutil_counter_source`` hook):
windows, the sampler thread, attribution, records, files, the summary and the gates run for real.
"""
from __future__ import annotations

import pytest

from tests.helpers import LOG_BATCHES, SYNTHETIC_CONFTEST, output, read_csv, read_json, records_by_test, run
from tests.helpers.counters import synthetic_counters_conftest

pytestmark = pytest.mark.usefixtures("warm_torch")

#: the counters are off by default (see README "Hardware counters"): these runs turn them on in the ini
COUNTERS_ON = "[pytest]\ngpu_util_counters = auto\n"

#: what TESTS' tests need besides the synthetic GPU and counters, so that no figure depends on how
#: loaded the machine is: flushes wait long for samples, and ``held_clock`` holds the counters'
#: clock over a test (its readings 10 µs apart: the window is far under two samples however long
#: the call takes)
STEADY = """

COUNTERS.sync_timeout_s = 60.0
_HELD = []


def _counters_now():
    if not _HELD:
        return time.time_ns()
    _HELD[0] += 10_000
    return _HELD[0]


COUNTERS.now = _counters_now


@_pytest.fixture
def held_clock():
    _HELD.append(time.time_ns())
    yield
    _HELD.clear()
"""


def counted_conftest(period_ns: int = 1_000_000) -> str:
    return SYNTHETIC_CONFTEST + synthetic_counters_conftest(period_ns=period_ns) + STEADY


TESTS = """
import time

import pytest

from pytest_gpuutil.traces.model import GpuEvent


def at_level(counters, **values):
    counters.level(**values)
    time.sleep(0.004)  # whole samples at the new level before the call starts (set-up is no test's)


@pytest.fixture
def matmul_level(counters):
    at_level(counters, sm_pct=95.0, tensor_pct=90.0, dram_bw_pct=20.0)


@pytest.fixture
def tiny_level(counters):
    at_level(counters, sm_pct=0.5, tensor_pct=0.0, dram_bw_pct=0.1)


def test_matmul_like(gpu, matmul_level):
    gpu.run("nvjet_sm90_tst_256x128", 80_000_000)


def test_tiny_kernels(gpu, tiny_level):
    # 100 kernels over 80 % of a 0.1 s span measured as it passed: busy ~80 % however long the
    # span really took (a spinning loop of fixed-length kernels reads less busy on a loaded machine)
    start = gpu.now()
    while gpu.now() < start + 100_000_000:
        pass
    slot = (gpu.now() - start) // 100
    if gpu.collecting:
        gpu.events.extend(GpuEvent("vectorized_elementwise_kernel", "kernel", 0, 7, start + i * slot, slot * 8 // 10)
                          for i in range(100))


def test_short(gpu, held_clock):
    gpu.run("vectorized_elementwise_kernel", 100_000)
"""


@pytest.fixture
def counted(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(counted_conftest())
    pytester.makepyfile(test_hw=TESTS)
    pytester.makeini(COUNTERS_ON)
    return pytester


def records(pytester: pytest.Pytester) -> dict:
    return records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))


def test_each_test_gets_the_counters_of_its_call(counted: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # the counters' lines whole, not wrapped
    result = run(counted, "--gpu-util")
    result.assert_outcomes(passed=3)
    got = records(counted)
    matmul, tiny, short = (got[f"test_hw.py::{name}"] for name in ("test_matmul_like", "test_tiny_kernels", "test_short"))
    assert matmul["sm_pct"] == pytest.approx(95.0, abs=3) and matmul["tensor_pct"] == pytest.approx(90.0, abs=3)
    assert tiny["sm_pct"] == pytest.approx(0.5, abs=3) and tiny["busy_pct"] > 3 * tiny["sm_pct"]  # busy, barely working
    assert matmul["counters_source"] == "synthetic_counters" and matmul["counters_note"] == ""
    assert matmul["occupancy_pct"] is None  # the source has no occupancy
    assert short["sm_pct"] is None and short["counters_note"] == "too short for the hardware counters"
    assert short["counter_sums"]["sm_pct"][0] > 0  # but it counts for the file and the session
    doc = read_json(counted.path / ".gpu_util" / "gpu_util.json")
    session = doc["counters"]["session"]
    assert session["tests"] == 3 and 0.5 < session["sm_pct"] < 95
    assert set(doc["counters"]["files"]) == {"test_hw.py"}
    totals = doc["totals"]
    assert totals["counters"] == ["synthetic_counters"] and totals["counters_fallback"] == []
    assert totals["counters_startup_s"] >= 0 and totals["counters_samples"] > 50
    # the sampling thread's CPU, over its life and by part, for the cost model to read
    assert totals["counters_thread_wall_s"] > 0 and totals["counters_thread_cpu_s"] > 0
    assert totals["counters_thread_pct"] == pytest.approx(
        100 * totals["counters_thread_cpu_s"] / totals["counters_thread_wall_s"])
    assert set(totals["counters_thread_parts_cpu_s"]) == {"poll", "energy", "process"}
    assert totals["counters_thread_parts_cpu_s"]["poll"] > 0
    header, rows = read_csv(counted.path / ".gpu_util" / "gpu_util.csv")
    assert header[-11:] == ["sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct", "fp16_pct", "fp32_pct", "fp64_pct",
                            "energy_j", "avg_power_w", "counters_source", "counters_note"]
    by_test = {r["test"]: r for r in rows}
    assert float(by_test["test_hw.py::test_matmul_like"]["sm_pct"]) == pytest.approx(95.0, abs=3)
    result.stdout.fnmatch_lines([
        "*test*busy %*SM %*tensor %*mm/conv %*",
        "hardware counters (synthetic_counters) over * s of test calls: SM *%, tensor *%, DRAM *%, * J (100 W); 1 test "
        "too short for figures of their own (they count here)",
        "hardware counters start-up * s, not charged to any test; their thread used * s of CPU (*% of the * s the "
        "tests took) and flushes waited * s for samples",
    ])


def test_off_reads_no_counters(counted: pytest.Pytester) -> None:
    result = run(counted, "--gpu-util", "--gpu-util-counters", "off")
    result.assert_outcomes(passed=3)
    got = records(counted)
    assert all(r["sm_pct"] is None and r["counters_source"] == "" and r["counter_sums"] == {} for r in got.values())
    assert "counters" not in read_json(counted.path / ".gpu_util" / "gpu_util.json")
    assert "hardware counters" not in output(result) and "SM %" not in output(result)


def test_counter_limits_fail_a_test_that_barely_works(counted: pytest.Pytester) -> None:
    # 10 ms samples: the empty test stays under two of them even on a loaded machine (with 1 ms
    # samples its call took over 2 ms about once in twenty runs under -n 2 and read tensor 0 %)
    counted.makeconftest(counted_conftest(period_ns=10_000_000))
    counted.makepyfile(test_limits="""
import pytest, time

@pytest.mark.gpu_util(min_sm_pct=50)
def test_barely(gpu, counters):
    counters.level(sm_pct=1.0)
    time.sleep(0.02)
    gpu.run("vectorized_elementwise_kernel", 60_000_000)

@pytest.mark.gpu_util(min_sm_pct=50)
def test_working(gpu, counters):
    counters.level(sm_pct=90.0)
    time.sleep(0.02)
    gpu.run("nvjet_sm90_tst_256x128", 60_000_000)

@pytest.mark.gpu_util(min_tensor_pct=10)
def test_too_short_to_tell(gpu, held_clock):
    pass
""")
    result = run(counted, "--gpu-util", "test_limits.py")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*gpu_util: sm_pct * is below min_sm_pct=50*",
        "*gpu_util: tensor_pct was not measured (too short for the hardware counters), required by min_tensor_pct=10*",
    ])


def test_counters_travel_from_xdist_workers(counted: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("COLUMNS", "300")
    result = counted.runpytest_subprocess("-p", "no:cacheprovider", "--gpu-util", "-n", "2")
    result.assert_outcomes(passed=3)
    got = records(counted)
    assert got["test_hw.py::test_matmul_like"]["sm_pct"] == pytest.approx(95.0, abs=3)
    assert {r["worker"] for r in got.values()} <= {"gw0", "gw1"}
    result.stdout.fnmatch_lines(["hardware counters (synthetic_counters) over * s of test calls: *",
                                 "hardware counters start-up * s (longest of 2 processes), not charged to any test*"])


def test_kernel_bench_gets_the_counters_of_its_timed_reps(counted: pytest.Pytester) -> None:
    counted.makepyfile(test_bench="""
import time

def spin():
    end = time.perf_counter() + 0.005  # a rep of 5 ms: the reps span over two samples however few they are
    while time.perf_counter() < end:
        pass

def test_bench(kernel_bench, counters, gpu):
    counters.level(sm_pct=5.0)
    time.sleep(0.02)
    counters.level(sm_pct=80.0, tensor_pct=60.0)  # only while the reps run: the warm-up too, at 80
    result = kernel_bench(spin, warmup_ms=5, rep_ms=40, flops=10**9)
    time.sleep(0.004)  # the sample the reps' end falls in reads 80 too, however loaded the machine
    counters.level(sm_pct=5.0)
    assert result.sm_pct is not None
""")
    result = run(counted, "--gpu-util", "test_bench.py")
    result.assert_outcomes(passed=1)
    bench = records(counted)["test_bench.py::test_bench"]["kernel_bench"]["spin"]
    assert bench["sm_pct"] == pytest.approx(80.0, abs=4) and bench["tensor_pct"] == pytest.approx(60.0, abs=4)
    assert bench["timer"] == "perf_counter" and bench["counters_note"] == ""
    assert bench["tflops_pct_of_peak"] is None  # the CPU has no datasheet peak


def test_a_policy_flush_does_not_wait_for_the_counters_and_the_records_wait_for_them(pytester: pytest.Pytester) -> None:
    # a source polled only when a flush asks: every policy flush (each 2 tests) finds the last
    # windows uncovered, so those records wait; the last test's flush waits and sends them all
    pytester.makeconftest(counted_conftest() + """
COUNTERS.poll_interval_s = 60.0
""" + LOG_BATCHES)
    pytester.makepyfile(test_five="""
import pytest, time

@pytest.fixture
def level(counters, i):
    counters.level(sm_pct=10.0 * (i + 1))
    time.sleep(0.004)  # whole samples at the level before the call starts


@pytest.mark.parametrize("i", range(5))
def test_t(gpu, level, i):
    gpu.run("k", 20_000_000)
""")
    pytester.makeini(COUNTERS_ON)
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=2")
    result.assert_outcomes(passed=5)
    import json

    sent = [json.loads(line)[1] for line in (pytester.path / "batches.jsonl").read_text().splitlines()]
    assert sorted(t for batch in sent for t in batch) == [f"test_t[{i}]" for i in range(5)]  # each sent once
    assert sent[-1][-1] == "test_t[4]" and len(sent[-1]) == 5  # none went before the counters came
    got = records(pytester)
    assert [round(got[f"test_five.py::test_t[{i}]"]["sm_pct"] / 10) for i in range(5)] == [1, 2, 3, 4, 5]


def test_a_busy_test_whose_sms_barely_work_gets_the_low_sm_activity_finding(counted: pytest.Pytester) -> None:
    """The counters join the window's findings in the record: busy tiny kernels are named, the matmul is not."""
    run(counted, "--gpu-util").assert_outcomes(passed=3)
    got = records(counted)
    tiny, matmul = got["test_hw.py::test_tiny_kernels"], got["test_hw.py::test_matmul_like"]
    low = [f for f in tiny["findings"] if f["rule"] == "low-sm-activity"]
    assert low and low[0]["evidence"]["sm_pct"] == pytest.approx(tiny["sm_pct"], abs=0.01)
    assert "low-sm-activity" not in [f["rule"] for f in matmul["findings"]]
    ignored = run(counted, "--gpu-util", "--gpu-util-findings-ignore", "low-sm-activity")
    ignored.assert_outcomes(passed=3)
    assert all(f["rule"] != "low-sm-activity" for f in records(counted)["test_hw.py::test_tiny_kernels"]["findings"])


def test_the_counters_are_off_unless_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(counted_conftest())
    pytester.makepyfile(test_hw=TESTS)
    run(pytester, "--gpu-util").assert_outcomes(passed=3)
    got = records(pytester)
    assert all(r["sm_pct"] is None and r["counters_source"] == "" for r in got.values())
    run(pytester, "--gpu-util", "--gpu-util-counters", "auto").assert_outcomes(passed=3)
    assert records(pytester)["test_hw.py::test_matmul_like"]["counters_source"] == "synthetic_counters"


def test_tests_waiting_for_their_counters_do_not_make_every_teardown_flush(pytester: pytest.Pytester) -> None:
    """A sampler that has not polled yet: a flush gives none of the waiting tests, so they do not
    count towards the policy's test bound (they did, and each test after the first bound flushed)."""
    pytester.makeconftest(SYNTHETIC_CONFTEST + synthetic_counters_conftest() + """
COUNTERS.poll_interval_s = 60.0
from pytest_gpuutil.measurement import Measurement

FLUSHES = []
_flush = Measurement.flush


def _counted(self, wait=True):
    FLUSHES.append(wait)
    return _flush(self, wait)


Measurement.flush = _counted


def pytest_unconfigure(config):
    print("FLUSHES", len(FLUSHES))
""")
    pytester.makepyfile(test_many="""
import pytest

@pytest.mark.parametrize("i", range(40))
def test_t(gpu, i):
    gpu.run("k", 1_000_000)
""")
    pytester.makeini(COUNTERS_ON)
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=5", "-s")
    result.assert_outcomes(passed=40)
    flushes = int(result.stdout.str().split("FLUSHES ")[1].split()[0])
    assert flushes <= 40 // 5 + 2, flushes  # a flush per 5 tests, the last test's and the session end's
    got = records(pytester)
    assert len(got) == 40 and all(r["counters_source"] == "synthetic_counters" for r in got.values())
