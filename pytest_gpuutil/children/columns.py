"""Columns of GPU events from several processes put together (coded, numpy all the way), each
process's part in a window (:class:`ProcessShare`), and the GPUs they kept busy at the same time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pytest_gpuutil.traces.model import CodedColumn, GpuColumns


@dataclass(frozen=True)
class ProcessShare:
    """One process's part in one test's window (the record's ``processes`` entries)."""

    pid: int
    program: str
    rank: str = ""
    devices: tuple[str, ...] = ()
    gpu_ms: float = 0.0
    peak_mb: Optional[float] = None
    #: "allocator" (torch's peak, reported by the child at exit), "nvml" (sampled per-process use), or ""
    memory_source: str = ""
    note: str = ""
    #: True for the pytest process itself
    parent: bool = False
    #: "python", "injection", "" (the parent, or a process seen only by NVML)
    measured_by: str = ""
    startup_ms: Optional[float] = None
    #: "overlapped on GPU 0 with pid 12": this row's GPU ms include time slices the GPU gave
    #: the others, so the rows are not to be added (the test's figure is their union)
    overlap: str = ""
    #: this process's share of the test's GPU ms: time when k processes kept a GPU busy counts 1/k
    #: to each, so the rows' shares add up to the test's figure (None: not worked out)
    share_ms: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "program": self.program, "rank": self.rank, "devices": list(self.devices),
                "gpu_ms": self.gpu_ms, "peak_mb": self.peak_mb, "memory_source": self.memory_source,
                "note": self.note, "parent": self.parent, "measured_by": self.measured_by,
                "startup_ms": self.startup_ms, "overlap": self.overlap, "share_ms": self.share_ms}


@dataclass(frozen=True)
class ChildStart:
    """A child that the test started and whose kernel was the window's first: how long it took from
    its process's start (or the window's, if later) to that kernel (Python, imports, CUDA)."""

    program: str
    startup_ns: int


@dataclass(frozen=True)
class WindowExtras:
    """What the children add to one window besides its merged events."""

    processes: tuple[ProcessShare, ...] = ()
    note: str = ""
    #: the window's first GPU work was a child's, started in the window
    child_start: Optional[ChildStart] = None



