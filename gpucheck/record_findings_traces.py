"""(GPU) Record what the findings rules are proven on: one problem and one healthy control per rule.

    python gpucheck/record_findings_traces.py OUT [--only NAME,NAME] [--skip-live] [--skip-cost]

Three parts, each in a fresh process with its own time limit, so one failing leaves the others:

1. ``record``: each workload is warmed up, then run under torch.profiler (CUDA activity only, as
   the kernel zoo) and exported gzip'd to OUT/traces/<name>.json.gz (the item-in-loop workload once
   more with ``enable_cuda_sync_events``, for Kineto's ``cuda_sync`` events);
2. ``live``: the same workloads under the plugin's own CUPTI source (``CuptiSource``, GPU work and
   the host's waits, activity kind 38), one window each, synchronised and read as the continuous
   capture does; each window's events and waits, relative to its start, to
   OUT/live/<name>.json.gz (``{"window_ns", "cutoff_ns", "events": [[name, kind, device, stream,
   start, dur]], "syncs": [[name, start, dur]]}``; ``cutoff_ns``: when the closing synchronize
   began);
3. ``cost``: what kind 38 costs: a launch loop (20k ``add_``, 200 ``.item()``) and a sync loop
   (3,000 ``add_`` + ``.item()``), timed with no capture, with GPU work only and with GPU work and
   waits, rounds interleaved, in one process.

OUT/summary.json holds what each part found (per trace: events per category, the host waits by
name, the file's size; per live window: event and wait counts by name; the cost medians) and
errors; a short summary is printed last. Needs the package of this checkout (``live`` imports
``pytest_gpuutil.capture.cupti``). Well under 4 minutes on one H100.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]

#: name -> (rule it shows or controls, "problem" | "control", what it does)
WORKLOADS = {
    "bf16_matmul_loop": ("all", "control", "20 x 8192^3 bf16 matmul, no host syncs: none of the rules"),
    "fp32_matmul": ("fp32-matmul", "problem", "10 x 4096^3 fp32 matmul with TF32 off"),
    "tf32_matmul": ("fp32-matmul", "control", "10 x 4096^3 fp32 matmul with TF32 on"),
    "fp32_conv": ("fp32-matmul", "problem", "5 x Conv2d fp32 forward, cuDNN TF32 off"),
    "tf32_conv": ("fp32-matmul", "control", "5 x Conv2d fp32 forward, cuDNN TF32 on"),
    "pageable_copies": ("pageable-memcpy", "problem", "8 x 32 MB pageable host->device .cuda(), 4 x device->host .cpu()"),
    "pinned_copies": ("pageable-memcpy", "control", "8 x 32 MB pinned host->device non_blocking, one sync"),
    "small_kernels": ("launch-bound", "problem", "1000 x add_ on 1024 floats, launched one by one"),
    "small_kernels_graph": ("launch-bound", "control", "the same 1000 add_ captured in a CUDA graph, replayed"),
    "large_kernels": ("launch-bound", "control", "200 x add_ on 16M floats"),
    "item_in_loop": ("host-sync", "problem", "100 x (2048^3 bf16 matmul, sum, .item())"),
    "sync_in_loop": ("host-sync", "problem", "100 x (2048^3 bf16 matmul, torch.cuda.synchronize())"),
    "no_sync_loop": ("host-sync", "control", "100 x (2048^3 bf16 matmul, sum into a GPU total), one .item()"),
    "idle_between": ("gpu-idle", "problem", "10 x (4 x 2048^3 bf16 matmul, host sleeps 2 ms)"),
    "idle_before": ("gpu-idle", "problem", "host sleeps 20 ms, then 4 x 2048^3 bf16 matmul"),
    "idle_after": ("gpu-idle", "problem", "4 x 2048^3 bf16 matmul, then the host sleeps 20 ms"),
}


def workloads(torch: Any) -> dict[str, Callable[[], Callable[[], Any]]]:
    """name -> build() returning the step that is profiled (warmed up once before)."""
    cuda = "cuda"

    def matmul_loop(n: int, size: int, dtype: Any, tf32: bool = False) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(size, size, device=cuda, dtype=dtype)

            def step() -> Any:
                for _ in range(n):
                    c = a @ a
                return c
            return step
        return build

    def conv(tf32: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            torch.backends.cudnn.allow_tf32 = tf32
            layer = torch.nn.Conv2d(64, 64, 3, padding=1).to(cuda)
            x = torch.randn(32, 64, 56, 56, device=cuda)

            def step() -> Any:
                with torch.no_grad():
                    for _ in range(5):
                        y = layer(x)
                return y
            return step
        return build

    def pageable() -> Callable[[], Any]:
        host = torch.randn(8 << 20)  # 32 MB, pageable
        dev = torch.randn(8 << 20, device=cuda)

        def step() -> None:
            for _ in range(8):
                moved = host.cuda()
                moved.mul_(2)
            for _ in range(4):
                dev.cpu()
        return step

    def pinned() -> Callable[[], Any]:
        host = torch.randn(8 << 20).pin_memory()

        def step() -> None:
            for _ in range(8):
                moved = host.to(cuda, non_blocking=True)
                moved.mul_(2)
            torch.cuda.synchronize()
        return step

    def small(n: int, elements: int) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            x = torch.zeros(elements, device=cuda)

            def step() -> None:
                for _ in range(n):
                    x.add_(1)
            return step
        return build

    def graphed() -> Callable[[], Any]:
        x = torch.zeros(1024, device=cuda)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(1000):
                x.add_(1)
        return graph.replay

    def host_sync(kind: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)

            def step() -> Any:
                total = torch.zeros((), device=cuda)
                values = []
                for _ in range(100):
                    c = a @ a
                    if kind == "item":
                        values.append(c.sum().item())
                    elif kind == "sync":
                        torch.cuda.synchronize()
                    else:
                        total += c.sum()
                return total.item() if kind == "none" else values
            return step
        return build

    def idle(where: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)

            def burst() -> None:
                for _ in range(4):
                    a @ a

            def step() -> None:
                if where == "between":
                    for _ in range(10):
                        burst()
                        time.sleep(0.002)
                elif where == "before":
                    time.sleep(0.02)
                    burst()
                else:
                    burst()
                    torch.cuda.synchronize()
                    time.sleep(0.02)
            return step
        return build

    return {
        "bf16_matmul_loop": matmul_loop(20, 8192, torch.bfloat16),
        "fp32_matmul": matmul_loop(10, 4096, torch.float32, tf32=False),
        "tf32_matmul": matmul_loop(10, 4096, torch.float32, tf32=True),
        "fp32_conv": conv(False),
        "tf32_conv": conv(True),
        "pageable_copies": pageable,
        "pinned_copies": pinned,
        "small_kernels": small(1000, 1024),
        "small_kernels_graph": graphed,
        "large_kernels": small(200, 16 << 20),
        "item_in_loop": host_sync("item"),
        "sync_in_loop": host_sync("sync"),
        "no_sync_loop": host_sync("none"),
        "idle_between": idle("between"),
        "idle_before": idle("before"),
        "idle_after": idle("after"),
    }


def _selected(torch: Any, only: str) -> dict[str, Callable[[], Callable[[], Any]]]:
    built = workloads(torch)
    names = [n for n in only.split(",") if n] or list(built)
    return {n: built[n] for n in names if n in built}


def _defaults(torch: Any) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True


def trace_facts(path: Path) -> dict[str, Any]:
    """What a recorded trace holds: events per category, the host-side sync-like calls by name, size."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc.get("traceEvents", [])
    cats = collections.Counter(e.get("cat") for e in events)
    runtime = collections.Counter(e.get("name") for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    sync = collections.Counter(e.get("name") for e in events if e.get("cat") == "cuda_sync")
    sample = next((e for e in events if e.get("cat") == "cuda_sync"), None)
    memcpy = collections.Counter(e.get("name") for e in events if e.get("cat") == "gpu_memcpy")
    return {"bytes": path.stat().st_size, "categories": dict(cats), "runtime_calls": dict(runtime),
            "cuda_sync": dict(sync), "cuda_sync_sample": sample, "memcpy": dict(memcpy)}


def record(out: Path, only: str) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    folder = out / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}
    runs = list(_selected(torch, only).items())
    if not only or "item_in_loop" in only:
        runs.append(("item_in_loop_sync_events", workloads(torch)["item_in_loop"]))
    for name, build in runs:
        try:
            _defaults(torch)
            step = build()
            step()  # warm-up: libraries, autotuning, the graph's first replay
            torch.cuda.synchronize()
            kwargs: dict[str, Any] = {}
            if name.endswith("_sync_events"):
                kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
            began = time.perf_counter()
            with profile(activities=[ProfilerActivity.CUDA], **kwargs) as prof:
                step()
                torch.cuda.synchronize()
            seconds = time.perf_counter() - began
            raw = folder / f"{name}.json"
            prof.export_chrome_trace(str(raw))
            path = folder / f"{name}.json.gz"
            path.write_bytes(gzip.compress(raw.read_bytes(), 9))
            raw.unlink()
            found[name] = {"seconds": round(seconds, 4), **trace_facts(path)}
        except Exception:  # noqa: BLE001 - the others still record
            found[name] = {"error": traceback.format_exc(limit=4)}
    return found


