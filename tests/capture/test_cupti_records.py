"""CUPTI activity buffers parsed into columns, on buffers laid out as CUPTI 13.0 writes them.

The layouts (offsets of kind, start, end, device, stream, name / copy kinds / memory kind) are
those of cupti_activity.h: CUpti_ActivityKernel10 (216 bytes), Memcpy6 (96), MemcpyPtoP4 (96),
Memset4 (88), Synchronization2 (56). The real thing runs in tests/capture/test_cupti_gpu.py on a GPU.
"""
from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest

from pytest_gpuutil.capture import cupti_records
from pytest_gpuutil.capture.cupti_records import (
    KIND_CONCURRENT_KERNEL,
    KIND_MEMCPY,
    KIND_MEMCPY2,
    KIND_MEMSET,
    KIND_SYNCHRONIZATION,
    RUN_LOOKAHEAD,
    CuptiError,
    label_name,
    parse_all,
    parse_buffer,
    sync_columns,
    to_columns,
)

SIZES = {KIND_CONCURRENT_KERNEL: 216, KIND_MEMCPY: 96, KIND_MEMCPY2: 96, KIND_MEMSET: 88, KIND_SYNCHRONIZATION: 56, 17: 40}


def kernel(start: int, end: int, device: int, stream: int, name_ptr: int) -> bytes:
    record = bytearray(216)
    struct.pack_into("<I", record, 0, KIND_CONCURRENT_KERNEL)
    struct.pack_into("<QQ", record, 16, start, end)
    struct.pack_into("<III", record, 40, device, 1, stream)
    struct.pack_into("<Q", record, 104, name_ptr)
    return bytes(record)


def memcpy(start: int, end: int, copy_kind: int, src: int, dst: int, device: int = 0, stream: int = 7,
           kind: int = KIND_MEMCPY) -> bytes:
    record = bytearray(96)
    struct.pack_into("<IBBBB", record, 0, kind, copy_kind, src, dst, 0)
    struct.pack_into("<QQQ", record, 8, 1 << 20, start, end)
    struct.pack_into("<III", record, 32, device, 1, stream)
    return bytes(record)


def memset(start: int, end: int, memory_kind: int = 3) -> bytes:
    record = bytearray(88)
    struct.pack_into("<II", record, 0, KIND_MEMSET, 0)
    struct.pack_into("<QQQ", record, 8, 4096, start, end)
    struct.pack_into("<III", record, 32, 0, 1, 7)
    struct.pack_into("<H", record, 50, memory_kind)
    return bytes(record)


def sync(start: int, end: int, sync_type: int, stream: int = 7) -> bytes:
    record = bytearray(56)
    struct.pack_into("<IIQQ", record, 0, KIND_SYNCHRONIZATION, sync_type, start, end)
    struct.pack_into("<IIII", record, 24, 99, 1, stream, 0)
    return bytes(record)


def other(kind: int = 17) -> bytes:
    return struct.pack("<I", kind) + bytes(36)


def buffer_of(*records: bytes) -> tuple[np.ndarray, int]:
    data = b"".join(records)
    buf = np.zeros(len(data) + 64, dtype=np.uint8)  # room after the valid bytes, as in a real buffer
    buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf, len(data)


def size_of(kind: int, offset: int) -> int:
    return SIZES[kind]


def test_kernels_memcpy_and_memset_become_columns() -> None:
    buf, valid = buffer_of(
        kernel(1_000, 1_500, 0, 7, 0x7F00_0000_1000),
        memcpy(2_000, 2_300, 2, 3, 1),  # DtoH, device -> pageable
        other(),  # a kind this source does not read: skipped
        kernel(3_000, 3_040, 1, 9, 0x7F00_0000_2000),
        memset(4_000, 4_010),
        memcpy(5_000, 5_100, 10, 3, 3, kind=KIND_MEMCPY2),
    )
    records = parse_buffer(buf, valid, size_of)
    assert records.kinds.tolist() == [10, 1, 10, 2, 22]
    assert records.starts.tolist() == [1_000, 2_000, 3_000, 4_000, 5_000]
    assert records.ends.tolist() == [1_500, 2_300, 3_040, 4_010, 5_100]
    assert records.devices.tolist() == [0, 0, 1, 0, 0]
    assert records.streams.tolist() == [7, 7, 9, 7, 7]
    names = {0x7F00_0000_1000: "_Z6gemm_kv", 0x7F00_0000_2000: "nvjet_sm90_tst"}
    cols = to_columns(records, names.__getitem__)
    assert list(cols.names) == ["_Z6gemm_kv", "Memcpy DtoH (Device -> Pageable)", "nvjet_sm90_tst",
                                "Memset (Device)", "Memcpy PtoP (Device -> Device)"]
    assert list(cols.kinds) == ["kernel", "gpu_memcpy", "kernel", "gpu_memset", "gpu_memcpy"]
    assert cols.names.codes is cols.kinds.codes  # coded together: the analysis classifies each pair once
    assert cols.durs_ns.tolist() == [500, 300, 40, 10, 100]


