"""The cost line's estimate of what measuring costs inside the tests where no timer sees it
(measurement/unseen_cost.py): the calibration's arithmetic on a scripted clock, and the totals."""
from __future__ import annotations

from types import SimpleNamespace

from pytest_gpuutil.measurement import unseen_cost
from pytest_gpuutil.measurement.unseen_cost import RecordCost, UnseenCost, calibrate_records
from pytest_gpuutil.rundoc.totals import totals


class ScriptedHost:
    """A launch costs 5 µs, 7 with records on; a synchronize 10 µs: the clock moves only by them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.records = True
        self.launches = {True: 0, False: 0}

    def clock(self) -> float:
        return self.now

    def launch(self) -> None:
        self.launches[self.records] += 1
        self.now += 7e-6 if self.records else 5e-6

    def synchronize(self) -> None:
        self.now += 10e-6

    def off(self) -> None:
        self.records = False

    def on(self) -> None:
        self.records = True


def test_the_calibration_finds_the_cost_of_one_record() -> None:
    host = ScriptedHost()
    got = calibrate_records(host.launch, host.synchronize, host.off, host.on, rounds=3, bodies=10, launches=4,
                            clock=host.clock)
    assert abs(got.us_per_record - 2.0) < 1e-6
    assert abs(got.on_us - (4 * 7 + 10)) < 1e-6 and abs(got.off_us - (4 * 5 + 10)) < 1e-6
    assert host.records  # left on
    assert host.launches[False] == 3 * 10 * 4  # three blocks off; the warm-up and three on
    assert host.launches[True] == 4 * 10 * 4


def profile(events: int) -> SimpleNamespace:
    return SimpleNamespace(stats=SimpleNamespace(event_count=events))


def test_records_are_charged_only_once_calibrated_and_the_sampler_as_it_ran() -> None:
    unseen = UnseenCost()
    unseen.count({"a": profile(3), "b": profile(5), "c": SimpleNamespace(stats=None)})
    assert unseen.records == 8
    assert unseen.seconds(sampler_cpu_s=0.25) == 0.25
    unseen.record_cost = RecordCost(2.0, 38.0, 30.0, 4, 0.004)
    assert abs(unseen.seconds(0.25) - (0.25 + 8 * 2e-6)) < 1e-12
    info = unseen.info(0.25)
    assert info["unseen"]["records"] == 8 and info["unseen"]["record_cost"]["us_per_record"] == 2.0


def test_no_calibration_before_enough_records_nor_without_cupti() -> None:
    unseen = UnseenCost()
    torch = SimpleNamespace(_C=SimpleNamespace(_cuda_sleep=lambda c: None, _cuda_synchronize=lambda: None),
                            cuda=SimpleNamespace(is_initialized=lambda: True))
    unseen.calibrate_if_due(torch, SimpleNamespace())  # too few records: not even looked at
    assert unseen.note == "" and unseen.record_cost is None
    unseen.records = unseen_cost.CALIBRATE_AFTER_RECORDS
    unseen.calibrate_if_due(torch, SimpleNamespace())  # a source that cannot pause its records
    assert "not estimated" in unseen.note and unseen.record_cost is None


def test_the_totals_add_the_estimate_to_the_cost_and_to_the_tests_share() -> None:
    record = SimpleNamespace(measure_ms=100.0)
    figures = {"measure_in_tests_ms": 100.0, "tests": 1}
    got = totals([record], {"main": {"own_s": 0.3, "unseen_s": 0.05}}, test_s=2.0, finish_s=0.1, figures=figures)
    assert abs(got["measure_ms"] - 350.0) < 1e-9
    assert abs(got["measure_in_tests_ms"] - 150.0) < 1e-9 and abs(got["measure_unseen_ms"] - 50.0) < 1e-9
    plain = totals([record], {"main": {"own_s": 0.3}}, test_s=2.0, finish_s=0.1, figures=dict(figures))
    assert abs(plain["measure_ms"] - 300.0) < 1e-9 and plain["measure_unseen_ms"] == 0.0


def test_a_flush_calibrates_once_on_cupti_and_its_kernels_are_no_test_s(tmp_path, monkeypatch) -> None:
    """On the fake libcupti (tests/children/fake_cupti.c) with a CPU torch dressed as CUDA: the flush
    after enough records calibrates once, outside the windows, and each window keeps exactly its own."""
    import ctypes
    import os
    import shutil
    import subprocess
    from pathlib import Path

    import pytest

    torch = pytest.importorskip("torch")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the fake libcupti")
    target = tmp_path / "libcupti.so.unseen"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target),
                    str(Path(__file__).resolve().parents[1] / "children" / "fake_cupti.c"), "-lpthread"],
                   check=True, capture_output=True)
    fake = ctypes.CDLL(str(target), mode=os.RTLD_GLOBAL)
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.flush_policy import FlushPolicy
    from pytest_gpuutil.measurement import Measurement
    from pytest_gpuutil.per_test import TestResults

    stats = {"allocated_bytes": {"all": {"current": 0, "peak": 0, "allocated": 0, "freed": 0}},
             "reserved_bytes": {"all": {"current": 0, "peak": 0}}, "num_alloc_retries": 0, "num_ooms": 0}
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", lambda device: stats, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_resetPeakMemoryStats", lambda device: None, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_resetAccumulatedMemoryStats", lambda device: None, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: None, raising=False)
    spins = []
    monkeypatch.setattr(torch._C, "_cuda_sleep", lambda cycles: spins.append(fake.fake_work(0, b"spin", 1000, 0, 7)),
                        raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(unseen_cost, "CALIBRATE_AFTER_RECORDS", 6)
    source = CuptiSource(library_path=str(target), host_syncs=False)
    measurement = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(),
                              children=False)
    measurement.prepare(torch, True, source)
    try:
        for flush in range(3):
            for i in range(4):
                nodeid = f"test_{flush}_{i}"
                measurement.begin(nodeid, TestResults(nodeid))
                fake.fake_work(0, b"own_kernel", 20_000, 0, 7)
                fake.fake_work(0, b"own_kernel", 20_000, 0, 7)
                measurement.end(nodeid, TestResults(nodeid))
            profiles = measurement.flush()
            assert [p.stats.kernel_count for p in profiles.values()] == [2, 2, 2, 2]
            if flush == 0:
                assert not spins  # 8 records counted only at this flush: not yet
    finally:
        measurement.close()
    info = measurement.info()
    assert info["unseen"]["records"] == 24
    assert len(spins) == (1 + unseen_cost.ROUNDS * 2) * unseen_cost.BODIES * unseen_cost.LAUNCHES  # once
    assert info["unseen"]["record_cost"] is not None and info["unseen_s"] >= 0.0
