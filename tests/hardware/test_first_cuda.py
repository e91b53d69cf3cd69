"""The test that brings CUDA up gets hardware-counter figures over the rest of its call, with a note
that says so; a test that ran before CUDA was up gets a note instead of silently empty fields.
torch is a stand-in whose CUDA comes up when a test calls ``cuda.init()`` (torch's lazy
initialisation, queued calls first); the counters are the synthetic source of tests/helpers."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.measurement import Measurement
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent
from tests.helpers.counters import SyntheticCounters


class LazyCuda:
    """torch.cuda as far as the plugin uses it before and while CUDA comes up."""

    def __init__(self) -> None:
        self.up = False
        self.queued: list = []

    def is_initialized(self) -> bool:
        return self.up

    def _lazy_call(self, fn) -> None:
        fn() if self.up else self.queued.append(fn)

    def init(self) -> None:
        time.sleep(0.05)  # creating the context
        for fn in self.queued:  # torch runs them before it counts as initialised
            fn()
        self.up = True

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, index: int) -> SimpleNamespace:
        return SimpleNamespace(uuid="GPU-synthetic", name="synthetic")

    def synchronize(self, device=None) -> None:
        pass


class Source:
    name = "synthetic"
    ever_started = False

    def __init__(self) -> None:
        self.events: list = []
        self.on = False

    def start(self) -> None:
        self.on = True

    def stop(self) -> None:
        self.on = False

    def now(self) -> int:
        return time.time_ns()

    def pending_bytes(self) -> int:
        return 0

    def drain(self):
        events, self.events = self.events, []
        return GpuColumns.from_events(events), 0

    def run(self, ms: float) -> None:
        start = self.now()
        time.sleep(ms / 1000)
        if self.on:
            self.events.append(GpuEvent("k", "kernel", 0, 7, start, self.now() - start))


def call(m: Measurement, nodeid: str, body) -> None:
    results = SimpleNamespace(measurement=None)
    assert m.begin(nodeid, results) is None
    body()
    m.end(nodeid, results)


def test_the_test_that_brings_cuda_up_gets_counters_over_the_rest_of_its_call() -> None:
    torch = SimpleNamespace(cuda=LazyCuda(), _C=SimpleNamespace(), autograd=SimpleNamespace(profiler=SimpleNamespace()))
    counters, gpu = SyntheticCounters(period_ns=2_000_000), Source()
    counters.level(sm_pct=80.0, tensor_pct=40.0)
    m = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(), memory=False,
                    counters="auto", children=False)
    m.prepare(torch, True, gpu, counter_source=counters)
    assert m.counters is None  # nothing opened before CUDA is up (no CUDA initialised by the plugin)
    call(m, "before_cuda", lambda: time.sleep(0.01))

    def brings_cuda_up() -> None:
        torch.cuda.init()
        # the counters' thread starts them now: wait for that event, not for a stretch of time (on a
        # loaded machine the thread may start only after 150 ms of work, leaving the call uncovered)
        assert m.counters is not None and m.counters.wait_started(timeout_s=60)
        gpu.run(150)

    call(m, "first", brings_cuda_up)
    call(m, "second", lambda: gpu.run(150))
    profiles = m.close()
    first, second, before = profiles["first"].counters, profiles["second"].counters, profiles["before_cuda"].counters
    assert first.note.startswith("this test brought CUDA up: the hardware counters started ")
    assert first.note.endswith("ms into its call (CUDA's start-up, then theirs) and cover the rest of it")
    assert first.values["sm_pct"] == pytest.approx(second.values["sm_pct"], abs=5)  # the acceptance's 5 points
    assert second.note == "" and second.values["sm_pct"] == pytest.approx(80.0, abs=5)
    assert before.values == {} and before.note.startswith("no hardware counters: CUDA was not up in this process")
    assert before.record_fields()["sm_pct"] is None and before.record_fields()["counters_note"]
    # the activity window starts after the counters' start-up, as it does after CUDA's
    assert "(creating the CUDA context, starting the hardware counters) are not in the window" in profiles["first"].note
    assert profiles["first"].stats.busy_pct > 90



def test_counters_started_on_their_thread_cover_the_call_from_where_their_samples_begin() -> None:
    from pytest_gpuutil.hardware.deferred_start import DeferredStart

    torch = SimpleNamespace(cuda=LazyCuda(), _C=SimpleNamespace(), autograd=SimpleNamespace(profiler=SimpleNamespace()))
    counters, gpu = SyntheticCounters(period_ns=2_000_000), Source()
    counters.level(sm_pct=80.0, tensor_pct=40.0)
    m = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(), memory=False,
                    counters="auto", children=False)
    m.prepare(torch, True, gpu, counter_source=DeferredStart([("synthetic", lambda: counters)]))

    def brings_cuda_up() -> None:
        torch.cuda.init()
        # the counters' thread starts them now: wait for that event, not for a stretch of time (on a
        # loaded machine the thread may start only after 150 ms of work, leaving the call uncovered)
        assert m.counters is not None and m.counters.wait_started(timeout_s=60)
        gpu.run(150)

    call(m, "first", brings_cuda_up)
    call(m, "second", lambda: gpu.run(150))
    profiles = m.close()
    first, second = profiles["first"].counters, profiles["second"].counters
    assert first.note.startswith("this test brought CUDA up ")
    assert " ms into its call; the hardware counters started " in first.note
    assert first.note.endswith(" ms into it and cover the rest of it")
    assert first.values["sm_pct"] == pytest.approx(80.0, abs=5)
    assert second.note == "" and second.values["sm_pct"] == pytest.approx(80.0, abs=5)


def test_counters_off_leaves_every_test_without_a_counters_note() -> None:
    torch = SimpleNamespace(cuda=LazyCuda(), _C=SimpleNamespace(), autograd=SimpleNamespace(profiler=SimpleNamespace()))
    gpu = Source()
    m = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(), memory=False,
                    counters="off", children=False)
    m.prepare(torch, True, gpu)
    call(m, "before_cuda", lambda: time.sleep(0.01))
    call(m, "first", lambda: (torch.cuda.init(), gpu.run(20)))
    profiles = m.close()
    assert profiles["before_cuda"].counters is None and profiles["first"].counters is None
    assert torch.cuda.queued and len(torch.cuda.queued) == 1  # the activity capture's start only
