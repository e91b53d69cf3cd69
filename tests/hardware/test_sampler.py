"""The counter sampler's thread and the per-window capture, on a synthetic source (real threads, real time).

No test waits for a span of time and then counts what happened in it (a loaded machine stretches
the span or starves the thread): each waits for the event it needs (a poll, a process check, an
energy reading) with :func:`wait_until`, sets levels before the samples that must read them, holds
the sampler's clock for a window that must be too short, and gives flushes a long timeout.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator, Optional

import pytest

from pytest_gpuutil.analysis.counters import TOO_SHORT
from pytest_gpuutil.hardware.capture import CounterCapture
from pytest_gpuutil.hardware.sampler import CounterSampler
from tests.helpers.counters import SyntheticCounters


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


#: a flush waits this long for samples (a loaded machine may starve the sampler's thread for seconds)
PATIENT_S = 60.0


def wait_until(condition: Callable[[], bool], timeout_s: float = PATIENT_S) -> None:
    """Wait for an event of the sampler's thread (never for a span of time)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler's thread never got there"
        time.sleep(0.001)


class HeldClock:
    """The sampler's clock: the wall clock, except while held (then every reading is the same)."""

    def __init__(self) -> None:
        self.held: Optional[int] = None

    def __call__(self) -> int:
        return self.held if self.held is not None else time.time_ns()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self.held = time.time_ns()
        try:
            yield
        finally:
            self.held = None


@pytest.fixture
def source() -> SyntheticCounters:
    counters = SyntheticCounters(period_ns=2_000_000)
    counters.sync_timeout_s = PATIENT_S  # type: ignore[attr-defined]
    return counters


def started(source: SyntheticCounters, **kwargs) -> CounterSampler:
    sampler = CounterSampler(source, source.energy_mj, source.process_pids, **kwargs)
    sampler.start()
    return sampler


def test_each_window_gets_the_level_during_it(source: SyntheticCounters) -> None:
    clock = HeldClock()
    sampler = started(source, clock=clock)
    capture = CounterCapture(sampler)
    try:
        for name, level in (("low", 10.0), ("high", 90.0)):
            source.level(sm_pct=level, tensor_pct=level / 2)
            busy_wait(0.005)  # let the level settle into whole samples
            capture.begin(name)
            busy_wait(0.1)
            capture.end()
        with clock.hold():  # a window of no time, however loaded the machine
            capture.begin("tiny")
            capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    # a level holds from 5 ms before its window (busy-waited) to after its end; only the sample
    # straddling the end may read the next level: at most 2 ms of >= 100 ms
    assert got["low"].values["sm_pct"] == pytest.approx(10.0, abs=80 * 0.02 * 2)
    assert got["high"].values["sm_pct"] == pytest.approx(90.0, abs=80 * 0.02 * 2)
    assert got["high"].values["tensor_pct"] == pytest.approx(45.0, abs=2)
    assert got["high"].values["occupancy_pct"] is None  # not a field of this source
    assert got["low"].source == "synthetic_counters" and got["low"].note == ""
    assert got["tiny"].note == TOO_SHORT and got["tiny"].values["sm_pct"] is None
    assert source.started and source.stopped


def test_a_flush_waits_for_the_samples_that_cover_the_last_window(source: SyntheticCounters) -> None:
    source.period_ns = 20_000_000  # 20 ms samples, polled every 30 s unless a flush asks
    source.level(sm_pct=70.0)  # before the first sample: every sample reads it
    sampler = started(source, tick_s=30.0)
    capture = CounterCapture(sampler)
    try:
        capture.begin("t")
        busy_wait(0.08)
        capture.end()
        began = time.perf_counter()
        got = capture.flush()["t"]
        waited = time.perf_counter() - began
    finally:
        sampler.stop()
    assert got.values["sm_pct"] == pytest.approx(70.0, abs=1e-9)
    assert got.note == ""
    # asked for a poll instead of waiting for the 30 s tick
    assert waited < 30.0 and sampler.cost().polls >= 2


def test_a_flush_of_windows_the_samples_already_cover_forces_no_poll(source: SyntheticCounters) -> None:
    """A poll decodes the hardware buffer (milliseconds for PM sampling): a flush that has what it
    needs must not make the thread do one and wait for it."""
    source.period_ns = 5_000_000
    sampler = started(source, tick_s=30.0)  # no poll of its own while the test runs
    capture = CounterCapture(sampler)
    try:
        capture.begin("t")
        busy_wait(0.03)
        capture.end()
        assert sampler.sync(sampler.now(), timeout_s=PATIENT_S)  # a poll asked for: the samples reach the window's end
        polls = sampler.cost().polls
        got = capture.flush()["t"]
        assert sampler.cost().polls == polls
    finally:
        sampler.stop()
    assert got.values["sm_pct"] is not None


def test_energy_is_spread_over_long_windows_only(source: SyntheticCounters) -> None:
    source.watts = 250.0  # a constant power: any split of a reading over time is exact
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

    def checks_after(n: int) -> None:
        done = sampler.cost().process_checks
        wait_until(lambda: sampler.cost().process_checks >= done + n)

    try:
        source.other_pids = {child}  # the test's own child: not "another process"
        capture.begin("own_child")
        checks_after(2)
        capture.end()
        checks_after(2)  # a check after the window with the same pids: the next list's span starts there
        source.other_pids = {child, 4242}
        capture.begin("foreign")
        checks_after(2)
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
        wait_until(lambda: bool(sampler.error))  # the source fails on its third poll
        capture.begin("after")
        busy_wait(0.02)
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
    source.poll_interval_s = 600.0  # type: ignore[attr-defined]
    source.sync_timeout_s = PATIENT_S  # type: ignore[attr-defined]
    sampler = started(source, tick_s=0.01)
    try:
        wait_until(lambda: sampler.cost().process_checks >= 5)  # ticks went by
        polls_before = source.polls
        capture = CounterCapture(sampler)
        capture.begin("t")
        busy_wait(0.01)
        capture.end()
        assert capture.flush()["t"].note == ""  # the flush asked for a poll
    finally:
        sampler.stop()
    assert polls_before == 1  # only the one at start: process checks ticked, the source was not polled
    assert source.polls >= 2