def live(out: Path, only: str) -> dict[str, Any]:
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.capture.cupti import CuptiSource

    torch.zeros(1, device="cuda")
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    folder = out / "live"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {"cupti_version": source.version, "kinds": list(source.kinds)}
    built = _selected(torch, only)
    steps = {}
    for name, build in built.items():  # built and warmed up before the capture starts, as fixtures would
        try:
            _defaults(torch)
            steps[name] = build()
            steps[name]()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    source.start()
    windows = {}
    for name, step in steps.items():
        try:
            torch.cuda.synchronize()
            start = source.now()
            step()
            cutoff = source.now()
            torch.cuda.synchronize()
            windows[name] = (start, cutoff, source.now())
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    columns, dropped = source.drain()
    syncs = source.drain_syncs()
    source.stop()
    found["dropped"] = dropped
    found["all_syncs"] = dict(collections.Counter(syncs.names))
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    sync_starts = np.asarray(syncs.starts_ns, dtype=np.int64)
    sync_ends = sync_starts + np.asarray(syncs.durs_ns, dtype=np.int64)
    for name, (start, cutoff, end) in windows.items():
        try:
            inside = np.flatnonzero((ends > start) & (starts <= end))
            waits = np.flatnonzero((sync_ends > start) & (sync_starts <= end))
            events = [[columns.names[i], columns.kinds[i], int(columns.devices[i]), int(columns.streams[i]),
                       int(starts[i] - start), int(ends[i] - starts[i])] for i in inside.tolist()]
            waits_rows = [[syncs.names[i], int(sync_starts[i] - start), int(sync_ends[i] - sync_starts[i])]
                          for i in waits.tolist()]
            doc = {"name": name, "window_ns": int(end - start), "cutoff_ns": int(cutoff - start),
                   "events": events, "syncs": waits_rows}
            path = folder / f"{name}.json.gz"
            path.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
            found[name] = {"bytes": path.stat().st_size, "window_ms": (end - start) / 1e6, "events": len(events),
                           "kinds": dict(collections.Counter(e[1] for e in events)),
                           "syncs": dict(collections.Counter(w[0] for w in waits_rows)),
                           "sync_us": [round(w[2] / 1000, 1) for w in waits_rows[:5]]}
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    return found