def test_the_hosts_waits_come_apart_from_the_gpu_work() -> None:
    buf, valid = buffer_of(
        kernel(1_000, 1_500, 0, 7, 0x7F00_0000_1000),
        sync(1_100, 1_520, 3),  # stream synchronize: the host waited for the kernel
        sync(1_600, 1_610, 2),  # stream wait event: the GPU waits, not the host: not kept
        memcpy(2_000, 2_300, 2, 3, 1),
        sync(2_050, 2_320, 4, stream=0xFFFF_FFFF),  # context synchronize
        sync(2_400, 2_405, 1),  # event synchronize
    )
    records, syncs = parse_all(buf, valid, size_of)
    assert records.kinds.tolist() == [10, 1]  # the GPU work alone, as parse_buffer gives it
    assert len(parse_buffer(buf, valid, size_of)) == 2
    assert syncs.types.tolist() == [3, 4, 1]
    columns = sync_columns(syncs)
    assert list(columns.names) == ["Stream Sync", "Context Sync", "Event Sync"]  # Kineto's cuda_sync names
    assert columns.starts_ns.tolist() == [1_100, 2_050, 2_400]
    assert columns.durs_ns.tolist() == [420, 270, 5]


def test_no_waits_is_empty_columns() -> None:
    buf, valid = buffer_of(kernel(1_000, 1_500, 0, 7, 8))
    records, syncs = parse_all(buf, valid, size_of)
    assert len(records) == 1 and len(syncs) == 0 and len(sync_columns(syncs)) == 0


def test_a_kernels_name_is_looked_up_once() -> None:
    buf, valid = buffer_of(*(kernel(i * 10, i * 10 + 5, 0, 7, 0x7F00_0000_1000) for i in range(50)))
    asked = []

    def name(pointer: int) -> str:
        asked.append(pointer)
        return "k"

    cols = to_columns(parse_buffer(buf, valid, size_of), name)
    assert len(cols) == 50 and asked == [0x7F00_0000_1000]


def test_sizes_are_asked_once_per_kind_per_buffer() -> None:
    buf, valid = buffer_of(kernel(0, 1, 0, 7, 8), kernel(2, 3, 0, 7, 8), memset(4, 5), memset(6, 7))
    asked = []

    def counting(kind: int, offset: int) -> int:
        asked.append((kind, offset))
        return SIZES[kind]

    assert len(parse_buffer(buf, valid, counting)) == 4
    assert asked == [(KIND_CONCURRENT_KERNEL, 0), (KIND_MEMSET, 432)]


def test_a_buffer_that_ends_inside_a_record_is_an_error() -> None:
    buf, valid = buffer_of(kernel(0, 1, 0, 7, 8), memset(4, 5))
    with pytest.raises(CuptiError, match="ends inside a record"):
        parse_buffer(buf, valid - 8, size_of)
    with pytest.raises(CuptiError, match="has size 12"):
        parse_buffer(buf, valid, lambda kind, offset: 12)


