"""GPU memory figures: sizes, the replay of the allocator's history, and the meter's arithmetic.

The meter is checked against a stand-in that answers the allocator calls it makes with
scripted counters (there is no CUDA here); tests/capture/test_memory_gpu.py runs it for real.
"""
from __future__ import annotations

import pytest

from pytest_gpuutil.capture.memory import (
    MIB,
    MemoryMeter,
    failed_allocations,
    format_size,
    largest_at_peak,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 GiB", 2 << 30), ("2GiB", 2 << 30), ("1.5 GB", 3 << 29), ("256 MB", 256 << 20), ("256 MiB", 256 << 20),
        ("512 KB", 512 << 10), ("4 KiB", 4096), ("0 B", 0), ("100", 100), ("1 b", 1), ("3 gib", 3 << 30),
        (1024, 1024), (0.5, 0),
    ],
)
def test_sizes(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "2 parsecs", "-1 GiB", "lots", True, "inf B"])
def test_bad_sizes(text) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_sizes_read_back() -> None:
    assert [format_size(n) for n in (512, 1536, 256 * MIB, 3 << 30)] == ["512 B", "1.5 KiB", "256.0 MiB", "3.0 GiB"]


def frame(line: int) -> dict:
    return {"filename": "test_mem.py", "line": line, "name": "test_x"}


def test_the_replay_finds_what_was_live_at_the_peak() -> None:
    events = [
        {"action": "alloc", "addr": 1, "size": 100, "time_us": 5, "frames": [frame(1)]},  # before the call
        {"action": "alloc", "addr": 2, "size": 300, "time_us": 20, "frames": [frame(2), frame(90)]},
        {"action": "alloc", "addr": 3, "size": 500, "time_us": 21, "frames": [frame(3)]},
        {"action": "free_requested", "addr": 3, "size": 500, "time_us": 22},
        {"action": "free_completed", "addr": 3, "size": 500, "time_us": 23},
        {"action": "alloc", "addr": 4, "size": 50, "time_us": 24, "frames": [frame(4)]},
    ]
    got = largest_at_peak(events, since_us=10)
    assert [a.size for a in got] == [500, 300]  # the peak: 800 bytes, when 2 and 3 were live
    assert got[0].frames == ("test_mem.py:3 (test_x)",)
    assert got[1].frames == ("test_mem.py:2 (test_x)", "test_mem.py:90 (test_x)")
    assert largest_at_peak(events, since_us=10, top=1)[0].size == 500
    assert largest_at_peak([], since_us=0) == ()


def test_without_times_the_replay_starts_after_the_mark() -> None:
    mark = {"action": "alloc", "addr": 9, "size": 512,
            "frames": [{"filename": "/x/pytest_gpuutil/capture/memory.py", "line": 1, "name": "_mark_history"}]}
    events = [
        {"action": "alloc", "addr": 1, "size": 1000, "frames": [frame(1)]},  # an earlier test's peak
        {"action": "free_requested", "addr": 1, "size": 1000},
        mark,
        {"action": "free_requested", "addr": 9, "size": 512},
        {"action": "alloc", "addr": 2, "size": 300, "frames": [frame(2)]},
    ]
    assert [a.size for a in largest_at_peak(events, since_us=0)] == [300]


def test_allocations_that_ran_out_of_memory_are_named_with_their_stack() -> None:
    events = [
        {"action": "oom", "addr": 7, "size": 4096, "time_us": 5, "frames": [frame(1)]},  # an earlier test's
        {"action": "alloc", "addr": 2, "size": 300, "time_us": 20, "frames": [frame(2)]},
        {"action": "oom", "addr": 1 << 30, "size": 1 << 40, "time_us": 21, "frames": [frame(3), frame(90)]},
    ]
    (got,) = failed_allocations(events, since_us=10)
    assert got.size == 1 << 40
    assert got.frames == ("test_mem.py:3 (test_x)", "test_mem.py:90 (test_x)")
    assert failed_allocations(events[:2], since_us=10) == ()


