"""The counter sampler's thread and the per-window capture, on a synthetic source (real threads, real time)."""
from __future__ import annotations

import os
import time

import pytest

from pytest_gpuutil.analysis.counters import TOO_SHORT
from pytest_gpuutil.hardware.capture import CounterCapture
from pytest_gpuutil.hardware.sampler import CounterSampler
from tests.helpers.counters import SyntheticCounters


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def source() -> SyntheticCounters:
    return SyntheticCounters(period_ns=2_000_000)


def started(source: SyntheticCounters, **kwargs) -> CounterSampler:
    sampler = CounterSampler(source, source.energy_mj, source.process_pids, **kwargs)
    sampler.start()
    return sampler


def test_each_window_gets_the_level_during_it(source: SyntheticCounters) -> None:
    sampler = started(source)
    capture = CounterCapture(sampler)
    try:
        for name, level in (("low", 10.0), ("high", 90.0)):
            source.level(sm_pct=level, tensor_pct=level / 2)
            busy_wait(0.005)  # let the level settle into whole samples
            capture.begin(name)
            busy_wait(0.1)
            capture.end()
        capture.begin("tiny")
        capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    # samples straddling a window edge share their time with the neighbour: within one sample of 2 ms in 100
    assert got["low"].values["sm_pct"] == pytest.approx(10.0, abs=80 * 0.02 * 2)
    assert got["high"].values["sm_pct"] == pytest.approx(90.0, abs=80 * 0.02 * 2)
    assert got["high"].values["tensor_pct"] == pytest.approx(45.0, abs=2)
    assert got["high"].values["occupancy_pct"] is None  # not a field of this source
    assert got["low"].source == "synthetic_counters" and got["low"].note == ""
    assert got["tiny"].note == TOO_SHORT and got["tiny"].values["sm_pct"] is None
    assert source.started and source.stopped


def test_a_flush_waits_for_the_samples_that_cover_the_last_window(source: SyntheticCounters) -> None:
    source.period_ns = 20_000_000  # 20 ms samples, polled every 30 s unless a flush asks
    sampler = started(source, tick_s=30.0)
    capture = CounterCapture(sampler)
    try:
        source.level(sm_pct=70.0)
        capture.begin("t")
        busy_wait(0.08)
        capture.end()
        began = time.perf_counter()
        got = capture.flush()["t"]
        waited = time.perf_counter() - began
    finally:
        sampler.stop()
    assert got.values["sm_pct"] == pytest.approx(70.0, abs=0.5)
    # asked for a poll instead of waiting for the 30 s tick (a 0.5 s tick and a 0.4 s bound failed
    # about once in two runs on a loaded 2-core machine)
    assert waited < 10.0


def test_a_flush_of_windows_the_samples_already_cover_forces_no_poll(source: SyntheticCounters) -> None:
    """A poll decodes the hardware buffer (milliseconds for PM sampling): a flush that has what it
    needs must not make the thread do one and wait for it."""
    source.period_ns = 5_000_000
    sampler = started(source, tick_s=0.5)
    capture = CounterCapture(sampler)
    try:
        capture.begin("t")
        busy_wait(0.03)
        capture.end()
        assert sampler.sync(sampler.now())  # a poll asked for: the samples reach the window's end
        polls = sampler.cost().polls
        began = time.perf_counter()
        got = capture.flush()["t"]
        took = time.perf_counter() - began
        assert sampler.cost().polls == polls
    finally:
        sampler.stop()
    assert got.values["sm_pct"] is not None and took < 0.1


def test_energy_is_spread_over_long_windows_only(source: SyntheticCounters) -> None:
    source.watts = 250.0
    sampler = started(source, tick_s=0.02)
    capture = CounterCapture(sampler, energy_min_s=0.2)
    try:
        capture.begin("long")
        time.sleep(0.3)
        capture.end()
        capture.begin("short")
        time.sleep(0.05)
        capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    assert got["long"].avg_power_w == pytest.approx(250.0, rel=0.1)
    assert got["long"].energy_j == pytest.approx(250.0 * 0.3, rel=0.15)
    assert got["short"].energy_j is None and got["short"].sums.energy_j == pytest.approx(250 * 0.05, rel=0.5)