def test_energy_is_read_at_window_edges_and_seldom_otherwise(source: SyntheticCounters) -> None:
    """NVML's energy read costs 4-12 ms of CPU: not every tick, but where a window needs it."""
    sampler = started(source, tick_s=0.005, energy_every_s=600.0, energy_gap_s=600.0)
    capture = CounterCapture(sampler, energy_min_s=0.0)
    try:
        wait_until(lambda: sampler.cost().process_checks >= 10)
        assert sampler.cost().energy_reads == 1  # the one at start: ticks read no energy
        capture.begin("a")  # a start asks for a reading...
        wait_until(lambda: sampler.cost().energy_reads == 2)
        capture.end()  # ...and the end of a window long enough for energy always does
        wait_until(lambda: sampler.cost().energy_reads == 3)
        capture.begin("b")  # a start within energy_gap_s of the last ask does not
        done = sampler.cost().process_checks
        wait_until(lambda: sampler.cost().process_checks >= done + 3)
        assert sampler.cost().energy_reads == 3
        capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    assert got["a"].energy_j is not None and got["b"].energy_j is not None


def test_the_energy_counter_is_still_read_every_energy_every_s(source: SyntheticCounters) -> None:
    sampler = started(source, tick_s=0.005, energy_every_s=0.02)
    try:
        wait_until(lambda: sampler.cost().energy_reads >= 3)  # no window: the periodic reads alone
    finally:
        sampler.stop()
    cost = sampler.cost()
    assert cost.energy_reads < cost.process_checks  # not one a tick


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
    wait_until(lambda: sampler.cost().polls >= 3 and sampler.cost().process_checks >= 3)
    sampler.stop()
    cost = sampler.cost()
    assert cost.polls >= 3 and cost.energy_reads >= 1 and cost.process_checks >= 3
    assert cost.wall_s > 0 and cost.thread_cpu_s > 0 and cost.samples >= 1
    assert cost.thread_pct == pytest.approx(100 * cost.thread_cpu_s / cost.wall_s)
    assert cost.poll_cpu_s > 0 and cost.process_cpu_s > 0 and cost.energy_cpu_s >= 0
    # the parts are the thread's work (the start's first poll and reads ran in this thread: a little more)
    assert cost.poll_cpu_s + cost.process_cpu_s + cost.energy_cpu_s <= cost.thread_cpu_s + cost.startup_s + 0.01
    assert not sampler.running


def test_a_process_list_without_this_process_is_another_pid_namespace() -> None:
    listed = {101, 102}  # a container's view: the host's pids, none of them ours
    sampler = CounterSampler(None, None, lambda: set(listed), tick_s=0.005)
    sampler.start()
    capture = CounterCapture(sampler)
    try:
        capture.begin("t")
        wait_until(lambda: bool(sampler.process_error))  # after 20 checks without this process
        capture.end()
        got = capture.flush()["t"]
    finally:
        sampler.stop()
    assert "another process" not in got.note  # never a false note
    assert sampler.process_error.startswith("this process is not in NVML's list")


def test_at_the_sessions_end_the_device_is_released_without_waiting() -> None:
    release = threading.Event()

    class SlowToRelease(SyntheticCounters):
        def stop(self):
            release.wait(PATIENT_S)  # PM sampling's disable takes ~80 ms on an H100
            return super().stop()

    source = SlowToRelease()
    sampler = started(source)
    sampler.stop(background=True)  # returns while the source is still releasing
    assert not sampler.running and not source.stopped
    release.set()
    wait_until(lambda: source.stopped)


def test_a_flush_that_waits_takes_the_energy_reading_a_start_asked_for(source: SyntheticCounters) -> None:
    """The session's energy sums need a reading over the short tests too: a flush that waits does not
    leave before the reading their start asked for, however slow the thread is to take it."""
    sampler = started(source, tick_s=30.0, energy_every_s=600.0)
    capture = CounterCapture(sampler)  # energy of its own from 1 s of window: not this one
    try:
        capture.begin("short")
        busy_wait(0.01)
        capture.end()
        got = capture.flush()["short"]
    finally:
        sampler.stop()
    assert got.energy_j is None and got.sums.energy_j and got.sums.energy_j > 0


def test_a_flush_that_waits_asks_for_one_poll_once_a_sample_can_cover_its_window() -> None:
    """Each poll of PM sampling decodes (milliseconds of CPU): none before a period has passed the window's end."""
    source = SyntheticCounters(period_ns=5_000_000)
    source.poll_interval_s = 600.0  # type: ignore[attr-defined]
    source.sync_timeout_s = PATIENT_S  # type: ignore[attr-defined]
    source.sample_latency_ns = 5_000_000  # type: ignore[attr-defined]  # as PM sampling's (its period)
    sampler = started(source)
    capture = CounterCapture(sampler)
    try:
        polled = []
        for key in range(5):
            capture.begin(key)
            busy_wait(0.012)
            capture.end()
            before = source.polls
            assert capture.flush()[key].note == ""
            polled.append(source.polls - before)
    finally:
        sampler.stop()
    assert polled == [1] * 5