class Allocator:
    """Scripted caching-allocator counters for one device, as torch._C._cuda_memoryStats reports them
    (a Stat's current, peak, allocated and freed, as c10's CachingDeviceAllocator keeps them)."""

    def __init__(self) -> None:
        self.current = self.peak = self.reserved = self.peak_reserved = self.retries = self.ooms = 0
        self.allocated = self.freed = 0
        self.initialized = True
        self.reads = 0

    def stats(self, device: int) -> dict:
        self.reads += 1
        return {"allocated_bytes": {"all": {"current": self.current, "peak": self.peak, "allocated": self.allocated,
                                            "freed": self.freed}},
                "reserved_bytes": {"all": {"current": self.reserved, "peak": self.peak_reserved}},
                "num_alloc_retries": self.retries, "num_ooms": self.ooms}

    def reset(self, device: int) -> None:
        self.peak, self.peak_reserved = self.current, self.reserved

    def reset_accumulated(self, device: int) -> None:
        self.allocated = self.freed = self.retries = self.ooms = 0

    def allocate(self, n: int) -> None:
        self.current += n
        if n > 0:
            self.allocated += n
        else:
            self.freed -= n
        self.reserved = max(self.reserved, self.current)
        self.peak, self.peak_reserved = max(self.peak, self.current), max(self.peak_reserved, self.reserved)


def stand_in(allocator: Allocator, accumulated_reset: bool = True):
    class C:
        _cuda_memoryStats = staticmethod(allocator.stats)
        _cuda_resetPeakMemoryStats = staticmethod(allocator.reset)

    if accumulated_reset:
        C._cuda_resetAccumulatedMemoryStats = staticmethod(allocator.reset_accumulated)

    class Cuda:
        @staticmethod
        def device_count() -> int:
            return 1

        @staticmethod
        def is_initialized() -> bool:
            return allocator.initialized

    class Torch:
        _C = C
        cuda = Cuda

    return Torch


@pytest.mark.parametrize("accumulated_reset", [True, False], ids=["one_read", "read_at_both_ends"])
def test_peaks_reset_at_the_start_and_leaks_are_what_stayed(accumulated_reset: bool) -> None:
    allocator = Allocator()
    allocator.allocate(1000 * MIB)  # an earlier test's leftovers
    allocator.allocate(-1000 * MIB)
    allocator.allocate(64 * MIB)
    allocator.retries, allocator.ooms = 3, 1  # an earlier test's
    meter = MemoryMeter(stand_in(allocator, accumulated_reset))
    start = meter.begin()
    allocator.allocate(1024 * MIB)
    allocator.allocate(-1024 * MIB)
    allocator.allocate(256 * MIB)  # kept alive by the test
    allocator.allocate(-64 * MIB)  # the earlier test's 64 MiB freed during this call
    allocator.retries += 1
    (device,) = meter.end(start)
    assert device.device == "0"
    assert device.peak_alloc == (64 + 1024) * MIB  # not the 1000 MiB from before the call
    assert device.leaked == (256 - 64) * MIB
    assert device.allocated_end == 256 * MIB
    assert (device.alloc_retries, device.ooms) == (1, 0)
    assert allocator.reads == (1 if accumulated_reset else 2)  # the dear call: once a call where it can be


def test_an_allocator_that_refuses_the_accumulated_reset_is_read_at_both_ends() -> None:
    allocator = Allocator()
    allocator.allocate(64 * MIB)
    torch = stand_in(allocator)

    def refuse(device: int) -> None:
        raise RuntimeError("not supported by this allocator")

    torch._C._cuda_resetAccumulatedMemoryStats = staticmethod(refuse)
    meter = MemoryMeter(torch)
    for kept in (32, 16):
        start = meter.begin()
        allocator.allocate(kept * MIB)
        (device,) = meter.end(start)
        assert device.leaked == kept * MIB
    assert allocator.reads == 4


