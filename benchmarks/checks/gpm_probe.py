"""(GPU) NVML GPM on this machine: is it there, what a sample costs, what its figures say, and the plugin with it.

    python benchmarks/checks/gpm_probe.py --out DIR

1. NVML alone: GPM support, each call's time, and a sampling thread at 100, 50, 20 and 10 ms beside
   3 s of bf16 matmuls (the thread's % of one core; each period's SM / tensor / DRAM means, and how
   much they scatter from sample to sample: the resolution a test gets).
2. The plugin: the busy suite (5 tests of 2 s bf16 matmuls) under ``--gpu-util --gpu-util-counters=gpm``
   (exit code, its last lines, the counters' thread % and each test's figures).

Writes DIR/gpm_probe.json and prints it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def nvml_stage(seconds: float) -> dict[str, Any]:
    import torch

    from pytest_gpuutil.hardware.nvml import GPM_METRICS, GpmSource, open_device

    got: dict[str, Any] = {}
    device = open_device(torch.cuda.current_device())
    got["gpm_supported"] = device.gpm_supported()
    nvml = device.nvml
    try:
        got["streaming"] = int(nvml.nvmlGpmQueryIfStreamingEnabled(device.handle))
    except Exception as exc:  # noqa: BLE001
        got["streaming"] = f"error: {exc}"
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for period_ms in (100, 50, 20, 10):
        source = GpmSource(device, period_ns=period_ms * 1_000_000)
        rows: list[dict[str, float]] = []
        cpu = [0.0]
        stop = threading.Event()

        def sample() -> None:
            began = time.thread_time()
            source.start()
            while not stop.wait(period_ms / 1000):
                s = source.poll()
                if len(s):
                    rows.append({k: float(v[0]) for k, v in s.values.items()})
            cpu[0] = time.thread_time() - began

        thread = threading.Thread(target=sample)
        began = time.perf_counter()
        thread.start()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
        stop.set()
        thread.join()
        wall = time.perf_counter() - began
        row: dict[str, Any] = {"samples": len(rows), "thread_pct": 100 * cpu[0] / wall,
                               "poll_ms_mean": 1000 * source.poll_s / max(1, source.samples)}
        for field in GPM_METRICS:
            values = [r[field] for r in rows[1:-1] if r.get(field) == r.get(field)]  # inner samples, no NaN
            if values:
                row[field] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
                              "stdev": statistics.pstdev(values)}
        got[f"period_{period_ms}ms"] = row
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    try:
        result["nvml"] = nvml_stage(args.seconds)
    except Exception as exc:  # noqa: BLE001 - the plugin stage still runs
        result["nvml"] = {"error": repr(exc)}
    from benchmarks.checks.counter_thread_cost import plugin_stage

    result["plugin"] = plugin_stage(args.out / "work", 5, 2.0, time.monotonic() + 120, configs=("gpm",))
    (args.out / "gpm_probe.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
