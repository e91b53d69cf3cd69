"""CUPTI's activity records read into columns: one walk of each buffer, the fields pulled out with numpy.

Record layouts: every CUPTI version keeps the same offsets for the fields read here and only
appends fields, so the size of each kind's record is learned from the library itself (the source
passes ``size_of``). Kernels, memcpy and memset become GPU work (named as Kineto names them, so
both event sources agree); synchronization records (kind 38) become the host's waits. Pure: no
ctypes, no CUPTI call; :mod:`pytest_gpuutil.capture.cupti` collects the buffers.

Where the package was built with its C part (``capture/_waits.c``'s ``parse`` and ``codes``), a buffer is read in one C
pass and the drain's names coded in one (no sort); the numpy reader gives the same columns where it
is not built, and answers for any buffer the C pass leaves to it (a malformed one: the errors are
the numpy reader's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, SyncColumns

try:  # the buffers read in C (capture/_waits.c, built at install where a C compiler is found)
    from pytest_gpuutil.capture import _waits as _C_RECORDS  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the same columns from the numpy reader
    _C_RECORDS = None
if not hasattr(_C_RECORDS, "parse"):  # a build of the module from before its reader
    _C_RECORDS = None

KIND_MEMCPY = 1
KIND_MEMSET = 2
KIND_KERNEL = 3
KIND_CONCURRENT_KERNEL = 10
KIND_MEMCPY2 = 22  # peer to peer
KIND_SYNCHRONIZATION = 38
_KERNEL_KINDS = (KIND_KERNEL, KIND_CONCURRENT_KERNEL)
_MEMCPY_KINDS = (KIND_MEMCPY, KIND_MEMCPY2)

# Byte offsets, the same in every record version (CUpti_ActivityKernel4..13, Memcpy1..7, Memset1..5)
START, END = 16, 24
KERNEL_DEVICE, KERNEL_STREAM, KERNEL_NAME = 40, 48, 104
COPY_KIND, COPY_SRC, COPY_DST = 4, 5, 6
MEM_DEVICE, MEM_STREAM, MEMSET_MEMORY_KIND = 32, 40, 50
# CUpti_ActivitySynchronization(2): kind u32, type u32, start u64, end u64 (the host's times)
SYNC_TYPE, SYNC_START, SYNC_END = 4, 8, 16
#: the synchronization types in which the host waits, named as Kineto names its cuda_sync events
#: (type 2, "Stream Wait Event", is the GPU waiting on an event: not kept)
SYNC_TYPE_NAMES = {1: "Event Sync", 3: "Stream Sync", 4: "Context Sync"}

# Kineto's names for memcpy and memset (libkineto/src/cupti_strings.cpp), so both sources agree
MEMCPY_KIND_NAMES = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
                     9: "HtoH", 10: "PtoP"}
MEMORY_KIND_NAMES = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                     6: "Device Static", 7: "Managed Static"}


class CuptiError(Exception):
    """CUPTI is missing or refused a call; the message says which call and why."""


@dataclass(frozen=True)
class ParsedRecords:
    """The records of some activity buffers, as columns (raw CUPTI clock)."""

    kinds: np.ndarray  # CUPTI activity kind per record
    starts: np.ndarray  # uint64 clock values
    ends: np.ndarray
    devices: np.ndarray
    streams: np.ndarray
    #: per record: the kernel's name pointer, or for memcpy (copy kind, src, dst) and memset
    #: (memory kind) packed into one number; see ``label_key``
    labels: np.ndarray

    @classmethod
    def empty(cls) -> "ParsedRecords":
        z = np.zeros(0, dtype=np.uint64)
        return cls(np.zeros(0, dtype=np.uint32), z, z, np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint32), z)

    @classmethod
    def concat(cls, parts: list["ParsedRecords"]) -> "ParsedRecords":
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                     ("kinds", "starts", "ends", "devices", "streams", "labels")))

    def __len__(self) -> int:
        return int(self.kinds.size)


#: records of one kind in a row after which the walk looks ahead with numpy (a launch loop's buffer
#: is thousands of kernel records in a row; a small test's mixes kinds every few records)
RUN_LOOKAHEAD = 8


def walk_records(buffer: np.ndarray, valid: int, size_of: Callable[[int, int], int]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and kinds of the records in ``buffer[:valid]``; ``size_of(kind, offset)`` gives a record's size.

    Records follow each other, each as long as its kind's size. Once ``RUN_LOOKAHEAD`` records of
    one kind have come in a row, the rest of that run is found at once: the kind is read at every
    following multiple of its size, up to the first record of another kind (every record of the
    run starts where the one before it, of that kind and size, ends, so this is the same walk).
    """
    kinds32 = memoryview(buffer[:valid - valid % 4]).cast("I")
    all_kinds = np.frombuffer(kinds32, dtype=np.uint32)
    parts: list[np.ndarray] = []
    offsets: list[int] = []
    sizes: dict[int, int] = {}
    offset, run_kind, run = 0, -1, 0
    while offset < valid:
        kind = kinds32[offset >> 2]
        size = sizes.get(kind)
        if size is None:
            size = sizes[kind] = size_of(kind, offset)
            if size <= 0 or size % 8:
                raise CuptiError(f"activity record of kind {kind} at byte {offset} has size {size}")
        run = run + 1 if kind == run_kind else 1
        run_kind = kind
        if run >= RUN_LOOKAHEAD:
            ahead = np.arange(offset, valid - 3, size, dtype=np.int64)  # where the run's records would start
            differ = np.flatnonzero(all_kinds[ahead >> 2] != kind)
            ahead = ahead[:differ[0]] if differ.size else ahead
            if offsets:
                parts.append(np.asarray(offsets, dtype=np.int64))
                offsets = []
            parts.append(ahead)
            offset = int(ahead[-1]) + size
            run = 0
            continue
        offsets.append(offset)
        offset += size
    if offset != valid:
        raise CuptiError(f"activity buffer of {valid} bytes ends inside a record (walked to byte {offset})")
    parts.append(np.asarray(offsets, dtype=np.int64))
    found = np.concatenate(parts) if len(parts) > 1 else parts[0]
    return found, all_kinds[found >> 2]  # a copy (fancy indexing): the buffer goes back to CUPTI


