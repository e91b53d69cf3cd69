"""The trace readers alone, in one process: the C reader by thread count, and the pure-Python readers.

    python benchmarks/bench_c_reader.py [--trace BIG] [--repeats 7] [--out DIR]

Times ``_scan.scan`` on the decompressed trace with 1, 2, 4 and 8 threads and with its own choice
(8 parts where there are two CPUs or more, each at least 4 MiB of events), then ``read_trace`` (the C reader and the
Python lists) and ``read_trace_python`` (what runs where the C reader is not built) on the same
file. Best and median of ``--repeats`` runs each, after one untimed run. Writes
``DIR/c_reader.json``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.report import host_info, median, text_table  # noqa: E402
from pytest_gpuutil.traces import reader  # noqa: E402

BIG_TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "h200_40k_kernels.json.gz")


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Best and median seconds of ``repeats`` calls after one untimed call, and the last result."""
    result = fn()
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - began)
    return min(runs), median(runs), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=BIG_TRACE)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="bench_out")
    args = parser.parse_args(argv)
    if not reader.c_reader_available():
        print("the C reader is not built here: nothing to time")
        return 1
    from pytest_gpuutil.traces import _scan

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        with open(path, "wb") as out:
            out.write(gzip.decompress(open(args.trace, "rb").read()) if args.trace.endswith(".gz")
                      else open(args.trace, "rb").read())
        data = reader._read_bytes(path)  # the mapping read_trace makes
        rows, record = [], {}
        for threads in (1, 2, 4, 8, 0):
            best, mid, found = timed(lambda: _scan.scan(data, threads), args.repeats)
            label = f"_scan.scan, {threads} thread(s)" if threads else "_scan.scan, its own choice"
            rows.append([label, found[-1], best * 1000, mid * 1000])
            record[label] = {"parts": found[-1], "best_ms": best * 1000, "median_ms": mid * 1000}
        for label, fn in (("read_trace (C reader)", reader.read_trace),
                          ("read_trace_python (no C reader)", reader.read_trace_python)):
            best, mid, _ = timed(lambda: fn(path), args.repeats)
            rows.append([label, "", best * 1000, mid * 1000])
            record[label] = {"best_ms": best * 1000, "median_ms": mid * 1000}
        size_mb = os.path.getsize(path) / 1e6
    print(f"{os.path.basename(args.trace)}: {size_mb:.1f} MB of JSON, {len(os.sched_getaffinity(0))} CPUs usable")
    print(text_table(["", "parts", "best ms", "median ms"], rows, digits=1))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "c_reader.json"), "w") as out:
        json.dump({"trace": args.trace, "size_mb": size_mb, "host": host_info(), "runs": record}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
