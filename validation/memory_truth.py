"""(GPU) Per-test GPU memory against what the tests are known to do.

    python validation/memory_truth.py --out DIR

Runs ``pytest --gpu-util --gpu-util-memory-history`` (in a fresh process) on four tests with known
memory behaviour (``tests/helpers/memory_workloads.py``, which the project's GPU tests run too): a
1 GiB tensor allocated and freed, 256 MiB kept alive in a module global under ``max_leak="1 MiB"``,
an allocation that cannot fit (out of memory), and kernel_bench (the profiler steps aside; memory
is still measured). Checks the figures, writes DIR/memory_truth.json,
.md and the pytest output (memory_truth.log), and prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers.memory_workloads import LEAK_LINE, OOM_LINE, TESTS  # noqa: E402


def checks(records: dict[str, dict[str, Any]], output: str) -> list[dict[str, Any]]:
    """Each expectation with the figure seen and whether it holds."""
    gib, leak = records["test_1_one_gib"], records["test_2_keeps_256_mib"]
    oom, bench = records["test_3_out_of_memory"], records["test_4_kernel_bench"]
    rows = [
        ("1 GiB tensor: peak_alloc_mb within 2 MiB of 1024", gib["peak_alloc_mb"], abs(gib["peak_alloc_mb"] - 1024) <= 2),
        ("256 MiB kept: leaked_mb within 2 MiB of 256", leak["leaked_mb"], abs(leak["leaked_mb"] - 256) <= 2),
        ("256 MiB kept: fails max_leak=1 MiB", leak["outcome"], leak["outcome"] == "failed"),
        ("failure report names the allocating line", f"test_mem.py:{LEAK_LINE}",
         f"test_mem.py:{LEAK_LINE} (test_2_keeps_256_mib)" in output),
        ("out of memory: the record is kept, ooms = 1", oom["ooms"], oom["ooms"] == 1 and oom["outcome"] == "failed"),
        ("out of memory: the failure report names the allocating line", f"test_mem.py:{OOM_LINE}",
         "asking for" in output and f"test_mem.py:{OOM_LINE} (test_3_out_of_memory)" in output),
        ("out of memory: the note says what was live", oom["note"], "out of GPU memory" in (oom["note"] or "")),
        ("kernel_bench: memory measured without the profiler", bench["peak_alloc_mb"],
         bench["gpu_busy_ms"] is None and (bench["peak_alloc_mb"] or 0) >= 64),
    ]
    return [{"check": c, "seen": seen, "holds": bool(ok)} for c, seen, ok in rows]


def meter_cost_ms(torch: Any, tests: int = 2000) -> float:
    """What reading the memory counters costs a test (no history): the median of begin() + end()."""
    import time

    from pytest_gpuutil.capture.memory import MemoryMeter

    meter = MemoryMeter(torch)
    keep = torch.empty(1 << 20, device="cuda")  # CUDA up, something allocated
    costs = []
    for _ in range(tests):
        began = time.perf_counter()
        meter.end(meter.begin())
        costs.append(time.perf_counter() - began)
    del keep
    return sorted(costs)[len(costs) // 2] * 1000


def run(folder: Path, extra: list[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    (folder / "test_mem.py").write_text(TESTS)
    res = subprocess.run([sys.executable, "-m", "pytest", "test_mem.py", "-p", "no:cacheprovider", "--gpu-util", *extra],
                         capture_output=True, text=True, cwd=folder)
    doc = json.loads((folder / ".gpu_util" / "gpu_util.json").read_text())
    return res.stdout + res.stderr, {t["test"].split("::")[1]: t for t in doc["tests"]}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    output, records = run(Path(tempfile.mkdtemp(prefix="memory_truth_")), ["--gpu-util-memory-history"])
    rows = checks(records, output)
    cost = meter_cost_ms(torch)
    rows.append({"check": "cost of the counters per test (median of 2,000) <= 0.2 ms", "seen": f"{cost:.4f} ms",
                 "holds": cost <= 0.2})
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "checks": rows,
           "records": {name: {k: r.get(k) for k in ("outcome", "peak_alloc_mb", "peak_reserved_mb", "leaked_mb",
                                                     "alloc_retries", "ooms", "note")} for name, r in records.items()}}
    (args.out / "memory_truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "memory_truth.log").write_text(output)
    lines = [f"## GPU memory per test on {doc['gpu']} (torch {doc['torch']})", "", "| check | seen | holds |", "|---|---|---|"]
    lines += [f"| {r['check']} | {r['seen']} | {'yes' if r['holds'] else 'NO'} |" for r in rows]
    (args.out / "memory_truth.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