def _codes_and_values(column: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    if isinstance(column, CodedColumn):
        return np.asarray(column.codes, dtype=np.int64), list(column.values)
    if hasattr(column, "dtype"):
        values, codes = np.unique(np.asarray(column), return_inverse=True)
        return codes.astype(np.int64).reshape(-1), values.tolist()
    index: dict[Any, int] = {}
    codes = [index.setdefault(v, len(index)) for v in column]
    return np.asarray(codes, dtype=np.int64), list(index)


def _pair_codes(columns: GpuColumns) -> tuple[np.ndarray, list[str], list[str]]:
    names, kinds = columns.names, columns.kinds
    if isinstance(names, CodedColumn) and isinstance(kinds, CodedColumn) and names.codes is kinds.codes:
        return np.asarray(names.codes, dtype=np.int64), list(names.values), list(kinds.values)
    index: dict[tuple[str, str], int] = {}
    codes = [index.setdefault((n, k), len(index)) for n, k in zip(names, kinds)]
    return np.asarray(codes, dtype=np.int64), [n for n, _ in index], [k for _, k in index]


def concat_columns(parts: Sequence[GpuColumns]) -> GpuColumns:
    """One set of columns from several (names and kinds coded together, devices and streams coded)."""
    keys, names, kinds = [], [], []
    device_codes, device_values, stream_codes, stream_values = [], [], [], []
    for part in parts:
        if not len(part):
            continue
        codes, part_names, part_kinds = _pair_codes(part)
        keys.append(codes + len(names))
        names += part_names
        kinds += part_kinds
        codes, values = _codes_and_values(part.devices)
        device_codes.append(codes + len(device_values))
        device_values += values
        codes, values = _codes_and_values(part.streams)
        stream_codes.append(codes + len(stream_values))
        stream_values += values
    if not keys:
        return GpuColumns()
    key = np.concatenate(keys)
    return GpuColumns(
        CodedColumn(key, names), CodedColumn(key, kinds),
        CodedColumn(np.concatenate(device_codes), device_values), CodedColumn(np.concatenate(stream_codes), stream_values),
        np.concatenate([np.asarray(p.starts_ns, dtype=np.int64) for p in parts if len(p)]),
        np.concatenate([np.asarray(p.durs_ns, dtype=np.int64) for p in parts if len(p)]),
    )


def take_columns(columns: GpuColumns, rows: np.ndarray) -> GpuColumns:
    """The rows of columns made by :func:`concat_columns` (numpy all the way)."""
    def pick(column: Any) -> Any:
        if isinstance(column, CodedColumn):
            return CodedColumn(np.asarray(column.codes)[rows], column.values)
        return np.asarray(column)[rows]

    key = np.asarray(columns.names.codes)[rows] if isinstance(columns.names, CodedColumn) else None
    if key is not None and isinstance(columns.kinds, CodedColumn) and columns.names.codes is columns.kinds.codes:
        names, kinds = CodedColumn(key, columns.names.values), CodedColumn(key, columns.kinds.values)
    else:
        names, kinds = pick(columns.names), pick(columns.kinds)
    return GpuColumns(names, kinds, pick(columns.devices), pick(columns.streams), pick(columns.starts_ns),
                      pick(columns.durs_ns))


@dataclass(frozen=True)
class Overlap:
    """Processes that kept one GPU busy at the same time in one window."""

    device: str
    #: owners (0: the pytest process, i: the i-th child) busy on the device
    owners: tuple[int, ...]
    #: their busy times added, less the union: the time counted more than once
    overlap_ms: float
    union_ms: float


#: overlaps shorter than this (ms), or than this share of the device's busy time, are noise (one
#: process's last kernel ending as the next one's first starts)
OVERLAP_MIN_MS, OVERLAP_MIN_SHARE = 0.1, 0.01


def overlaps(per_owner: dict[int, dict[str, float]], union: dict[str, float]) -> list[Overlap]:
    """The devices on which several owners' busy times (ms, per device) overlapped, given the union per device."""
    found = []
    for device, union_ms in sorted(union.items()):
        owners = tuple(o for o in sorted(per_owner) if per_owner[o].get(device, 0.0) > 0)
        if len(owners) < 2:
            continue
        extra = sum(per_owner[o][device] for o in owners) - union_ms
        if extra > max(OVERLAP_MIN_MS, OVERLAP_MIN_SHARE * union_ms):
            found.append(Overlap(device, owners, extra, union_ms))
    return found


def overlap_text(owner: int, found: list[Overlap], label: Callable[[int], str]) -> str:
    """A row's overlap: "overlapped on GPU 0 with pid 12 (python -c)" ("" when it did not)."""
    parts = [f"overlapped on GPU {o.device} with {', '.join(label(x) for x in o.owners if x != owner)}"
             for o in found if owner in o.owners]
    return "; ".join(parts)


def overlap_note(found: Overlap, label: Callable[[int], str]) -> str:
    """The record's note for a GPU that processes shared at the same time (never the rows' sum)."""
    return (f"processes {', '.join(label(o) for o in found.owners)} overlapped on GPU {found.device} (for "
            f"{found.overlap_ms:.1f} ms of the {found.union_ms:.1f} ms the GPU was busy): the GPU time-sliced them, so "
            "each one's GPU ms and kernel times include slices it gave the others: their gpu_ms are not to be added, "
            "their shares (share_ms, the time they shared split between them) add up to the test's figure, their union")


def _own_blocks(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One owner's intervals as disjoint blocks (sorted)."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    return starts[first], np.maximum.reduceat(ends, first)


def union_shares(starts: np.ndarray, ends: np.ndarray, owners: np.ndarray) -> dict[int, float]:
    """Each owner's share (ns) of the union of the intervals ``[start, end)``: a stretch when k owners
    are busy counts 1/k to each of them, so the shares add up to the union."""
    starts, ends, owners = (np.asarray(a, dtype=np.int64) for a in (starts, ends, owners))
    keep = ends > starts
    starts, ends, owners = starts[keep], ends[keep], owners[keep]
    if not starts.size:
        return {}
    per_owner = {int(o): _own_blocks(starts[owners == o], ends[owners == o]) for o in np.unique(owners)}
    all_starts = np.concatenate([b[0] for b in per_owner.values()])
    all_ends = np.concatenate([b[1] for b in per_owner.values()])
    points = np.unique(np.concatenate([all_starts, all_ends]))
    delta = np.zeros(points.size, dtype=np.int64)
    np.add.at(delta, np.searchsorted(points, all_starts), 1)
    np.add.at(delta, np.searchsorted(points, all_ends), -1)
    busy = np.cumsum(delta)[:-1]  # owners busy on [points[i], points[i + 1])
    weight = np.where(busy > 0, np.diff(points) / np.maximum(busy, 1), 0.0)
    integral = np.concatenate([[0.0], np.cumsum(weight)])
    return {o: float((integral[np.searchsorted(points, e)] - integral[np.searchsorted(points, s)]).sum())
            for o, (s, e) in per_owner.items()}


def window_shares(columns: GpuColumns, owner: np.ndarray, start_ns: int, end_ns: int) -> dict[int, float]:
    """Each owner's share (ms) of a window's busy time: per device, events clipped to the window."""
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    hit = (starts <= end_ns) & (ends >= start_ns)
    if not hit.any():
        return {}
    codes, values = _codes_and_values(columns.devices)  # (concat_columns codes each part's devices apart)
    _, same_device = np.unique(np.asarray([str(v) for v in values]), return_inverse=True)
    device_codes = np.asarray(same_device, dtype=np.int64).reshape(-1)[codes]
    starts, ends = np.maximum(starts[hit], start_ns), np.minimum(ends[hit], end_ns)
    owner, device_codes = np.asarray(owner)[hit], device_codes[hit]
    shares: dict[int, float] = {}
    for device in np.unique(device_codes):
        on = device_codes == device
        for o, ns in union_shares(starts[on], ends[on], owner[on]).items():
            shares[o] = shares.get(o, 0.0) + ns / 1e6
    return shares