@dataclass(frozen=True)
class SyncRecords:
    """The host's waits in some activity buffers (synchronization records), as columns."""

    types: np.ndarray  # CUpti_ActivitySynchronizationType, only those of SYNC_TYPE_NAMES
    starts: np.ndarray  # clock values (raw, or ns once converted)
    ends: np.ndarray

    @classmethod
    def empty(cls) -> "SyncRecords":
        z = np.zeros(0, dtype=np.uint64)
        return cls(np.zeros(0, dtype=np.uint32), z, z)

    @classmethod
    def concat(cls, parts: list["SyncRecords"]) -> "SyncRecords":
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("types", "starts", "ends")))

    def __len__(self) -> int:
        return int(self.types.size)


def parse_buffer(buffer: np.ndarray, valid: int, size_of: Callable[[int, int], int]) -> ParsedRecords:
    """Kernel, memcpy and memset records of one buffer as columns; other kinds are skipped."""
    return parse_all(buffer, valid, size_of)[0]


def parse_all(buffer: np.ndarray, valid: int,
              size_of: Callable[[int, int], int]) -> tuple[ParsedRecords, SyncRecords]:
    """GPU work and the host's waits in one buffer, walked once; other kinds are skipped."""
    if valid == 0:
        return ParsedRecords.empty(), SyncRecords.empty()
    if _C_RECORDS is not None:
        parsed = _C_RECORDS.parse(buffer, valid, size_of)
        if parsed is not None:  # else a buffer the numpy reader answers for (and raises for)
            return _columns_of(parsed)
    offsets, kinds = walk_records(buffer, valid, size_of)
    return _gpu_records(buffer, valid, offsets, kinds), _sync_records(buffer, valid, offsets, kinds)


_PARSED_DTYPES = (np.uint32, np.uint64, np.uint64, np.uint32, np.uint32, np.uint64, np.uint32, np.uint64, np.uint64)


def _columns_of(parsed: tuple[bytearray, ...]) -> tuple[ParsedRecords, SyncRecords]:
    """The C pass's bytearrays as the numpy reader's columns (the same dtypes, writable)."""
    arrays = [np.frombuffer(raw, dtype=dtype) for raw, dtype in zip(parsed, _PARSED_DTYPES)]
    syncs = SyncRecords(*arrays[6:]) if arrays[6].size else SyncRecords.empty()
    return ParsedRecords(*arrays[:6]), syncs


def _sync_records(buffer: np.ndarray, valid: int, offsets: np.ndarray, kinds: np.ndarray) -> SyncRecords:
    at = offsets[kinds == KIND_SYNCHRONIZATION]
    if at.size == 0:
        return SyncRecords.empty()
    data = buffer[:valid - valid % 8]
    u64, u32 = data.view(np.uint64), data.view(np.uint32)
    types = u32[(at + SYNC_TYPE) >> 2]
    waits = np.isin(types, tuple(SYNC_TYPE_NAMES))
    at = at[waits]
    return SyncRecords(types[waits], u64[(at + SYNC_START) >> 3], u64[(at + SYNC_END) >> 3])


