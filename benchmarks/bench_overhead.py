"""(GPU) What --gpu-util costs on the suite shapes users have, measured side by side.

    python benchmarks/bench_overhead.py --out DIR [--repeats 3] [--suites small,launch_bound,gpu_bound]
                                        [--extra-args "..."]

Runs each suite of ``benchmarks/overhead_suites/`` plain and with ``--gpu-util``, alternating
(plain, gpu_util, plain, gpu_util, ...) in fresh processes, ``--repeats`` times, and reads
pytest's own reported time ("N passed in X s") and the plugin's one-time profiler start-up
("profiler start-up X s, not charged to any test"). The ratio of a repeat is
(gpu_util time - start-up) / plain time; the suite's ``ratio`` is the median over repeats
(``ratio_with_startup`` keeps the start-up in). Writes DIR/overhead.json:

    {"gpu": ..., "torch": ..., "date": ..., "suites": {"small": {"plain_s": [...],
     "gpu_util_s": [...], "startup_s": [...], "ratio": ..., "ratio_with_startup": ...}, ...},
     "startup_s": median start-up over all runs}

and prints a short table last. Needs CUDA.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
SUITES = {
    "small": "test_small_ops.py",
    "launch_bound": "test_launch_bound.py",
    "gpu_bound": "test_gpu_bound.py",
}
#: pytest's last line: "300 passed in 1.23s" (or "... in 75.02s (0:01:15)")
REPORTED = re.compile(r"\bin ([0-9.]+)s\b")
STARTUP = re.compile(r"profiler start-up ([0-9.]+) s")
MEASURE = re.compile(r"measurement cost ([0-9.]+) s")


def reported_seconds(output: str) -> float:
    lines = [line for line in output.strip().splitlines() if REPORTED.search(line) and ("passed" in line or "failed" in line)]
    if not lines:
        raise ValueError("no 'N passed in X s' line in pytest's output")
    return float(REPORTED.findall(lines[-1])[-1])


def first_float(pattern: re.Pattern[str], output: str) -> Optional[float]:
    match = pattern.search(output)
    return float(match.group(1)) if match else None


def run_suite(suite: str, gpu_util: bool, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", str(HERE / "overhead_suites" / SUITES[suite]), "-q", "-p", "no:cacheprovider",
           "--rootdir", str(HERE / "overhead_suites")]
    if gpu_util:
        cmd += ["--gpu-util", f"--gpu-util-dir={out_dir / f'gpu_util_{suite}'}", *extra]
    res = subprocess.run(cmd, capture_output=True, text=True)
    output = res.stdout + res.stderr
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{output[-4000:]}")
    return {"seconds": reported_seconds(output), "startup_s": first_float(STARTUP, output),
            "measure_s": first_float(MEASURE, output), "tail": output.strip().splitlines()[-6:]}


def measure(suites: list[str], repeats: int, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    found: dict[str, dict[str, list[Any]]] = {s: {"plain_s": [], "gpu_util_s": [], "startup_s": [], "measure_s": []} for s in suites}
    tails: dict[str, list[str]] = {}
    for _ in range(repeats):
        for suite in suites:
            plain = run_suite(suite, False, out_dir, extra)
            profiled = run_suite(suite, True, out_dir, extra)
            found[suite]["plain_s"].append(plain["seconds"])
            found[suite]["gpu_util_s"].append(profiled["seconds"])
            found[suite]["startup_s"].append(profiled["startup_s"])
            found[suite]["measure_s"].append(profiled["measure_s"])
            tails[suite] = profiled["tail"]
    result: dict[str, Any] = {}
    for suite, f in found.items():
        startups = [s or 0.0 for s in f["startup_s"]]
        result[suite] = {
            **f,
            "ratio": statistics.median((g - s) / p for g, s, p in zip(f["gpu_util_s"], startups, f["plain_s"])),
            "ratio_with_startup": statistics.median(g / p for g, p in zip(f["gpu_util_s"], f["plain_s"])),
            "last_gpu_util_tail": tails[suite],
        }
    return result


def machine() -> dict[str, Any]:
    import torch

    return {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--extra-args", default="", help="more options for the --gpu-util runs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    suites = [s for s in args.suites.split(",") if s]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; known: {', '.join(SUITES)}")
    doc = {**machine(), "date": dt.date.today().isoformat(), "repeats": args.repeats,
           "extra_args": args.extra_args,
           "suites": measure(suites, args.repeats, Path(tempfile.mkdtemp(prefix="overhead_")), shlex.split(args.extra_args))}
    startups = [s for suite in doc["suites"].values() for s in suite["startup_s"] if s is not None]
    doc["startup_s"] = statistics.median(startups) if startups else None
    (args.out / "overhead.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{doc['gpu']}, torch {doc['torch']}, {doc['date']}; start-up {doc['startup_s']} s (median)")
    print(f"{'suite':14} {'plain s':>22} {'--gpu-util s':>22} {'ratio':>6} {'w/ start-up':>11}")
    for suite, s in doc["suites"].items():
        plain = "/".join(f"{v:.2f}" for v in s["plain_s"])
        prof = "/".join(f"{v:.2f}" for v in s["gpu_util_s"])
        print(f"{suite:14} {plain:>22} {prof:>22} {s['ratio']:6.3f} {s['ratio_with_startup']:11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
