"""Columns of GPU events from several processes put together (coded, numpy all the way), and the
GPUs those processes kept busy at the same time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pytest_gpuutil.traces.model import CodedColumn, GpuColumns


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
