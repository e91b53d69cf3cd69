"""(GPU) Where a --gpu-util session's time goes, phase by phase, beside a plain run.

    python benchmarks/diagnostics/session_phases.py --out DIR [--rounds 2] [--suite small ...]
        [--config NAME=ARGS ...]

Runs benchmarks/overhead_suites/ suites in fresh processes, plain and with each configuration
(default: ``default`` = --gpu-util, ``children_off``, ``findings_off``, ``counters_on``), with
phase_timer.py stamping the phases, and times the plugin's session-level pieces in one process
(NVML's process sampler, CUPTI's start, flush and stop). Writes DIR/session_phases.json and a
table on stdout: per configuration, the median seconds of the collection (start to the loop),
the preparation (loop start to the first set-up), the tests (first set-up to the last teardown),
the loop's end, the session finish and the terminal summary, and each run's full garbage
collections while its tests ran (count and seconds).

``--hooks`` adds hook_timer.py: per configuration, the median time inside the plugin's hooks and
per-test methods, in microseconds per test, largest first. ``--warmup`` runs each suite in each
configuration once, untimed, first (with bytecode writing allowed, the timed runs then read every
module from its cache).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITES = {"small": "test_small_ops.py", "launch_bound": "test_launch_bound.py", "gpu_bound": "test_gpu_bound.py"}
CONFIGS = {"plain": None, "default": [], "children_off": ["--gpu-util-children=off"],
           "findings_off": ["--gpu-util-findings=off"], "counters_on": ["--gpu-util-counters=auto"]}
SPANS = (("collection", "start", "loop_begin"), ("preparation", "loop_begin", "first_setup"),
         ("tests", "first_setup", "last_teardown"), ("loop_end", "last_teardown", "loop_end"),
         # from the loop's end: pytest-gpuutil's session finish is a tryfirst wrapper (before pytest
         # writes its JUnit file, pytest-benchmark its JSON), outside phase_timer's, so it comes before finish_begin
         ("finish", "loop_end", "finish_end"), ("summary", "summary_begin", "summary_end"))


TESTS = {"small": 300, "launch_bound": 20, "gpu_bound": 20}


def run_once(suite: str, args: list[str] | None, out: Path, hooks: bool = False) -> dict:
    cmd = [sys.executable, "-m", "pytest", str(HERE.parent / "overhead_suites" / SUITES[suite]), "-q",
           "-p", "no:cacheprovider", "-p", "phase_timer", *(["-p", "hook_timer"] if hooks else [])]
    if args is not None:
        cmd += ["--gpu-util", f"--gpu-util-dir={tempfile.mkdtemp(prefix='phases_', dir=out)}", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    found = re.search(r"^PHASES (\{.*\})$", res.stdout, re.M)
    phases = json.loads(found.group(1)) if found else {}
    reported = re.search(r"passed in ([0-9.]+)s", res.stdout)
    measure = re.search(r"measurement cost ([0-9.]+) s", res.stdout)
    startup = re.search(r"profiler start-up ([0-9.]+) s", res.stdout)
    counters = re.search(r"hardware counters start-up ([0-9.]+) s", res.stdout)
    spans = {name: round(phases[b] - phases[a], 4) for name, a, b in SPANS if a in phases and b in phases}
    collections = re.search(r"^GC (\{.*\})$", res.stdout, re.M)
    hook_times = re.search(r"^HOOKTIME (\{.*\})$", res.stdout, re.M)
    return {"rc": res.returncode, "reported_s": float(reported.group(1)) if reported else None, "spans": spans,
            "hooks": json.loads(hook_times.group(1)) if hook_times else {},
            "gc_during_tests": json.loads(collections.group(1)) if collections else {},
            "measure_s": float(measure.group(1)) if measure else None,
            "startup_s": float(startup.group(1)) if startup else None,
            "counters_startup_s": float(counters.group(1)) if counters else None,
            "tail": res.stdout.strip().splitlines()[-3:] if res.returncode else []}


def components() -> dict:
    """The plugin's session-level pieces, timed one by one in this process."""
    import torch

    torch.ones(1, device="cuda").sum().item()
    out: dict = {}
    try:
        from pytest_gpuutil.children.child_state import NvmlSampler

        t = time.perf_counter(); sampler = NvmlSampler(); out["nvml_init_s"] = time.perf_counter() - t
        t = time.perf_counter(); sampler.sample(); out["nvml_sample_s"] = time.perf_counter() - t
        sampler.start(); time.sleep(0.6)
        t = time.perf_counter(); sampler.take(); out["nvml_take_s"] = time.perf_counter() - t
        t = time.perf_counter(); sampler.stop(); out["nvml_stop_s"] = time.perf_counter() - t
    except Exception as exc:  # noqa: BLE001
        out["nvml_error"] = repr(exc)
    from pytest_gpuutil.capture.cupti import CuptiSource

    source = CuptiSource(demangle=torch._C._demangle)
    t = time.perf_counter(); source.start(); out["cupti_start_s"] = time.perf_counter() - t
    x = torch.ones(1024, device="cuda")
    for _ in range(2000):
        x.add_(1.0)
    torch.cuda.synchronize()
    t = time.perf_counter(); columns, _ = source.drain(); out["cupti_drain_2000_s"] = time.perf_counter() - t
    out["cupti_drained_events"] = len(columns)
    t = time.perf_counter(); source.stop(); out["cupti_stop_s"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(1000):
        torch.cuda.synchronize()
    out["synchronize_idle_us"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    for _ in range(1000):
        torch.cuda.memory_stats(0)
    out["memory_stats_us"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    for _ in range(1000):
        source.now()
    out["cupti_now_us"] = (time.perf_counter() - t) * 1000
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--suite", action="append", choices=sorted(SUITES))
    parser.add_argument("--config", action="append", default=[], help="NAME=ARGS (added to the defaults)")
    parser.add_argument("--only", action="append", help="run only these configurations (plain always runs)")
    parser.add_argument("--hooks", action="store_true", help="time the plugin's hooks and per-test methods")
    parser.add_argument("--warmup", action="store_true", help="one untimed run of each suite and configuration first")
    parser.add_argument("--no-components", action="store_true", help="skip the one-process component timings")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = dict(CONFIGS)
    for item in args.config:
        name, _, extra = item.partition("=")
        configs[name] = extra.split()
    if args.only:
        configs = {k: v for k, v in configs.items() if k == "plain" or k in args.only}
    doc: dict = {"components": {} if args.no_components else components(), "runs": {}}
    for suite in args.suite or sorted(SUITES):
        if args.warmup:
            for extra in configs.values():
                run_once(suite, extra, args.out, args.hooks)
        for _ in range(args.rounds):
            for name, extra in configs.items():
                doc["runs"].setdefault(suite, {}).setdefault(name, []).append(run_once(suite, extra, args.out, args.hooks))
        (args.out / "session_phases.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["components"]))
    names = [n for n, _, _ in SPANS]
    for suite, by in doc["runs"].items():
        print(f"\n{suite}: median s      reported  " + "  ".join(f"{n:>11}" for n in names)
              + "    measure  start-up  full GCs in the tests (s)")
        for name, runs in by.items():
            med = lambda key: statistics.median([r["spans"].get(key, float("nan")) for r in runs])  # noqa: E731
            rep = statistics.median([r["reported_s"] or float("nan") for r in runs])
            meas = [r["measure_s"] for r in runs if r["measure_s"] is not None]
            st = [(r["startup_s"] or 0) + (r["counters_startup_s"] or 0) for r in runs]
            full = [r.get("gc_during_tests", {}).get("gen2", {}) for r in runs]
            print(f"  {name:14} {rep:9.3f}  " + "  ".join(f"{med(n):11.4f}" for n in names)
                  + f"  {statistics.median(meas) if meas else float('nan'):9.3f}  {statistics.median(st):8.3f}"
                  + "  " + " ".join(f"{f.get('n', '?')} ({f.get('s', 0):.3f})" for f in full))
        if args.hooks:
            print_hooks(suite, by)
    return 0


def print_hooks(suite: str, by: dict) -> None:
    """Per configuration, the plugin's hooks and methods by median time, in microseconds per test."""
    for name, runs in by.items():
        names = sorted({k for r in runs for k in r.get("hooks", {})})
        if not names:
            continue
        got = lambda key, i: statistics.median(r["hooks"].get(key, [0, 0.0, 0.0])[i] for r in runs)  # noqa: E731
        rows = sorted(((got(k, 1), k, got(k, 0), got(k, 2)) for k in names), reverse=True)
        print(f"  {suite} / {name}: microseconds per test, calls per run, microseconds of the median call "
              "(medians over runs)")
        for seconds, key, calls, one in rows[:28]:
            print(f"    {key:44} {seconds / TESTS[suite] * 1e6:9.1f}  {calls:7.0f}  {one * 1e6:9.1f}")


if __name__ == "__main__":
    sys.exit(main())
