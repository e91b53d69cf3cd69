"""A source started on the sampler's thread (PM sampling's ~0.4 s start-up off the tests' thread).

Real threads and the synthetic source; a start is held with an event (never a span of time), as
in test_sampler.py.
"""
from __future__ import annotations

import threading
import time

import pytest

from pytest_gpuutil.hardware.capture import CounterCapture
from pytest_gpuutil.hardware.deferred_start import DeferredStart
from pytest_gpuutil.hardware.sampler import CounterSampler
from tests.hardware.test_sampler import PATIENT_S, busy_wait, wait_until
from tests.helpers.counters import SyntheticCounters


class HeldStart(SyntheticCounters):
    """A synthetic source whose start waits for ``go`` (and then burns ``cpu_s`` of CPU), on the caller's thread."""

    def __init__(self, cpu_s: float = 0.0, fail: str = "", **kwargs):
        super().__init__(period_ns=2_000_000, **kwargs)
        self.go = threading.Event()
        self.cpu_s = cpu_s
        self.fail = fail
        self.start_thread = ""
        self.sync_timeout_s = PATIENT_S

    def start(self) -> None:
        self.start_thread = threading.current_thread().name
        assert self.go.wait(PATIENT_S)
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        if self.fail:
            raise RuntimeError(self.fail)
        super().start()


def deferred(*sources: SyntheticCounters) -> DeferredStart:
    return DeferredStart([(f"source {i}", lambda s=s: s) for i, s in enumerate(sources)])


def test_the_start_runs_on_the_samplers_thread_and_the_caller_goes_on() -> None:
    source = HeldStart()
    wrapper = deferred(source)
    sampler = CounterSampler(wrapper, source.energy_mj, source.process_pids)
    sampler.start()  # returns although the source's start is held
    try:
        assert wrapper.starting and wrapper.started_ns == 0 and not sampler.error
        source.go.set()
        wait_until(lambda: not wrapper.starting)
        assert source.start_thread == "pytest-gpuutil counters"
        assert wrapper.source is source and wrapper.label == "source 0" and wrapper.started_ns > 0
        assert wrapper.name == "synthetic_counters" and wrapper.fields == source.fields
    finally:
        sampler.stop()
    assert source.stopped


def test_windows_are_cut_where_the_samples_begin_and_say_so() -> None:
    source = HeldStart()
    source.level(sm_pct=80.0, tensor_pct=40.0)
    sampler = CounterSampler(deferred(source), source.energy_mj, source.process_pids)
    sampler.start()
    capture = CounterCapture(sampler)
    try:
        capture.begin("before")  # wholly before the start
        busy_wait(0.005)
        capture.end()
        capture.begin("across")  # opened while starting, closed well after
        busy_wait(0.005)
        source.go.set()
        wait_until(lambda: not sampler.source.starting)
        busy_wait(0.05)
        capture.end()
        got = capture.flush()
    finally:
        sampler.stop()
    assert got["before"].note == "the hardware counters were still starting"
    assert got["before"].values["sm_pct"] is None
    across = got["across"]
    assert across.note.startswith("the hardware counters started ")
    assert across.note.endswith(" ms into it and cover the rest of it")
    assert across.values["sm_pct"] == pytest.approx(80.0)
    assert across.values["tensor_pct"] == pytest.approx(40.0)


def test_a_source_that_does_not_start_hands_over_to_the_next_with_its_reason() -> None:
    refusing, second = HeldStart(fail="no permission"), HeldStart()
    refusing.go.set()
    second.go.set()
    wrapper = deferred(refusing, second)
    sampler = CounterSampler(wrapper, second.energy_mj, second.process_pids)
    sampler.start()
    try:
        wait_until(lambda: not wrapper.starting)
    finally:
        sampler.stop()
    assert wrapper.source is second and wrapper.label == "source 1"
    assert wrapper.reasons == ["source 0: no permission"]
    assert not sampler.error


def test_when_none_starts_the_windows_say_why_and_energy_goes_on() -> None:
    refusing = HeldStart(fail="no permission")
    refusing.go.set()
    sampler = CounterSampler(deferred(refusing), refusing.energy_mj, refusing.process_pids)
    sampler.start()
    capture = CounterCapture(sampler)
    try:
        wait_until(lambda: bool(sampler.error))
        capture.begin("t")
        busy_wait(0.005)
        capture.end()
        got = capture.flush()["t"]
    finally:
        sampler.stop()
    # as with no source at all (NVML only): no figures, no note; the summary's fallback line says why
    assert got.values["sm_pct"] is None and got.note == "" and got.source == "nvml_utilization"
    assert "no source started (source 0: no permission)" in sampler.error
    assert sampler.source.failed and sampler.source.reasons == ["source 0: no permission"]
    assert sampler.cost().energy_reads >= 1 and not refusing.stopped  # never started: nothing to release


def test_the_start_up_is_left_out_of_the_threads_cost() -> None:
    source = HeldStart(cpu_s=0.3)
    source.go.set()
    wrapper = deferred(source)
    sampler = CounterSampler(wrapper, source.energy_mj, source.process_pids)
    sampler.start()
    try:
        wait_until(lambda: not wrapper.starting)
        wait_until(lambda: sampler.cost().polls >= 3)
    finally:
        sampler.stop()
    cost = sampler.cost()
    assert wrapper.startup_cpu_s >= 0.3
    assert cost.thread_startup_s is not None and cost.thread_startup_s >= 0.3
    assert cost.thread_cpu_s < 0.3 and cost.poll_cpu_s < 0.3
    assert cost.startup_s < cost.thread_startup_s  # the caller's share: the thread started it


def test_stopped_before_the_thread_polled_nothing_starts() -> None:
    source = HeldStart()
    wrapper = deferred(source)
    sampler = CounterSampler(wrapper, source.energy_mj, source.process_pids)
    sampler.start()
    source.go.set()
    sampler.stop()
    assert not source.stopped or source.started  # whatever started was released
    assert not wrapper.starting


def test_the_summary_gives_both_start_ups() -> None:
    from pytest_gpuutil.report.counters_summary import cost_line

    process = {"counters": "CUPTI PM sampling every 5 ms on GH100 (SM)", "counters_startup_s": 0.012,
               "counters_cost": {"thread_cpu_s": 0.2, "flush_s": 0.0, "thread_startup_s": 0.41}}
    assert cost_line([process], 10.0).startswith(
        "hardware counters start-up 0.012 s (and 0.410 s on their own thread while the tests ran), not charged to any test; "
        "their thread used 0.200 s of CPU (2.0% of the 10.00 s the tests took)")
    process["counters_cost"].pop("thread_startup_s")
    assert cost_line([process], 10.0).startswith("hardware counters start-up 0.012 s, not charged to any test; ")


def test_wait_started_waits_for_the_thread_to_start_the_source() -> None:
    source = HeldStart()
    sampler = CounterSampler(deferred(source), source.energy_mj, source.process_pids)
    sampler.start()
    capture = CounterCapture(sampler)
    try:
        assert capture.wait_started(timeout_s=0.05) is False  # held: still starting
        source.go.set()
        assert capture.wait_started(timeout_s=PATIENT_S) is True
        assert sampler.source.started_ns > 0
        capture.begin("after")  # opened after the start: not cut, no note
        busy_wait(0.02)
        capture.end()
        assert capture.flush()["after"].note == ""
    finally:
        sampler.stop()
