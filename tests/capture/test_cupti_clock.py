"""CUPTI's clock at the window edges: read through the C module (capture/_waits.c ``now``), the same
call and value as the ctypes read it replaces, on a fake libcupti (tests/children/fake_cupti.c)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pytest_gpuutil.capture import host_waits
from pytest_gpuutil.capture.cupti import CuptiSource

ROOT = Path(__file__).resolve().parents[2]
waits = host_waits.load_module()
needs_module = pytest.mark.skipif(waits is None or not hasattr(waits, "now"),
                                  reason="the package was installed without its C module")
CLOCK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the fake libcupti")
    target = tmp_path_factory.mktemp("fake_cupti_clock") / "libcupti.so.clock"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(ROOT / "tests/children/fake_cupti.c"),
                    "-lpthread"], check=True, capture_output=True)
    return ctypes.CDLL(str(target), mode=os.RTLD_GLOBAL)


@needs_module
def test_now_reads_the_clock_it_was_given_and_the_wall_clock_without_one():
    ticks = iter(range(5_000_000_000_000, 5_000_000_000_100, 7))

    def fake_timestamp(out):  # a clock no wall clock could be mistaken for
        out[0] = next(ticks)
        return 0

    clock = CLOCK(fake_timestamp)
    try:
        waits.set_now(ctypes.cast(clock, ctypes.c_void_p).value)
        assert [waits.now() for _ in range(3)] == [5_000_000_000_000, 5_000_000_000_007, 5_000_000_000_014]
    finally:
        waits.set_now(0)
    before = time.time_ns()
    got = waits.now()
    assert before <= got <= time.time_ns()  # CLOCK_REALTIME, CUPTI's default clock


@needs_module
def test_the_source_reads_cuptis_clock_through_the_c_module_once_started(fake_lib: ctypes.CDLL):
    source = CuptiSource(library_path=fake_lib._name, host_syncs=False)
    assert source._now_fast is None  # before start(): the wall clock, no CUPTI call
    source.start()
    try:
        assert source._now_fast is waits.now
        stamp = ctypes.c_uint64()
        before = time.time_ns()
        got = source.now()
        fake_lib.cuptiGetTimestamp(ctypes.byref(stamp))  # the ctypes read it replaces, just after
        assert before <= got <= stamp.value
    finally:
        source.stop()


def test_without_the_c_module_the_source_reads_the_clock_with_ctypes(fake_lib: ctypes.CDLL,
                                                                    monkeypatch: pytest.MonkeyPatch):
    import pytest_gpuutil.capture.cupti as cupti

    monkeypatch.setattr(cupti, "_c_clock", lambda lib: None)
    source = CuptiSource(library_path=fake_lib._name, host_syncs=False)
    source.start()
    try:
        before = time.time_ns()
        got = source.now()
        assert source._now_fast == source._ticks and before <= got <= time.time_ns()
    finally:
        source.stop()


def test_records_off_leaves_out_the_work_between_and_keeps_what_came_before(fake_lib: ctypes.CDLL):
    """The cost calibration's stretch without records (measurement/unseen_cost.py)."""
    source = CuptiSource(library_path=fake_lib._name, host_syncs=False)
    source.start()
    try:
        assert source.running
        fake_lib.fake_work(0, b"kept_before", 1000, 0, 7)
        source.records_off()
        fake_lib.fake_work(0, b"while_off", 1000, 0, 7)
        source.records_on()
        fake_lib.fake_work(0, b"kept_after", 1000, 0, 7)
        columns, dropped = source.drain()
    finally:
        source.stop()
    assert not source.running
    assert sorted(columns.names) == ["kept_after", "kept_before"]
