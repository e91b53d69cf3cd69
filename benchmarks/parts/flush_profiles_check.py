"""(CPU) Every profile of 122 random flushes, written to a file: run it on two checkouts and compare the files.

    python benchmarks/parts/flush_profiles_check.py --package DIR --out FILE
    cmp FILE_A FILE_B          (the same bytes: the same profiles, every field, types too)

The flushes (issue 41's part 41f checks, kept): flush_cost.py's "small" and "launch-bound" shapes,
then 120 random ones (1-40 windows of 0-400 events: gemm, attention, NCCL, elementwise kernels,
pageable and pinned copies, memsets; one or two devices; host waits in and between windows; events
kept in every fourth), each flushed twice: as the capture's WindowResults (findings on) and as the
measurement's profiles (``ContinuousWindows.flush``). Each result is pickled field by field: the
statistics' every field (kernel_totals too), notes, findings as dicts, kept events and waits (not
the wall clock's ``wall_ms`` and ``measure_ms``, which differ from run to run).
"""
from __future__ import annotations

import argparse
import dataclasses
import pickle
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["void gemm_kernel_x", "nvjet_hsh_128", "vectorized_elementwise_kernel<add>", "Memcpy DtoH (Device -> Pageable)",
         "Memset (Device)", "ncclKernel_AllReduce", "flash_fwd_kernel", "Memcpy HtoD (Pageable -> Device)"]
KINDS = ["kernel", "kernel", "kernel", "gpu_memcpy", "gpu_memset", "kernel", "kernel", "gpu_memcpy"]


def _fields(record: Any) -> Any:
    """A record's values, field by field (nested records too), as plain tuples."""
    if record is None or isinstance(record, (str, int, float, bool)):
        return record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        if hasattr(record, "to_dict") and type(record).__name__ == "Finding":
            return record.to_dict()
        return tuple((f.name, _fields(getattr(record, f.name))) for f in dataclasses.fields(record))
    if isinstance(record, (tuple, list)):
        return tuple(_fields(x) for x in record)
    if hasattr(record, "starts_ns"):  # kept events or waits
        return (len(record), list(record.starts_ns), list(record.durs_ns))
    return repr(record)


def _flushes() -> list[tuple[Any, Any, list[tuple[int, int]], bool]]:
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks" / "diagnostics"))
    import flush_cost as fc
    from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, SyncColumns

    out = [(*fc.columns(100, 4, fc.SMALL, "Stream Sync"), False), (*fc.columns(20, 2000, fc.TINY, "Context Sync"), False)]
    rng = np.random.default_rng(11)
    for trial in range(120):
        t, starts, codes, durs, spans, ws, wd = 1_000_000, [], [], [], [], [], []
        for _ in range(int(rng.integers(1, 40))):
            begin = t
            for _ in range(int(rng.choice([0, 1, 3, 20, 150, 400]))):
                starts.append(t + int(rng.integers(0, 2000)))
                codes.append(int(rng.integers(0, len(NAMES))))
                d = int(rng.choice([800, 5000, 60000, 300000]))
                durs.append(d)
                gap = int(rng.choice([500, 3000, 20000, 200000]))
                t += d + gap if rng.random() < 0.8 else d // 2
                if rng.random() < 0.1:
                    ws.append(t - 100)
                    wd.append(int(rng.integers(0, 5000)))
            for _ in range(int(rng.choice([0, 1, 12]))):
                ws.append(t + int(rng.integers(-30000, 300)))
                wd.append(int(rng.integers(0, 20000)))
            t += int(rng.integers(1000, 3_000_000))
            spans.append((begin, t))
            t += int(rng.integers(0, 100000))
        n, c = len(starts), np.asarray(codes, dtype=np.int64)
        gpu = GpuColumns(names=CodedColumn(c, NAMES), kinds=CodedColumn(c, KINDS),
                         devices=rng.integers(0, 1 + trial % 2, n).astype(np.int64),
                         streams=rng.integers(7, 9, n).astype(np.int64), starts_ns=np.asarray(starts, dtype=np.int64),
                         durs_ns=np.asarray(durs, dtype=np.int64))
        sc = np.asarray(rng.integers(0, 2, len(ws)), dtype=np.int64)
        syncs = SyncColumns(CodedColumn(sc, ["Stream Sync", "Context Sync"]), np.asarray(ws, dtype=np.int64),
                            np.asarray(wd, dtype=np.int64))
        out.append((gpu, syncs, spans, trial % 4 == 0))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, help="import pytest_gpuutil from this folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    sys.path.insert(0, str((args.package or ROOT).resolve()))
    sys.path.insert(0, str(ROOT / "benchmarks" / "diagnostics"))
    import flush_cost as fc
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture
    from pytest_gpuutil.measurement.windows import ContinuousWindows

    found, with_findings = [], 0
    for gpu, syncs, spans, keep in _flushes():
        for as_profiles in (False, True):
            source = fc._PreparedSource(gpu, syncs, spans)
            capture = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None, findings=True,
                                        keep_events=keep, device_name=lambda: "NVIDIA H100 80GB HBM3")
            capture.ensure_started()
            for i in range(len(spans)):
                capture.begin(f"t{i}")
                capture.end()
            if as_profiles:
                profiles = ContinuousWindows(capture, source, lambda: None).flush()
                rows = [(key, _fields(dataclasses.replace(p, wall_ms=None, measure_ms=None)))
                        for key, p in profiles.items()]
            else:
                results = capture.flush()
                with_findings += sum(1 for r in results if r.findings)
                rows = [(r.key, _fields(dataclasses.replace(r, wall_ms=0.0, measure_ms=0.0))) for r in results]
            found.append(rows)
    args.out.write_bytes(pickle.dumps(found))
    print(f"{len(found)} flushes, {sum(len(f) for f in found)} results ({with_findings} windows with findings) "
          f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