def test_another_process_on_the_gpu_is_noted_and_own_pids_are_not(source: SyntheticCounters) -> None:
    child = os.getpid() + 100_000
    own = {os.getpid(), child}
    sampler = started(source, own_pids=lambda: own, tick_s=0.01)
    capture = CounterCapture(sampler)
    try:
        source.other_pids = {child}  # the test's own child: not "another process"
        capture.begin("own_child")
        time.sleep(0.05)
        capture.end()
        time.sleep(0.05)
        source.other_pids = {child, 4242}
        capture.begin("foreign")
        time.sleep(0.05)
        capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    assert "another process" not in got["own_child"].note
    assert "another process used the GPU during this test: pid 4242" in got["foreign"].note


def test_a_source_that_fails_leaves_later_windows_empty_with_the_reason() -> None:
    source = SyntheticCounters(period_ns=1_000_000, fail_after_polls=2)
    sampler = started(source, tick_s=0.01)
    capture = CounterCapture(sampler)
    try:
        time.sleep(0.1)  # the source fails on its third poll
        capture.begin("after")
        time.sleep(0.02)
        capture.end()
        got = capture.flush()["after"]
    finally:
        sampler.stop()
    assert got.values["sm_pct"] is None
    assert got.note == "the hardware counters stopped: synthetic_counters stopped: synthetic failure"
    assert sampler.error == "synthetic_counters stopped: synthetic failure"
    assert source.stopped  # released even though it failed: the next session on this GPU can start


def test_a_slow_source_is_polled_on_its_own_interval_and_when_a_flush_asks() -> None:
    source = SyntheticCounters(period_ns=1_000_000)
    source.poll_interval_s = 0.3
    sampler = started(source, tick_s=0.01)
    try:
        time.sleep(0.2)
        polls_before = source.polls
        capture = CounterCapture(sampler)
        capture.begin("t")
        time.sleep(0.01)
        capture.end()
        assert capture.flush()["t"].note == ""  # the flush asked for a poll
    finally:
        sampler.stop()
    assert polls_before == 1  # only the one at start within the first 0.2 s; energy and processes ticked
    assert sampler.cost().energy_reads >= 10


def test_an_energy_counter_that_goes_back_is_not_read_as_negative_energy() -> None:
    readings = iter([5_000, 6_000, 1_000, 2_000])
    sampler = CounterSampler(None, lambda: next(readings), tick_s=10.0)
    sampler.start()  # reads 5000
    for _ in range(3):
        sampler._read_energy()
    sampler.stop()  # the iterator is spent: the energy reading fails, recorded once
    _, energy, _ = sampler.collected()
    assert energy.values["energy_j"].tolist() == [1.0, 1.0]  # 5000->6000 and 1000->2000; the reset is skipped
    assert sampler.energy_error.startswith("the energy counter could not be read")


def test_the_cost_is_reported(source: SyntheticCounters) -> None:
    sampler = started(source, tick_s=0.01)
    time.sleep(0.05)
    sampler.stop()
    cost = sampler.cost()
    assert cost.polls >= 3 and cost.energy_reads >= 3 and cost.process_checks >= 3
    assert cost.wall_s >= 0.04 and cost.thread_cpu_s > 0 and cost.samples >= 15  # 2 ms samples over 50 ms
    assert not sampler.running


def test_a_process_list_without_this_process_is_another_pid_namespace() -> None:
    listed = {101, 102}  # a container's view: the host's pids, none of them ours
    sampler = CounterSampler(None, None, lambda: set(listed), tick_s=0.005)
    sampler.start()
    capture = CounterCapture(sampler)
    try:
        capture.begin("t")
        time.sleep(0.15)
        capture.end()
        got = capture.flush()["t"]
    finally:
        sampler.stop()
    assert "another process" not in got.note  # never a false note
    assert sampler.process_error.startswith("this process is not in NVML's list")


def test_at_the_sessions_end_the_device_is_released_without_waiting() -> None:
    class SlowToRelease(SyntheticCounters):
        def stop(self):
            time.sleep(0.3)  # PM sampling's disable takes ~80 ms on an H100
            return super().stop()

    source = SlowToRelease()
    sampler = started(source)
    began = time.perf_counter()
    sampler.stop(background=True)
    assert time.perf_counter() - began < 0.1 and not sampler.running
    deadline = time.perf_counter() + 5
    while not source.stopped and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert source.stopped
