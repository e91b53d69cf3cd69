"""PmSamplingSource's calls, decode loop and evaluation on a stand-in libcupti (tests/hardware/fake_cupti.c).

The stand-in's samples are known functions of their index (see the C file), so each poll's
columns can be checked exactly: every sample once, in order, contiguous, with its values, across
image re-initialisations and a decode that fills the image. It is built with the machine's C
compiler (skipped without one) and loaded globally first, as torch loads libcupti.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuutil.analysis.counters import CounterSamples
from pytest_gpuutil.hardware.choose import CudaDevice, open_counters
from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource, image_samples
from pytest_gpuutil.hardware.nvml import NvmlError

PERIOD_NS = 5_000_000


@pytest.fixture(scope="module")
def fake_cupti(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ctypes.CDLL]:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcupti")
    path = tmp_path_factory.mktemp("fake_cupti") / "libcupti_fake.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(path),
                    str(Path(__file__).with_name("fake_cupti.c"))], check=True)
    lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | ctypes.RTLD_GLOBAL)
    lib.fake_arrive.argtypes = [ctypes.c_uint64]
    lib.fake_t0.restype = ctypes.c_uint64
    return str(path), lib


@pytest.fixture
def lib(fake_cupti: tuple[str, ctypes.CDLL]) -> ctypes.CDLL:
    fake_cupti[1].fake_reset()
    return fake_cupti[1]


def expected_values(first: int, count: int, metric: int) -> np.ndarray:
    g = np.arange(first, first + count)
    return ((g * 7 + metric * 13) % 100) + 0.5


@pytest.mark.parametrize("reset_fill", [0.5, 0.0])  # the default, and an image initialised after every poll
def test_every_sample_comes_out_once_in_order_with_its_values(fake_cupti, lib, reset_fill: float) -> None:
    source = PmSamplingSource(fake_cupti[0], interval_ns=PERIOD_NS, reset_fill=reset_fill)
    source.start()
    assert source.chip == "GH100" and source.max_samples == 400 and source.sample_latency_ns == PERIOD_NS
    assert source.fields == ("sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct", "fp32_pct", "fp64_pct")
    parts = []
    arrivals = (3, 150, 0, 47, 399, 400, 1000, 1)  # half the image, a full one, one past two images
    try:
        for count in arrivals:
            lib.fake_arrive(count)
            parts.append(source.poll())
    finally:
        parts.append(source.stop())
    samples = CounterSamples.concat(parts)
    total = sum(arrivals)
    t0 = lib.fake_t0()
    assert len(samples) == total == source.samples
    g = np.arange(total, dtype=np.int64)
    np.testing.assert_array_equal(samples.start_ns, t0 + g * PERIOD_NS)  # a fresh image's garbage start mended
    np.testing.assert_array_equal(samples.end_ns, t0 + (g + 1) * PERIOD_NS)
    for metric, field in enumerate(source.fields):
        np.testing.assert_array_equal(samples.values[field], expected_values(0, total, metric), err_msg=field)
    assert source.image_resets > 4  # the first, then at half full and when a decode filled it
    if reset_fill == 0.0:  # the first, after each poll with samples (7), and twice when 1,000 filled it
        assert source.image_resets == 1 + 7 + 2
    assert source.reset_cpu_s > 0 and "image resets" in source.startup_steps


def test_each_poll_keeps_its_cost_split(fake_cupti, lib) -> None:
    source = PmSamplingSource(fake_cupti[0], interval_ns=PERIOD_NS)
    source.poll_log = []
    source.start()
    try:
        for count in (10, 900, 0):
            lib.fake_arrive(count)
            source.poll()
    finally:
        source.stop()
    assert source.polls == 5 and len(source.poll_log) == 5  # three, and stop's two
    assert source.decodes >= 7  # 900 samples: three images' worth of decodes in one poll
    assert [entry[4] for entry in source.poll_log] == [10, 900, 0, 0, 0]
    assert [entry[5] for entry in source.poll_log] == [0, 10, 110, 110, 110]  # 900 more: two images filled, 110 in a third
    assert 0 < source.decode_cpu_s + source.evaluate_cpu_s <= source.poll_cpu_s
    assert all(cpu <= total for _, dec, ev, total, _, _ in source.poll_log for cpu in (dec, ev, dec + ev))


@pytest.mark.parametrize("interval_ms, samples", [(0.25, 2000), (1.0, 2000), (2.0, 1000), (5.0, 400), (10.0, 400)])
def test_the_image_holds_two_seconds_of_samples_within_bounds(interval_ms: float, samples: int) -> None:
    assert image_samples(int(interval_ms * 1e6)) == samples


def no_nvml(uuid: str, index: int):
    raise NvmlError("no NVML here")


def test_open_counters_starts_pm_sampling_on_the_samplers_thread(fake_cupti, lib) -> None:
    began = time.perf_counter()
    opened = open_counters("cupti", 5.0, CudaDevice(0, "GPU-fake", "fake GPU"), nvml_device=no_nvml,
                           cupti_library=lambda: fake_cupti[0])
    assert opened.capture is not None and opened.startup_s is not None
    assert opened.startup_s <= time.perf_counter() - began
    sampler = opened.capture.sampler
    try:
        deadline = time.monotonic() + 60
        while sampler.source.starting:
            assert time.monotonic() < deadline, "PM sampling never started on the thread"
            time.sleep(0.001)
        assert not sampler.error and sampler.source.label == "CUPTI PM sampling"
        description, fallback = opened.describe()
        assert description == "CUPTI PM sampling every 5 ms on GH100 (SM, tensor, DRAM, occupancy, FP32, FP64)"
        assert fallback == ""
        assert opened.fallback == "no energy figures and no check for other processes on the GPU: no NVML here"
        capture = opened.capture
        start = sampler.now()
        capture.begin("t", since_ns=start)
        capture.end()
        end = max(start + 3 * PERIOD_NS, sampler.now())
        capture._closed[-1] = ("t", start, end, "")  # a window of three periods at least, on the stand-in's time
        lib.fake_arrive((end - lib.fake_t0()) // PERIOD_NS + 2)  # samples up to past its end
        got = capture.flush()["t"]
    finally:
        sampler.stop()
    assert got.source == "cupti_pm_sampling"
    assert got.values["sm_pct"] is not None and 0.5 <= got.values["sm_pct"] <= 99.5
    assert sampler.cost().thread_startup_s is not None


def test_samples_on_kinetos_clock_are_mapped_onto_the_wall_clock() -> None:
    from pytest_gpuutil.hardware.cupti_pm import on_wall_clock

    def ticks() -> int:  # a clock of its own: a third of the wall clock's rate, far from it
        return time.time_ns() // 3

    now = ticks()
    foreign = CounterSamples(np.asarray([now - 2_000_000, now - 1_000_000], dtype=np.int64),
                             np.asarray([now - 1_000_000, now], dtype=np.int64), {"sm_pct": np.asarray([1.0, 2.0])})
    mapped, tsc = on_wall_clock(foreign, None, ticks)
    assert tsc is not None and tsc[2] == pytest.approx(3.0, rel=0.01)
    assert abs(int(mapped.end_ns[-1]) - time.time_ns()) < 1_000_000_000
    assert int(mapped.end_ns[0] - mapped.start_ns[0]) == pytest.approx(3_000_000, rel=0.01)
    wall = CounterSamples(np.asarray([time.time_ns()], dtype=np.int64), np.asarray([time.time_ns() + 1], dtype=np.int64),
                          {"sm_pct": np.asarray([1.0])})
    same, kept = on_wall_clock(wall, tsc, ticks)
    assert same is wall and kept == tsc


def test_pm_sampling_refused_on_the_thread_falls_back_to_energy_only_and_says_why(fake_cupti, lib) -> None:
    from tests.hardware.test_choose import NvmlView

    lib.fake_refuse_enable(35)  # CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
    view = NvmlView("NVIDIA H100 80GB HBM3", gpm=False)
    opened = open_counters("auto", 5.0, CudaDevice(0, "GPU-fake", "NVIDIA H100 80GB HBM3"),
                           nvml_device=lambda uuid, index: view, cupti_library=lambda: fake_cupti[0])
    assert opened.capture is not None
    capture, sampler = opened.capture, opened.capture.sampler
    try:
        assert capture.wait_started(timeout_s=60)
        capture.begin("t")
        capture.end()
        got = capture.flush()["t"]
    finally:
        sampler.stop()
    assert got.source == "nvml_utilization" and got.values["sm_pct"] is None and got.note == ""
    description, fallback = opened.describe()
    assert description == "NVML energy only"
    assert fallback.startswith("no SM/tensor/DRAM counters (CUPTI PM sampling: no permission to read GPU performance "
                               "counters (")
    assert fallback.endswith("[cuptiPmSamplingEnable failed: fake CUPTI error]; NVML GPM: not supported on NVIDIA H100 "
                             "80GB HBM3 (Hopper or later needed)): energy from NVML only")