def cost(out: Path, rounds: int = 7) -> dict[str, Any]:
    import statistics

    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.capture.cupti import ENABLED_KINDS, KIND_SYNCHRONIZATION, CuptiSource

    x = torch.zeros(1024, device="cuda")

    def launch_loop() -> None:
        for i in range(20_000):
            x.add_(1)
            if i % 100 == 0:
                x[0].item()

    def sync_loop() -> None:
        for _ in range(3_000):
            x.add_(1)
            x[0].item()

    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    variants = {"none": None, "gpu": ENABLED_KINDS, "gpu+sync": ENABLED_KINDS + (KIND_SYNCHRONIZATION,)}
    times: dict[str, dict[str, list[float]]] = {loop: {v: [] for v in variants} for loop in ("launch", "sync")}
    for loop_name, loop in (("launch", launch_loop), ("sync", sync_loop)):
        loop()
        torch.cuda.synchronize()
        for _ in range(rounds):
            for variant, kinds in variants.items():
                if kinds is not None:
                    source.kinds = kinds
                    source.start()
                began = time.perf_counter()
                loop()
                torch.cuda.synchronize()
                times[loop_name][variant].append(time.perf_counter() - began)
                if kinds is not None:
                    source.stop()
                    source.drain()
                    source.drain_syncs()
    medians = {loop: {v: statistics.median(t) * 1000 for v, t in per.items()} for loop, per in times.items()}
    return {"rounds": rounds, "median_ms": medians, "all_ms": {loop: {v: [round(s * 1000, 2) for s in t]
                                                                      for v, t in per.items()} for loop, per in times.items()}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--only", default="")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--part", choices=("record", "live", "cost"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.part:  # a child: one part, its result as JSON
        part = {"record": lambda: record(out, args.only), "live": lambda: live(out, args.only), "cost": lambda: cost(out)}
        (out / f"{args.part}.json").write_text(json.dumps(part[args.part](), indent=1, default=str))
        return 0
    summary: dict[str, Any] = {"argv": argv}
    try:
        import torch

        summary.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    except Exception as exc:  # noqa: BLE001
        summary["torch_error"] = repr(exc)
    parts = [("record", 150)] + ([] if args.skip_live else [("live", 90)]) + ([] if args.skip_cost else [("cost", 60)])
    for part, limit in parts:
        began = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, str(out), "--only", args.only, "--part", part],
                                  capture_output=True, text=True, timeout=limit)
            result_file = out / f"{part}.json"
            summary[part] = json.loads(result_file.read_text()) if result_file.exists() else None
            summary[f"{part}_rc"] = done.returncode
            if done.returncode:
                summary[f"{part}_stderr"] = done.stderr[-3000:]
        except subprocess.TimeoutExpired as exc:
            summary[f"{part}_error"] = f"timed out after {limit} s: {str(exc.stderr or '')[-2000:]}"
        summary[f"{part}_seconds"] = round(time.perf_counter() - began, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    lines = [f"{summary.get('gpu')} torch {summary.get('torch')}"]
    for name, facts in (summary.get("record") or {}).items():
        if "error" in facts:
            lines.append(f"record {name}: ERROR {facts['error'].strip().splitlines()[-1]}")
        else:
            syncs = {k: v for k, v in facts["runtime_calls"].items() if "ync" in k or k == "cudaMemcpy"}
            lines.append(f"record {name}: {facts['bytes']} B {facts['categories'].get('kernel', 0)} kernels "
                         f"{facts['categories'].get('gpu_memcpy', 0)} copies syncs {syncs} cuda_sync {facts['cuda_sync']}")
    for name, facts in (summary.get("live") or {}).items():
        if isinstance(facts, dict):
            lines.append(f"live {name}: {facts}")
    if summary.get("cost"):
        lines.append(f"cost median ms: {summary['cost']['median_ms']}")
    for part, _ in parts:
        if summary.get(f"{part}_rc") or summary.get(f"{part}_error"):
            lines.append(f"{part}: rc {summary.get(f'{part}_rc')} {summary.get(f'{part}_error', '')} "
                         f"{summary.get(f'{part}_stderr', '')[-800:]}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