def test_long_runs_of_one_kind_are_walked_like_any_other_records() -> None:
    """A launch loop's buffer: runs of kernels (found at once past RUN_LOOKAHEAD) between other kinds."""
    records = [memset(0, 1), other(), *(kernel(10 + i, 11 + i, 0, 7, 8) for i in range(RUN_LOOKAHEAD + 3)),
               memcpy(900, 901, 2, 3, 1), sync(902, 903, 3),
               *(kernel(1_000 + i, 1_001 + i, 0, 7, 8) for i in range(500)), memset(5_000, 5_001),
               *(kernel(6_000 + i, 6_001 + i, 0, 7, 8) for i in range(RUN_LOOKAHEAD - 1))]
    buf, valid = buffer_of(*records)
    got, syncs = parse_all(buf, valid, size_of)
    expected_starts = [0, *(10 + i for i in range(RUN_LOOKAHEAD + 3)), 900, *(1_000 + i for i in range(500)), 5_000,
                       *(6_000 + i for i in range(RUN_LOOKAHEAD - 1))]
    assert got.starts.tolist() == expected_starts
    assert got.kinds.tolist() == [KIND_MEMSET, *[KIND_CONCURRENT_KERNEL] * (RUN_LOOKAHEAD + 3), KIND_MEMCPY,
                                  *[KIND_CONCURRENT_KERNEL] * 500, KIND_MEMSET, *[KIND_CONCURRENT_KERNEL] * (RUN_LOOKAHEAD - 1)]
    assert syncs.starts.tolist() == [902]
    with pytest.raises(CuptiError, match="ends inside a record"):  # a run whose last record is cut short
        parse_buffer(*buffer_of(*(kernel(i, i + 1, 0, 7, 8) for i in range(RUN_LOOKAHEAD + 2)))[:1],
                     valid=216 * (RUN_LOOKAHEAD + 2) - 8, size_of=size_of)


def test_an_empty_buffer_is_no_records() -> None:
    assert len(parse_buffer(np.zeros(64, dtype=np.uint8), 0, size_of)) == 0
    assert len(to_columns(parse_buffer(np.zeros(64, dtype=np.uint8), 0, size_of), str)) == 0


@pytest.mark.parametrize(
    ("kind", "label", "expected"),
    [
        (KIND_MEMCPY, (1 << 16) | (2 << 8) | 3, "Memcpy HtoD (Pinned -> Device)"),
        (KIND_MEMCPY, (8 << 16) | (3 << 8) | 3, "Memcpy DtoD (Device -> Device)"),
        (KIND_MEMCPY, (99 << 16) | (42 << 8) | 5, "Memcpy <unknown> (Unrecognized -> Managed)"),
        (KIND_MEMSET, 3, "Memset (Device)"),
        (KIND_MEMSET, 5, "Memset (Managed)"),
    ],
)
def test_memcpy_and_memset_are_named_as_kineto_names_them(kind: int, label: int, expected: str) -> None:
    assert label_name(kind, label, str)[0] == expected


# -- the C pass (capture/_waits.c parse) against the numpy reader -------------------------------------
needs_c = pytest.mark.skipif(cupti_records._C_RECORDS is None, reason="capture/_waits.c is not built here")


def both_ways(monkeypatch: pytest.MonkeyPatch, read: Any) -> tuple[Any, Any]:
    """``read()`` with the C pass, then with the numpy reader alone."""
    with_c = read()
    with monkeypatch.context() as patched:
        patched.setattr(cupti_records, "_C_RECORDS", None)
        return with_c, read()


def same_records(a: Any, b: Any) -> None:
    for name in ("kinds", "starts", "ends", "devices", "streams", "labels", "types"):
        if hasattr(a, name):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and x.tolist() == y.tolist(), name


