"""Timelines for tests, the HTML benchmark and the screenshot script: a planted window and synthetic ones.

``planted_window`` is a known window (kernels, a copy, a memset, idle gaps, a host wait, a child
process on a second GPU) built through the real ``analysis.timeline.build``; ``planted_document``
is a one-test run document with it and two findings. ``synthetic_timelines`` gives a timeline to
each test of a ``synthetic_document`` (a CUPTI-like stream of kernels with launch gaps and idle
stretches, seeded), for the page-size benchmark.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np

from pytest_gpuutil.analysis import timeline
from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

MS = 1_000_000
#: the window: 10 ms from an arbitrary clock reading
W0 = 5_000_000_000
WINDOW = Window(W0, W0 + 10 * MS, "test_call")
CHILD = "pid 4242 train.py rank 1"
#: (name, kind, device, stream, owner, start ms, end ms, category): what the window holds
PLANTED = (
    ("nvjet_sm90_tst_planted_NNT", "kernel", 0, 7, 0, 0.5, 2.5, "gemm"),
    ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 0, 7, 0, 2.6, 3.0, "memcpy"),
    ("void at::native::vectorized_elementwise_kernel<4, planted_add>", "kernel", 0, 7, 0, 6.0, 6.5, "elementwise"),
    ("Memset (Device)", "gpu_memset", 0, 7, 0, 6.6, 6.7, "memset"),
    ("pytorch_flash::flash_fwd_kernel_planted", "kernel", 1, 7, 1, 7.0, 9.0, "attention"),
)
#: the host waited here (ms from the window's start)
WAIT = ("cudaStreamSynchronize", 3.0, 5.5)
#: idle stretches of at least 0.15 ms per device (the 0.1 ms ones between the first kernels are not): (device, start ms, length ms)
GAPS = (("0", 0.0, 0.5), ("0", 3.0, 3.0), ("0", 6.7, 3.3), ("1", 0.0, 7.0), ("1", 9.0, 1.0))
LANES = ("GPU 0 · stream 7", f"{CHILD} · GPU 1 · stream 7")
TEST = "tests/test_planted.py::test_window"


def ns(ms: float) -> int:
    return int(round(ms * MS))


def planted_window() -> dict[str, Any]:
    """The planted window's timeline in its compact form (as the plugin stores it)."""
    cols = GpuColumns([p[0] for p in PLANTED], [p[1] for p in PLANTED], [p[2] for p in PLANTED], [p[3] for p in PLANTED],
                      [W0 + ns(p[5]) for p in PLANTED], [ns(p[6]) - ns(p[5]) for p in PLANTED])
    syncs = SyncColumns([WAIT[0]], [W0 + ns(WAIT[1])], [ns(WAIT[2]) - ns(WAIT[1])])
    built = timeline.build(cols, WINDOW, KernelClassifier(), syncs=syncs, owners=[p[4] for p in PLANTED],
                           owner_labels=("", CHILD), gap_ns=150_000)
    strip = timeline.counter_strip([W0 + k * MS for k in range(10)], [W0 + (k + 1) * MS for k in range(10)],
                                   {"sm_pct": [0, 80, 85, 5, 0, 0, 30, 60, 62, 0]}, WINDOW.start_ns, WINDOW.end_ns)
    return timeline.encode(built, strip)


def planted_document() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A one-test run document for the planted window, with host-sync, gpu-idle and pageable-memcpy findings,
    and its timelines."""
    record = TestRecord(
        test=TEST, outcome="passed", wall_ms=10.0, gpu_busy_ms=5.0, busy_pct=25.0, kernel_count=3,
        devices=("0", "1"), gpu_busy_us_by_device={"0": 3000.0, "1": 2000.0},
        categories={"gemm": {"time_us": 2000.0, "share_of_busy": 40.0, "pct_of_window": 10.0, "count": 1},
                    "attention": {"time_us": 2000.0, "share_of_busy": 40.0, "pct_of_window": 10.0, "count": 1}},
        findings=(
            {"rule": "host-sync", "severity": "high", "message": "the host waited for the GPU 1 times", "fix": "drop .item()",
             "impact_pct": 15.0, "evidence": {"waits": 1}},
            {"rule": "gpu-idle", "severity": "medium", "message": "the GPU was idle 75% of the window", "fix": "overlap",
             "impact_pct": 50.0, "evidence": {"idle_pct": 75.0}},
            {"rule": "pageable-memcpy", "severity": "low", "message": "1 copies from or to pageable host memory",
             "fix": "pin the host memory", "impact_pct": 4.0,
             "evidence": {"copies": 1, "by_name": {"Memcpy HtoD (Pageable -> Device)": 1}}},
        ),
    ).to_dict()
    doc = {"format": "pytest-gpuutil", "version": 1, "created": "2026-11-26T12:00:00+00:00",
           "machine_info": {"gpu_model": "planted", "gpu_count": 2}, "tests": [record]}
    return doc, {TEST: planted_window()}


def synthetic_timeline(rng: random.Random, wall_ms: float, busy_pct: float, kernels: int) -> dict[str, Any]:
    """A timeline shaped like a real test's call: bursts of short kernels with launch gaps, idle stretches."""
    window_ns = max(1, int(wall_ms * MS))
    count = max(1, kernels)
    busy_ns = window_ns * busy_pct / 100
    lengths = np.asarray([max(800, int(rng.lognormvariate(0, 1.0) * busy_ns / count)) for _ in range(count)], dtype=np.int64)
    lengths = np.minimum(lengths, max(1, window_ns // (count + 1)))
    gaps = np.asarray([rng.choice((2_000, 3_000, 4_000, 6_000)) if rng.random() > 0.02 else int(window_ns * 0.05)
                       for _ in range(count)], dtype=np.int64)
    starts = np.cumsum(np.concatenate(([int(window_ns * 0.03)], (lengths + gaps)[:-1])))
    keep = starts + lengths <= window_ns
    starts, lengths = starts[keep], lengths[keep]
    names = ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "triton_poi_fused_add_mul_0",
             "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
             "Memcpy HtoD (Pageable -> Device)"]
    kinds = ["kernel", "kernel", "kernel", "gpu_memcpy"]
    which = [rng.choices(range(4), weights=(5, 3, 8, 1))[0] for _ in range(starts.size)]
    cols = GpuColumns([names[i] for i in which], [kinds[i] for i in which], [0] * starts.size,
                      [7 if i != 3 else 13 for i in which], starts.tolist(), lengths.tolist())
    built = timeline.build(cols, Window(0, window_ns, "test_call"), KernelClassifier())
    return timeline.encode(built)


def synthetic_timelines(doc: dict[str, Any], seed: int = 11, max_kernels: int = 3_000) -> dict[str, dict[str, Any]]:
    """A timeline for every test of a synthetic document that did GPU work (kernel counts capped)."""
    rng = random.Random(seed)
    out = {}
    for record in doc["tests"]:
        if record.get("kernel_count") and record.get("wall_ms"):
            out[record["test"]] = synthetic_timeline(rng, record["wall_ms"], record.get("busy_pct") or 1.0,
                                                     min(int(record["kernel_count"]), max_kernels))
    return out


def main(argv: "list[str] | None" = None) -> int:
    """``python -m tests.helpers.timelines OUT.html``: the planted window's page (docs/img/timeline.png is its screenshot)."""
    import sys
    from pathlib import Path

    from pytest_gpuutil.report.html_report import write_html_report

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.helpers.timelines OUT.html", file=sys.stderr)
        return 2
    doc, timelines = planted_document()
    print(f"wrote {write_html_report(Path(args[0]), doc, timelines=timelines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
