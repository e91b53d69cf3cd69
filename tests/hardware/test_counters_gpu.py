"""The hardware counters on a real GPU: skipped without CUDA, run on the H100/H200 before any claim.

PM sampling needs profiling permission; where it is refused, those tests skip with CUPTI's reason
(the fallback line is checked on the CPU in test_choose.py).
"""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def loop(fn, seconds: float) -> None:
    torch.cuda.synchronize()
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        fn()
    torch.cuda.synchronize()


@pytest.fixture(scope="module")
def matmul():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    return lambda: a @ a


def opened(mode: str):
    from pytest_gpuutil.hardware.choose import cuda_device, open_counters

    result = open_counters(mode, 1.0, cuda_device(torch))
    if result.capture is not None:
        result.capture.wait_started()  # PM sampling starts on the sampler's thread: these windows want it running
    why = result.describe()[1] if result.describe else result.fallback
    if result.capture is None or result.capture.sampler.source is None or result.capture.sampler.error:
        if result.capture is not None:
            result.capture.sampler.stop()
        pytest.skip(f"no {mode} counters here: {why or result.capture.sampler.error}")
    return result


@pytest.mark.parametrize("mode, source", [("cupti", "cupti_pm_sampling"), ("gpm", "nvml_gpm")])
def test_a_matmul_loop_keeps_the_sms_and_tensor_pipes_busy_and_idle_does_not(matmul, mode: str, source: str) -> None:
    result = opened(mode)
    capture = result.capture
    try:
        capture.begin("matmul")
        loop(matmul, 1.2)
        capture.end()
        time.sleep(0.3)
        capture.begin("idle")
        time.sleep(0.6)
        capture.end()
        got = capture.flush()
    finally:
        capture.sampler.stop()
    busy, idle = got["matmul"], got["idle"]
    assert busy.source == source
    assert busy.note == "" or "another process" in busy.note, busy.note
    assert busy.values["sm_pct"] > 60 and busy.values["tensor_pct"] > 50, busy.values
    assert idle.values["sm_pct"] < 5, idle.values
    assert busy.energy_j is not None and busy.avg_power_w > (idle.avg_power_w or 0.0)
    assert result.startup_s is not None and result.startup_s < 5


def test_pm_sampling_still_reads_after_a_torch_profiler_session(matmul) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        loop(matmul, 0.05)
    result = opened("cupti")
    capture = result.capture
    try:
        capture.begin("after")
        loop(matmul, 0.5)
        capture.end()
        got = capture.flush()["after"]
    finally:
        capture.sampler.stop()
    assert capture.sampler.error == ""
    assert got.values["sm_pct"] is not None and got.values["sm_pct"] > 60, (got.values, got.note)


def test_two_sessions_one_after_the_other(matmul) -> None:
    for _ in range(2):  # the first releases the device, so the second can start
        result = opened("cupti")
        result.capture.sampler.stop()


def test_kernel_bench_reports_the_peak_share_and_the_counters_of_its_reps(matmul) -> None:
    from pytest_gpuutil.capture.timing import bench
    from pytest_gpuutil.fixtures import with_counters

    result = opened("auto")
    capture = result.capture
    try:
        timing = bench(matmul, flops=2 * 4096 ** 3, rep_ms=500, flush_l2=False, clock_ns=capture.sampler.now)
        timing = with_counters(timing, capture.figures_between(*timing.timed_span_ns), False)
    finally:
        capture.sampler.stop()
    assert timing.tensor_pct is not None and timing.tensor_pct > 50, (timing.tensor_pct, timing.counters_note)
    if timing.peak_tflops is not None:  # a GPU of the peak table
        assert 5 < timing.tflops_pct_of_peak < 100
