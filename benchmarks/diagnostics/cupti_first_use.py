"""(GPU) Does an active CUPTI capture slow a process's first use of cuBLAS, or steady-state matmuls?

    python benchmarks/diagnostics/cupti_first_use.py [--repeats 4]

Fresh processes, interleaved: CUDA context first (as the overhead suites' conftest does), then
optionally the plugin's CUPTI source started, then the first 4096^3 bf16 matmul (cuBLAS handle,
workspace and kernel load) and 200 more. Prints seconds per phase for each mode.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time
import torch
torch.ones(1, device="cuda").sum().item()
mode = sys.argv[1]
t0 = time.perf_counter()
if mode == "cupti":
    from pytest_gpuutil.capture.cupti import CuptiSource
    source = CuptiSource()
    source.start()
t1 = time.perf_counter()
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = a @ a
torch.cuda.synchronize()
t2 = time.perf_counter()
for _ in range(200):
    c = a @ a
torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"start": t1 - t0, "first_matmul": t2 - t1, "200_matmuls": t3 - t2}))
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "cupti": []}
    for _ in range(args.repeats):
        for mode in runs:
            out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for mode, rows in runs.items():
        print(mode, {k: round(statistics.median(r[k] for r in rows), 4) for k in rows[0]},
              [round(r["first_matmul"], 3) for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
