"""(CPU) CuptiSource.drain on synthetic activity buffers, for instruction counts: our cost a GPU record.

    python benchmarks/checks/cupti_drain_cost.py [--records 10000] [--shape kernels|small]
        [--drains 1] [--package DIR]

Fills 8 MiB buffers laid out as CUPTI 13.0 writes them (tests/capture/test_cupti_records.py's
layouts: Kernel10 216 bytes, Memcpy6 96, Memset4 88) with ``--records`` records: ``kernels``, a
launch loop (one kernel name after another, three names); ``small``, a small test's mix (fill, mul
and reduce kernels, a device-to-host copy and a memset, again and again). Then ``--drains`` times:
the buffers handed to a CuptiSource as CUPTI's completion callback hands them, and ``drain()``
(CUPTI's own flush stubbed: what is timed is ours, the walk, the fields, the clock, the codes,
the columns). The kernels' names are real C strings, read and kept as the source reads them.

For callgrind, each drain runs inside ``operator.call``::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \\
        --toggle-collect='_operator_call*' python ... --drains 3

(its "Collected" over 3 is one drain; over the records, the cost a record). Prints the drains'
wall time in ns a record (minimum and median). ``--package DIR`` imports pytest_gpuutil from DIR
(an older checkout, with its own compiled parts) to compare.
"""
from __future__ import annotations

import argparse
import ctypes
import operator
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

call = getattr(operator, "call", lambda function: function())
ROOT = Path(__file__).resolve().parents[2]
BUFFER_BYTES = 8 << 20
SIZES = {10: 216, 1: 96, 2: 88}
NAMES = [ctypes.create_string_buffer(name) for name in (b"vectorized_elementwise_kernel_fill", b"elementwise_mul",
                                                        b"reduce_kernel_sum")]


def records(count: int, shape: str) -> list[bytes]:
    """``count`` records of the shape, 5 µs apart on CUPTI's (wall-clock ns) time line."""
    out, t = [], 1_700_000_000_000_000_000
    pattern = (10,) if shape == "kernels" else (10, 10, 10, 1, 2)
    for i in range(count):
        kind = pattern[i % len(pattern)]
        record = bytearray(SIZES[kind])
        if kind == 10:
            struct.pack_into("<I", record, 0, kind)
            struct.pack_into("<QQ", record, 16, t, t + 2_000)
            struct.pack_into("<III", record, 40, 0, 1, 7)
            struct.pack_into("<Q", record, 104, ctypes.addressof(NAMES[i % 3 if shape == "small" else (i // 1000) % 3]))
        elif kind == 1:
            struct.pack_into("<IBBBB", record, 0, kind, 2, 3, 1, 0)
            struct.pack_into("<QQQ", record, 8, 1 << 20, t, t + 3_000)
            struct.pack_into("<III", record, 32, 0, 1, 7)
        else:
            struct.pack_into("<II", record, 0, kind, 0)
            struct.pack_into("<QQQ", record, 8, 4096, t, t + 500)
            struct.pack_into("<III", record, 32, 0, 1, 7)
            struct.pack_into("<H", record, 50, 3)
        out.append(bytes(record))
        t += 5_000
    return out


def buffers(count: int, shape: str) -> list[tuple[Any, int]]:
    """The records in 8 MiB numpy buffers, as CUPTI fills them: (buffer, valid bytes)."""
    import numpy as np

    filled, part, size = [], [], 0
    for record in records(count, shape):
        if size + len(record) > BUFFER_BYTES:
            filled.append(b"".join(part))
            part, size = [], 0
        part.append(record)
        size += len(record)
    filled.append(b"".join(part))
    out = []
    for data in filled:
        buffer = np.zeros(BUFFER_BYTES, dtype=np.uint8)
        buffer[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        out.append((buffer, len(data)))
    return out


class _StubLibrary:
    """CUPTI's flush and dropped-records calls, answering success (the buffers are already handed over)."""

    def cuptiActivityFlushAll(self, flag: int) -> int:
        return 0

    def cuptiActivityGetNumDroppedRecords(self, context: Any, stream: int, dropped: Any) -> int:
        return 0


def source_over(filled: list[tuple[Any, int]]) -> Any:
    """A started CuptiSource over the stub library (no libcupti here), its kinds' sizes known."""
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.traces.model import SyncColumns

    source = object.__new__(CuptiSource)
    state = {"_lib": _StubLibrary(), "_demangle": lambda name: name, "_callbacks": None, "_given": {}, "_spare": [],
             "_completed": [], "_completed_bytes": 0, "_lock": threading.Lock(), "_parsed": [], "_sync_parsed": [],
             "_syncs_drained": SyncColumns(), "_names": {}, "_sizes": dict(SIZES), "_dropped": 0, "_active": True,
             "_tsc": None}
    source.__dict__.update(state)
    return source


def drain(source: Any, filled: list[tuple[Any, int]], counted: bool) -> int:
    source._completed = list(filled)  # what CUPTI's completion callback appends
    source._completed_bytes = sum(valid for _, valid in filled)
    columns, _ = call(source.drain) if counted else source.drain()
    source._spare.clear()
    return len(columns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--shape", choices=("kernels", "small"), default="kernels")
    parser.add_argument("--drains", type=int, default=1)
    parser.add_argument("--package", type=Path, help="import pytest_gpuutil from this folder")
    args = parser.parse_args(argv)
    sys.path.insert(0, str((args.package or ROOT).resolve()))
    filled = buffers(args.records, args.shape)
    source = source_over(filled)
    if drain(source, filled, counted=False) != args.records:  # warm: imports, the names read once
        raise SystemExit("the drain did not give every record")
    seconds = []
    for _ in range(args.drains):
        began = time.perf_counter()
        drain(source, filled, counted=True)
        seconds.append(time.perf_counter() - began)
    seconds.sort()
    print(f"CuptiSource.drain of {args.records} records ({args.shape}): {seconds[0] * 1e9 / args.records:.1f} ns a record "
          f"(minimum of {args.drains}; median {seconds[len(seconds) // 2] * 1e9 / args.records:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