def test_no_cuda_yet_means_no_devices() -> None:
    allocator = Allocator()
    allocator.initialized = False
    meter = MemoryMeter(stand_in(allocator))
    start = meter.begin()
    assert meter.end(start) == ()
    assert meter.where_memory_went(start) == ((), ())  # no history asked for


def test_a_call_keeps_its_read_and_its_figures_come_when_asked() -> None:
    """Inside the test only the reset and the read; the call's TestMemory is made when a record or a
    limit asks (once: the same object to both), with the figures meter.end gives."""
    from pytest_gpuutil.measurement.memory_reads import MemoryReads
    from pytest_gpuutil.measurement.part import Setup

    allocator = Allocator()
    allocator.allocate(64 * MIB)
    reads = MemoryReads(on=True, history=False)
    reads.start(Setup(stand_in(allocator), True, None))
    reads.begin("t")
    allocator.allocate(1024 * MIB)
    allocator.allocate(-1024 * MIB)
    allocator.allocate(256 * MIB)
    reads.end("t")
    assert allocator.reads == 1 and "t" in reads.memory and len(reads.memory) == 1
    memory = reads.memory.get("t")
    assert memory is reads.memory.get("t")  # made once: a limit's record and the flush's see one object
    (device,) = memory.devices
    assert (device.device, device.peak_alloc, device.leaked, device.allocated_end) == (
        "0", (64 + 1024) * MIB, 256 * MIB, (64 + 256) * MIB)
    assert memory.cost_ms >= 0
    assert reads.memory.pop("t") is memory and reads.memory.get("t") is None and len(reads.memory) == 0
    reads.end("t")  # a call ended twice (the session's end): nothing more
    reads.begin("u")
    reads.end("")  # the session's end closing no call of its own: the open call stays open
    reads.end("u")
    assert reads.memory.pop("u").devices[0].leaked == 0


def test_a_calls_memory_objects_are_what_their_init_makes() -> None:
    """figures_of's DeviceMemory and the call's TestMemory are made without the frozen dataclasses'
    __init__ (one object.__setattr__ a field): the same objects for everything that reads them."""
    import dataclasses
    import pickle

    from pytest_gpuutil.capture.memory import DeviceMemory, _Start, figures_of
    from pytest_gpuutil.measurement.call_profile import TestMemory
    from pytest_gpuutil.measurement.memory_reads import _memory

    start = _Start({1: 5 * MIB}, {1: 1}, {1: 0}, 0.0, frozenset([0]))
    reads = ((0, (MIB, 4 * MIB, 20 * MIB, 20 * MIB, 2, 1, -MIB)), (1, (6 * MIB, 7 * MIB, 8 * MIB, 9 * MIB, 3, 0, 0)),
             (2, (0, 0, 0, 0, 0, 0, 0)))  # device 2: never used, left out
    memory = _memory((start, reads, 0.25))
    want = TestMemory((DeviceMemory("0", 4 * MIB, 20 * MIB, -MIB, 2, 1, MIB, 20 * MIB),
                       DeviceMemory("1", 7 * MIB, 9 * MIB, MIB, 2, 0, 6 * MIB, 8 * MIB)), start, 250.0)
    assert memory == want and repr(memory) == repr(want) and hash(memory.devices) == hash(want.devices)
    assert figures_of(start, reads) == want.devices
    for made, plain in ((memory, want), *zip(memory.devices, want.devices)):
        assert type(made) is type(plain) and list(vars(made).items()) == list(vars(plain).items())
        assert pickle.loads(pickle.dumps(made)) == plain and dataclasses.asdict(made) == dataclasses.asdict(plain)
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.start = None  # type: ignore[misc]
    assert dataclasses.replace(memory.devices[0], ooms=0) == dataclasses.replace(want.devices[0], ooms=0)
