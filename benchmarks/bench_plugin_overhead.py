"""(GPU) What --gpu-util costs: suite wall time with and without it, and per-test analysis time.

    python benchmarks/bench_plugin_overhead.py --out DIR [--suite examples] [--repeats 3]

1. Runs ``pytest SUITE`` ``--repeats`` times with and without ``--gpu-util`` (alternating, in fresh
   processes) and reports the median wall times and their ratio (goal <= 1.15).
2. Profiles a region of 2,000 tiny kernels the way the plugin does, then times turning the live
   profiler's events into a summary (``trace_from_profiler`` + ``analyze``), median of 20
   (goal <= 2 ms).
Writes DIR/plugin_overhead.json and .md; prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def suite_wall_times(suite: str, repeats: int, out_dir: Path) -> dict[str, Any]:
    base = [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider"]
    times: dict[str, list[float]] = {"plain": [], "gpu_util": []}
    for i in range(repeats):
        for mode in ("plain", "gpu_util"):
            cmd = base + (["--gpu-util", f"--gpu-util-dir={out_dir / 'overhead_run'}"] if mode == "gpu_util" else [])
            start = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            times[mode].append(time.perf_counter() - start)
            if res.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}")
    plain, profiled = statistics.median(times["plain"]), statistics.median(times["gpu_util"])
    return {"suite": suite, "repeats": repeats, "plain_s": times["plain"], "gpu_util_s": times["gpu_util"],
            "median_plain_s": plain, "median_gpu_util_s": profiled, "ratio": profiled / plain}


def analysis_time(kernels: int = 2000, repeats: int = 20) -> dict[str, Any]:
    import torch

    from pytest_gpuutil import KernelClassifier, Window, analyze
    from pytest_gpuutil.capture.live_events import trace_from_profiler
    from pytest_gpuutil.capture.profiler import RegionProfiler

    x = torch.zeros(1024, device="cuda")
    for _ in range(100):
        x.add_(1)
    profiler = RegionProfiler(KernelClassifier(), cuda=True, keep=True)
    profiler.start()
    for _ in range(kernels):
        x.add_(1)
    profile = profiler.stop()
    classifier = KernelClassifier()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        trace = trace_from_profiler(profiler.prof)
        summary = analyze(trace, classifier, window=profile.window)
        samples.append((time.perf_counter() - start) * 1000)
    parts = {"events_ms": [], "trace_ms": [], "analyze_ms": []}
    results = profiler.prof.profiler.kineto_results
    for _ in range(repeats):
        t0 = time.perf_counter()
        n_events = len(results.events())
        t1 = time.perf_counter()
        trace = trace_from_profiler(profiler.prof)
        t2 = time.perf_counter()
        analyze(trace, classifier, window=profile.window)
        t3 = time.perf_counter()
        parts["events_ms"].append((t1 - t0) * 1000)
        parts["trace_ms"].append((t2 - t1) * 1000)
        parts["analyze_ms"].append((t3 - t2) * 1000)
    cold_start = time.perf_counter()
    analyze(trace_from_profiler(profiler.prof), KernelClassifier(), window=Window(profile.window.start_ns, profile.window.end_ns, "x"))
    cold_ms = (time.perf_counter() - cold_start) * 1000
    return {"kernels": summary.kernel_count, "profiler_events": n_events,
            "kineto_events_ms": statistics.median(parts["events_ms"]),
            "trace_from_profiler_ms": statistics.median(parts["trace_ms"]),
            "analyze_ms": statistics.median(parts["analyze_ms"]),
            "median_ms": statistics.median(samples), "min_ms": min(samples),
            "max_ms": max(samples), "fresh_classifier_ms": cold_ms, "repeats": repeats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out")
    parser.add_argument("--suite", default="examples")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--analysis-only", action="store_true", help="skip the suite wall-time runs")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d"),
        "suite": None if args.analysis_only else suite_wall_times(args.suite, args.repeats, out),
        "analysis": analysis_time(),
    }
    (out / "plugin_overhead.json").write_text(json.dumps(result, indent=1))
    s, a = result["suite"], result["analysis"]
    lines = ["| measure | value | goal |", "|---|---|---|"]
    if s is not None:
        lines += [
            f"| `pytest {s['suite']}` median wall, plain | {s['median_plain_s']:.2f} s | |",
            f"| same with `--gpu-util` | {s['median_gpu_util_s']:.2f} s | |",
            f"| ratio | {s['ratio']:.3f}x | <= 1.15x |",
        ]
    lines += [
        f"| per-test analysis, {a['kernels']} kernels (median of {a['repeats']}) | {a['median_ms']:.3f} ms | <= 2 ms |",
        f"| same with a fresh classifier (first sight of each name) | {a['fresh_classifier_ms']:.3f} ms | |",
        f"| of which: torch's `kineto_results.events()` alone ({a['profiler_events']} events) | {a['kineto_events_ms']:.3f} ms | |",
        f"| of which: `trace_from_profiler` (includes the above) | {a['trace_from_profiler_ms']:.3f} ms | |",
        f"| of which: `analyze` | {a['analyze_ms']:.3f} ms | |",
    ]
    (out / "plugin_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
