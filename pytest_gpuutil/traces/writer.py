"""Write GPU events as a Chrome trace: what Perfetto, chrome://tracing and ``gpuutil analyze`` open.

Used for the per-test traces of a continuous capture, which has the GPU work but no torch.profiler
session to export. Times are written exactly (integer ns as µs with three decimals, relative to
``baseTimeNanoseconds``), and the window is the profiler span (``cat: "Trace"``), so reading the
file back gives the same events and the same window. The host's waits, when given, are written as
Kineto writes CUPTI's synchronization records (``cat: "cuda_sync"``), so they read back too.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Any, Optional

import numpy as np

from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

SPAN_NAME = "pytest-gpuutil window"


def _micros(ns: int) -> str:
    """Integer nanoseconds as microseconds with three decimals, exactly."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _id(value: Any) -> str:
    text = str(value)
    return text if text.lstrip("-").isdigit() else json.dumps(text)


def chrome_trace_text(columns: GpuColumns, window: Window, label: str = SPAN_NAME,
                      syncs: Optional[SyncColumns] = None) -> str:
    """The trace as JSON text: one complete event per GPU event and per host wait, plus the window as the profiler span."""
    base = window.start_ns - window.start_ns % 1000
    starts = np.asarray(columns.starts_ns, dtype=np.int64) - base
    durs = np.asarray(columns.durs_ns, dtype=np.int64)
    lines = [
        f'  {{"ph": "X", "cat": "Trace", "name": {json.dumps(label)}, "pid": "Spans", "tid": "pytest-gpuutil", '
        f'"ts": {_micros(window.start_ns - base)}, "dur": {_micros(window.duration_ns)}}}'
    ]
    for name, kind, device, stream, start, dur in zip(columns.names, columns.kinds, columns.devices, columns.streams,
                                                      starts.tolist(), durs.tolist()):
        lines.append(
            f'  {{"ph": "X", "cat": {json.dumps(kind)}, "name": {json.dumps(name)}, "pid": {_id(device)}, '
            f'"tid": {_id(stream)}, "ts": {_micros(start)}, "dur": {_micros(dur)}, '
            f'"args": {{"device": {_id(device)}, "stream": {_id(stream)}}}}}'
        )
    for name, start, dur in syncs.rows() if syncs else ():
        lines.append(f'  {{"ph": "X", "cat": "cuda_sync", "name": {json.dumps(name)}, "pid": "host", "tid": "waits", '
                     f'"ts": {_micros(start - base)}, "dur": {_micros(dur)}}}')
    return ('{"schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": ' + str(base)
            + ', "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n")


def write_chrome_trace(path: str, columns: GpuColumns, window: Window, label: str = SPAN_NAME,
                       syncs: Optional[SyncColumns] = None) -> None:
    """Write the trace to ``path`` (gzip'd when it ends in .gz), atomically."""
    data = chrome_trace_text(columns, window, label, syncs).encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
