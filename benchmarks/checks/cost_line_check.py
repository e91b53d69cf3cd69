"""(CPU or GPU) Does the summary's "measurement cost" line tell the truth? N small tests, plain and
with --gpu-util, in interleaved rounds, each in a fresh process.

    python benchmarks/checks/cost_line_check.py [--tests 1000] [--rounds 5] [--out FILE.json]
        [--gpu] [--hooks] [-- EXTRA --gpu-util ARGS]

Per round, the measured run's span (the first test's set-up to the end of the terminal summary,
phase_timer.py's stamps) less the plain run's span of the same round is what the plugin cost (and
the same span in the process's CPU time, steadier on a host shared with other work); the run's
printed line ("measurement cost X s", the summary up to it included) and ``totals.measure_ms`` in
its gpu_util.json (written before the summary) are what it says it cost. Prints both
per round, in µs a test, their ratio, and the medians; ``--out`` writes them as JSON. The suite is
the tests' synthetic GPU (tests/helpers: four kernels and a host wait a test) unless ``--gpu``
(one small CUDA kernel a test, on a real GPU). ``--hooks`` adds hook_timer.py's per-hook µs a test
of the measured runs (median over rounds). The line agrees when the ratio is within 0.8-1.2.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: phase_timer.py and hook_timer.py
DIAGNOSTICS = ROOT / "benchmarks" / "diagnostics"

sys.path.insert(0, str(DIAGNOSTICS))
#: the synthetic suite cpu_per_test_cost.py times: four kernels and a host wait a test
from cpu_per_test_cost import TEST_FILE as SYNTHETIC_TESTS  # noqa: E402

GPU_TESTS = '''
import pytest
import torch

X = torch.ones(1024, device="cuda")


@pytest.mark.parametrize("i", range({tests}))
def test_small(i):
    (X * 2).sum().item()
'''


#: a plugin stamping the process's CPU time at the first test's set-up and at pytest_unconfigure
#: (after every summary), to compare on a host whose wall clock other work disturbs
CPU_STAMPS = '''
import json, time
import pytest

_T = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _T.setdefault("first_setup", time.process_time())


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if "first_setup" in _T:
        print("CPUSPAN " + json.dumps({"cpu_s": time.process_time() - _T["first_setup"]}))
'''


def gc_among_tests(stdout: str) -> dict:
    """phase_timer's GC line: per generation, the collections between the first set-up and the last
    teardown and their seconds (a full one walks every object torch made; none is the plugin's own time)."""
    found = re.search(r"^GC (\{.*\})$", stdout, re.M)
    return json.loads(found.group(1)) if found else {}


def run_once(folder: Path, extra: list[str] | None, hooks: bool) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "phase_timer", "-p", "cost_line_stamps",
           *(["-p", "hook_timer"] if hooks and extra is not None else []), "test_small.py"]
    out_dir = folder / "out"
    if extra is not None:
        cmd += ["--gpu-util", f"--gpu-util-dir={out_dir}", *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DIAGNOSTICS), str(ROOT), str(folder),
                                                       os.environ.get("PYTHONPATH", "")]), COLUMNS="250")
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=900)
    found = re.search(r"^PHASES (\{.*\})$", done.stdout, re.M)
    if found is None:
        raise RuntimeError(f"no PHASES line from {' '.join(cmd)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    phases = json.loads(found.group(1))
    got = {"span_s": phases["summary_end"] - phases["first_setup"],
           "cpu_s": json.loads(re.search(r"^CPUSPAN (\{.*\})$", done.stdout, re.M).group(1))["cpu_s"],
           "gc": gc_among_tests(done.stdout)}
    if extra is not None:
        totals = json.loads((out_dir / "gpu_util.json").read_text())["totals"]
        got["line_s"] = totals["measure_ms"] / 1000
        got["in_tests_s"] = totals["measure_in_tests_ms"] / 1000
        printed = re.search(r"measurement cost ([0-9.]+) s", done.stdout)  # the terminal's line: the summary too
        got["printed_s"] = float(printed.group(1)) if printed else None
        timed = re.search(r"^HOOKTIME (\{.*\})$", done.stdout, re.M)
        if timed:
            got["hooks"] = json.loads(timed.group(1))
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gpu", action="store_true", help="a real CUDA suite instead of the synthetic GPU")
    parser.add_argument("--hooks", action="store_true", help="also time the plugin's hooks (hook_timer.py)")
    parser.add_argument("extra", nargs="*", help="more --gpu-util options (after --)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="cost_line_") as tmp:
        folder = Path(tmp)
        (folder / "cost_line_stamps.py").write_text(CPU_STAMPS)
        if args.gpu:
            (folder / "test_small.py").write_text(GPU_TESTS.replace("{tests}", str(args.tests)))
        else:
            from tests.helpers import SYNTHETIC_CONFTEST

            (folder / "conftest.py").write_text("import torch  # noqa: F401 - a GPU suite has it loaded\n"
                                                + SYNTHETIC_CONFTEST)
            (folder / "test_small.py").write_text(SYNTHETIC_TESTS.replace("{tests}", str(args.tests)))
        run_once(folder, None, False)  # warm the file system and the bytecode caches
        for index in range(args.rounds):
            order = [None, list(args.extra)] if index % 2 == 0 else [list(args.extra), None]
            got = {("plain" if extra is None else "gpu_util"): run_once(folder, extra, args.hooks) for extra in order}
            measured, plain = got["gpu_util"], got["plain"]
            rounds.append({"plain_span_s": plain["span_s"], "span_s": measured["span_s"],
                           "span_diff_s": measured["span_s"] - plain["span_s"],
                           "plain_cpu_s": plain["cpu_s"], "cpu_s": measured["cpu_s"],
                           "cpu_diff_s": measured["cpu_s"] - plain["cpu_s"], "line_s": measured["line_s"],
                           "printed_s": measured["printed_s"],
                           "in_tests_s": measured["in_tests_s"], "hooks": measured.get("hooks"),
                           "plain_gc": plain["gc"], "gc": measured["gc"]})
    n = args.tests
    print(f"{n} tests{' (CUDA)' if args.gpu else ' (synthetic GPU)'}, {args.rounds} interleaved rounds; "
          "µs a test beyond plain")
    print(f"  {'round':>5} {'plain span':>10} {'span diff':>10} {'CPU diff':>10} {'JSON line':>10} "
          f"{'printed':>10} {'printed/span':>12} {'printed/CPU':>11}")
    for i, r in enumerate(rounds):
        printed = r["printed_s"] or 0.0
        ratio = printed / r["span_diff_s"] if r["span_diff_s"] > 0 else float("nan")
        cpu_ratio = printed / r["cpu_diff_s"] if r["cpu_diff_s"] > 0 else float("nan")
        print(f"  {i:>5} {r['plain_span_s'] / n * 1e6:>10.1f} {r['span_diff_s'] / n * 1e6:>10.1f} "
              f"{r['cpu_diff_s'] / n * 1e6:>10.1f} {r['line_s'] / n * 1e6:>10.1f} {printed / n * 1e6:>10.1f} "
              f"{ratio:>12.2f} {cpu_ratio:>11.2f}")
    diff = statistics.median(r["span_diff_s"] for r in rounds)
    cpu_diff = statistics.median(r["cpu_diff_s"] for r in rounds)
    line = statistics.median(r["printed_s"] or 0.0 for r in rounds)
    summary = {"tests": n, "rounds": args.rounds, "gpu": args.gpu, "extra": args.extra,
               "plain_us_per_test": statistics.median(r["plain_span_s"] for r in rounds) / n * 1e6,
               "span_diff_us_per_test": diff / n * 1e6, "cpu_diff_us_per_test": cpu_diff / n * 1e6,
               "line_us_per_test": line / n * 1e6,
               "json_line_us_per_test": statistics.median(r["line_s"] for r in rounds) / n * 1e6,
               "ratio_of_medians": line / diff if diff > 0 else None,
               "cpu_ratio_of_medians": line / cpu_diff if cpu_diff > 0 else None,
               "ratios": [(r["printed_s"] or 0.0) / r["span_diff_s"] if r["span_diff_s"] > 0 else None for r in rounds],
               "cpu_ratios": [(r["printed_s"] or 0.0) / r["cpu_diff_s"] if r["cpu_diff_s"] > 0 else None
                              for r in rounds]}
    print(f"  median: span diff {summary['span_diff_us_per_test']:.1f} µs a test, CPU-time diff "
          f"{summary['cpu_diff_us_per_test']:.1f}, printed cost line {summary['line_us_per_test']:.1f} "
          f"(gpu_util.json {summary['json_line_us_per_test']:.1f}); line/span diff "
          f"{summary['ratio_of_medians'] or float('nan'):.2f}, line/CPU diff {summary['cpu_ratio_of_medians'] or float('nan'):.2f}")
    for name, key in (("plain", "plain_gc"), ("--gpu-util", "gc")):
        full = [r[key].get("gen2", {}) for r in rounds if r.get(key)]
        if full:
            summary[f"{key}_full_among_tests"] = {"n": [g.get("n") for g in full], "s": [g.get("s") for g in full]}
            print(f"  full garbage collections among the tests, {name}: {[g.get('n') for g in full]} a round, "
                  f"median {statistics.median(g.get('s', 0.0) for g in full):.3f} s")
    hooks = [r["hooks"] for r in rounds if r.get("hooks")]
    if hooks:
        names = sorted({k for h in hooks for k in h})
        per_test = {k: statistics.median(h[k][1] for h in hooks if k in h) / n * 1e6 for k in names}
        summary["hooks_us_per_test"] = per_test
        print("  hook_timer, µs a test (median over rounds; nested names count twice):")
        for name, us in sorted(per_test.items(), key=lambda kv: -kv[1])[:25]:
            print(f"    {us:8.1f}  {name}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