def sync_columns(records: SyncRecords) -> SyncColumns:
    """SyncColumns (named as Kineto names them) from records whose times are already ns."""
    if len(records) == 0:
        return SyncColumns()
    distinct, codes = np.unique(records.types, return_inverse=True)
    starts = records.starts.astype(np.int64)
    ends = np.maximum(records.ends.astype(np.int64), starts)
    return SyncColumns(CodedColumn(codes.astype(np.int64).ravel(), [SYNC_TYPE_NAMES[int(t)] for t in distinct.tolist()]),
                       starts, ends - starts)


def _gpu_records(buffer: np.ndarray, valid: int, offsets: np.ndarray, kinds: np.ndarray) -> ParsedRecords:
    wanted = np.isin(kinds, (*_KERNEL_KINDS, *_MEMCPY_KINDS, KIND_MEMSET))
    offsets, kinds = offsets[wanted], kinds[wanted]
    data = buffer[:valid - valid % 8]
    u64, u32, u16 = data.view(np.uint64), data.view(np.uint32), data.view(np.uint16)
    is_kernel = np.isin(kinds, _KERNEL_KINDS)
    is_memset = kinds == KIND_MEMSET
    device_at = np.where(is_kernel, offsets + KERNEL_DEVICE, offsets + MEM_DEVICE)
    stream_at = np.where(is_kernel, offsets + KERNEL_STREAM, offsets + MEM_STREAM)
    # each field read only from the records that have it (a short record may end a buffer)
    labels = np.zeros(offsets.size, dtype=np.uint64)
    at = offsets[is_kernel]
    labels[is_kernel] = u64[(at + KERNEL_NAME) >> 3]
    at = offsets[is_memset]
    labels[is_memset] = u16[(at + MEMSET_MEMORY_KIND) >> 1]
    is_copy = ~(is_kernel | is_memset)
    at = offsets[is_copy]
    labels[is_copy] = ((data[at + COPY_KIND].astype(np.uint64) << np.uint64(16))
                       | (data[at + COPY_SRC].astype(np.uint64) << np.uint64(8)) | data[at + COPY_DST])
    return ParsedRecords(
        kinds=kinds,
        starts=u64[(offsets + START) >> 3],
        ends=u64[(offsets + END) >> 3],
        devices=u32[device_at >> 2],
        streams=u32[stream_at >> 2],
        labels=labels,
    )


def label_name(kind: int, label: int, kernel_name: Callable[[int], str]) -> tuple[str, str]:
    """(name, trace category) of a record from its kind and label, named as Kineto names them."""
    if kind in _KERNEL_KINDS:
        return kernel_name(label), "kernel"
    if kind == KIND_MEMSET:
        return f"Memset ({MEMORY_KIND_NAMES.get(label, 'Unrecognized')})", "gpu_memset"
    copy_kind, src, dst = label >> 16, (label >> 8) & 0xFF, label & 0xFF
    return (f"Memcpy {MEMCPY_KIND_NAMES.get(copy_kind, '<unknown>')} "
            f"({MEMORY_KIND_NAMES.get(src, 'Unrecognized')} -> {MEMORY_KIND_NAMES.get(dst, 'Unrecognized')})",
            "gpu_memcpy")


def to_columns(records: ParsedRecords, kernel_name: Callable[[int], str]) -> GpuColumns:
    """GpuColumns (names and kinds coded together) from parsed records whose times are already ns."""
    if len(records) == 0:
        return GpuColumns()
    if (records.labels >> np.uint64(56)).any():
        raise CuptiError("an activity record's kernel name pointer is outside the user address space")
    key = (records.kinds.astype(np.uint64) << np.uint64(56)) | records.labels
    distinct, codes = _sorted_codes(key)
    named = [label_name(int(k) >> 56, int(k) & ((1 << 56) - 1), kernel_name) for k in distinct.tolist()]
    codes = np.asarray(codes, dtype=np.int64).ravel()
    starts = np.asarray(records.starts, dtype=np.int64)  # the drain's ns: int64 already (no copy)
    ends = np.maximum(np.asarray(records.ends, dtype=np.int64), starts)
    return GpuColumns(
        names=CodedColumn(codes, [n for n, _ in named]),
        kinds=CodedColumn(codes, [k for _, k in named]),
        devices=records.devices.astype(np.int64),
        streams=records.streams.astype(np.int64),
        starts_ns=starts,
        durs_ns=ends - starts,
    )


def _sorted_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``: the distinct keys ascending and each key's index
    among them; in C, by first-seen codes in one pass and a sort of the few distinct keys only."""
    if _C_RECORDS is None:
        return np.unique(keys, return_inverse=True)
    raw_codes, raw_distinct = _C_RECORDS.codes(np.ascontiguousarray(keys, dtype=np.uint64))
    seen = np.frombuffer(raw_distinct, dtype=np.uint64)  # in first-seen order
    order = np.argsort(seen, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    return seen[order], rank[np.frombuffer(raw_codes, dtype=np.int64)]
