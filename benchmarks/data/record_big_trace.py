"""(GPU) Record a big real Kineto trace: ~40k tiny kernels plus some matmuls, CPU+CUDA activity.

    python benchmarks/data/record_big_trace.py --out DIR [--kernels 40000] [--matmul-every 400]

Writes ``DIR/big_trace.json.gz`` (the Chrome trace exactly as ``export_chrome_trace`` wrote it,
gzip'd) and ``DIR/big_trace.json``/``.md`` facts (size, event counts); prints the size and the
event count last. Feed the trace to ``benchmarks/bench_analyze_speed.py``. About 20-40 s on an H100
(most of it the profiler's export).
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.report import host_info, markdown_table, text_table, write_results  # noqa: E402


def record(out_dir: str, kernels: int, matmul_every: int) -> dict[str, Any]:
    """Profile the workload, export and gzip the trace; return the facts about it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise SystemExit("record_big_trace.py needs a CUDA GPU")
    x = torch.zeros(1024, device="cuda")
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):  # warm up cuBLAS and the add kernel outside the trace
        x.add_(1)
        a @ a
    torch.cuda.synchronize()

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(kernels):
            x.add_(1)
            if matmul_every and i % matmul_every == 0:
                a @ a
        torch.cuda.synchronize()
    profiled_s = time.perf_counter() - start

    os.makedirs(out_dir, exist_ok=True)
    gz_path = os.path.join(out_dir, "big_trace.json.gz")
    with tempfile.TemporaryDirectory() as tmp:
        raw_path = os.path.join(tmp, "big_trace.json")
        t0 = time.perf_counter()
        prof.export_chrome_trace(raw_path)
        export_s = time.perf_counter() - t0
        raw_bytes = os.path.getsize(raw_path)
        with open(raw_path, "rb") as src, gzip.open(gz_path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        with open(raw_path, encoding="utf-8") as handle:
            events = json.load(handle)["traceEvents"]
    cats = collections.Counter(str(e.get("cat", e.get("ph", "?"))) for e in events)
    return {
        "path": os.path.abspath(gz_path),
        "raw_mb": raw_bytes / 1e6,
        "gz_mb": os.path.getsize(gz_path) / 1e6,
        "events": len(events),
        "by_cat": dict(cats.most_common()),
        "tiny_kernels_launched": kernels,
        "matmuls_launched": len(range(0, kernels, matmul_every)) if matmul_every else 0,
        "profiled_wall_s": profiled_s,
        "export_s": export_s,
        "x_final_ok": bool((x == kernels + 20).all().item()),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "host": host_info(),
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out", help="output folder (default %(default)s)")
    parser.add_argument("--kernels", type=int, default=40_000, help="tiny add_ kernels (default %(default)s)")
    parser.add_argument("--matmul-every", type=int, default=400, help="one 1024² bf16 matmul every N kernels (0: none)")
    args = parser.parse_args(argv)
    if args.kernels < 1 or args.matmul_every < 0:
        parser.error("--kernels must be >= 1 and --matmul-every >= 0")
    facts = record(args.out, args.kernels, args.matmul_every)
    headers = ["trace", "events", "kernel", "cpu_op", "cuda_runtime", "ac2g", "raw MB", "gz MB"]
    cats = facts["by_cat"]
    row = [os.path.basename(facts["path"]), facts["events"], cats.get("kernel", 0), cats.get("cpu_op", 0),
           cats.get("cuda_runtime", 0), cats.get("ac2g", 0), facts["raw_mb"], facts["gz_mb"]]
    markdown = "\n".join([
        f"### Big recorded trace ({facts['gpu']}, torch {facts['torch']})", "",
        f"{facts['tiny_kernels_launched']:,} `x.add_(1)` kernels on a 1k tensor and {facts['matmuls_launched']} "
        f"1024² bf16 matmuls, CPU+CUDA activity; profiled {facts['profiled_wall_s']:.2f} s, "
        f"export {facts['export_s']:.2f} s.", "",
        markdown_table(headers, [row], digits=1),
    ])
    json_path, md_path = write_results(args.out, "big_trace", facts, markdown)
    print(f"wrote {facts['path']}, {json_path}, {md_path}")
    print(text_table(headers, [row], digits=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