def random_records(rng: random.Random, n: int) -> list[bytes]:
    """Records of every kind, in runs (a launch loop) and mixed (a small test), times out of order too."""
    records: list[bytes] = []
    pointers = [0x7F00_0000_1000 + 0x40 * i for i in range(rng.randint(1, 12))]
    while len(records) < n:
        t = rng.randrange(1 << 40)
        pick = rng.random()
        if pick < 0.15:  # a run of one kernel
            records.extend(kernel(t + i, t + i + rng.randrange(100), rng.randrange(2), rng.randrange(20), pointers[0])
                           for i in range(rng.randint(1, 40)))
        elif pick < 0.5:
            records.append(kernel(t, t + rng.randrange(10_000), rng.randrange(3), rng.randrange(1 << 32),
                                  rng.choice(pointers)))
        elif pick < 0.65:
            records.append(memcpy(t, t + rng.randrange(1_000), rng.randrange(12), rng.randrange(9), rng.randrange(9),
                                  device=rng.randrange(2), stream=rng.randrange(50),
                                  kind=rng.choice((KIND_MEMCPY, KIND_MEMCPY2))))
        elif pick < 0.8:
            records.append(memset(t, t + rng.randrange(1_000), rng.randrange(9)))
        elif pick < 0.95:
            records.append(sync(t, t + rng.randrange(1_000), rng.randrange(6)))
        else:
            records.append(other(rng.choice((17, 5, 1023))))
    return records


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_the_c_pass_gives_the_numpy_readers_columns(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    sizes = {**SIZES, 5: 40, 1023: 40, 4000: 40}
    records = random_records(rng, rng.choice((1, 5, 60, 700)))
    if seed % 10 == 9:  # a kind past the C pass's table: the numpy reader reads the buffer
        records.insert(rng.randrange(len(records)), other(4000))
    buf, valid = buffer_of(*records)
    asked: list[list[tuple[int, int]]] = [[], []]
    calls = iter(asked * 1)

    def reading() -> Any:
        seen = next(calls)

        def counting(kind: int, offset: int) -> int:
            seen.append((kind, offset))
            return sizes[kind]

        return parse_all(buf, valid, counting)

    (c_gpu, c_sync), (py_gpu, py_sync) = both_ways(monkeypatch, reading)
    same_records(c_gpu, py_gpu)
    same_records(c_sync, py_sync)
    if seed % 10 == 9:  # the C pass asked until it met the kind it leaves to the numpy reader, which asks again
        assert asked[0][len(asked[0]) - len(asked[1]):] == asked[1]
    else:  # each kind's size asked once, at its first record, both ways
        assert asked[0] == asked[1]
    names = {p: f"kernel_{p:x}" for p in range(0x7F00_0000_1000, 0x7F00_0000_1000 + 0x40 * 12, 0x40)}
    c_columns = to_columns(c_gpu, names.__getitem__)
    with monkeypatch.context() as patched:
        patched.setattr(cupti_records, "_C_RECORDS", None)
        py_columns = to_columns(py_gpu, names.__getitem__)
    assert len(c_columns) == len(py_columns)
    if len(py_columns):
        assert c_columns.names.codes.tolist() == py_columns.names.codes.tolist()
        assert list(c_columns.names.values) == list(py_columns.names.values)
        assert list(c_columns.kinds.values) == list(py_columns.kinds.values)
    for name in ("devices", "streams", "starts_ns", "durs_ns"):
        a, b = getattr(c_columns, name), getattr(py_columns, name)
        assert getattr(a, "dtype", None) == getattr(b, "dtype", None) and list(a) == list(b), name


@needs_c
def test_many_distinct_names_are_coded_as_numpy_codes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """More names than the C table starts with (it grows), and a key in a run."""
    rng = random.Random(7)
    keys = np.asarray([rng.randrange(1 << 60) for _ in range(3_000)] * 2 + [5] * 50, dtype=np.uint64)
    (c_distinct, c_codes), (py_distinct, py_codes) = both_ways(monkeypatch, lambda: cupti_records._sorted_codes(keys))
    assert c_distinct.tolist() == py_distinct.tolist() and c_codes.tolist() == py_codes.ravel().tolist()


@needs_c
@pytest.mark.parametrize("cut", [8, 16, 40, 100, 200])
def test_a_malformed_buffer_raises_what_the_numpy_reader_raises(cut: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record cut short at the end, a size of CUPTI's that is not a record's: the C pass leaves them
    to the numpy reader, whose error comes either way."""
    buf, valid = buffer_of(memset(0, 1), kernel(0, 1, 0, 7, 8), sync(2, 3, 3))

    def errors(read: Any) -> tuple[Any, Any]:
        outcomes = []
        for c_part in (cupti_records._C_RECORDS, None):
            with monkeypatch.context() as patched:
                patched.setattr(cupti_records, "_C_RECORDS", c_part)
                try:
                    read()
                    outcomes.append(None)
                except Exception as exc:  # noqa: BLE001 - compared below
                    outcomes.append((type(exc), str(exc)))
        return outcomes[0], outcomes[1]

    with_c, numpy_only = errors(lambda: parse_all(buf, valid - cut, size_of))
    assert with_c == numpy_only and numpy_only is not None
    last = valid - cut - 216 - 88  # the kernel's size: what CUPTI answers for a buffer's last record
    with_c, numpy_only = errors(lambda: parse_all(buf, valid - cut, lambda kind, offset: SIZES[kind] if kind != 38 else last))
    assert with_c == numpy_only
