"""(CPU) Two checkouts' per-test cost beside one plain run, interleaved: span, CPU time and the cost line.

    python benchmarks/checks/per_test_ab.py BEFORE_ROOT AFTER_ROOT [--tests 1000] [--rounds 5]
        [--hooks] [--gpu] [--out FILE.json] [-- EXTRA --gpu-util ARGS]

cost_line_check.py's synthetic suite (the tests' synthetic GPU: four kernels and a host wait a
test) and its stamps, run per round plain, with BEFORE's ``pytest_gpuutil`` and with AFTER's (each
root first on PYTHONPATH; the order rotating), each a fresh process. Prints per checkout the median
over rounds, in µs a test beyond the same round's plain run: the span difference (first set-up to
the end of the terminal summary), the process's CPU-time difference over that span, the printed
"measurement cost" line, the line over each difference, the full garbage collections among the tests (phase_timer's), and with ``--hooks`` hook_timer's µs a
test inside the plugin's hooks (not counting nested rows).
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
DIAGNOSTICS = ROOT / "benchmarks" / "diagnostics"
sys.path.insert(0, str(HERE))
from cost_line_check import CPU_STAMPS, GPU_TESTS, SYNTHETIC_TESTS, gc_among_tests  # noqa: E402


def run_once(folder: Path, root: Path | None, extra: list[str], hooks: bool) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "phase_timer", "-p", "cost_line_stamps",
           *(["-p", "hook_timer"] if hooks and root is not None else []), "test_small.py"]
    if root is not None:
        cmd += ["--gpu-util", f"--gpu-util-dir={folder / ('out_' + root.name)}", *extra]
    path = [str(root)] if root is not None else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, str(DIAGNOSTICS), str(ROOT), str(folder), os.environ.get("PYTHONPATH", "")]), COLUMNS="250")
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=900)
    found = re.search(r"^PHASES (\{.*\})$", done.stdout, re.M)
    if found is None or done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} ({root}) exited {done.returncode}:\n{done.stdout[-1500:]}\n"
                           f"{done.stderr[-3000:]}")
    phases = json.loads(found.group(1))
    got = {"span_s": phases["summary_end"] - phases["first_setup"],
           "cpu_s": json.loads(re.search(r"^CPUSPAN (\{.*\})$", done.stdout, re.M).group(1))["cpu_s"]}
    got["gc"] = gc_among_tests(done.stdout)
    printed = re.search(r"measurement cost ([0-9.]+) s", done.stdout)
    got["printed_s"] = float(printed.group(1)) if printed else None
    timed = re.search(r"^HOOKTIME (\{.*\})$", done.stdout, re.M)
    if timed:
        named = json.loads(timed.group(1))
        got["hooks_s"] = sum(v[1] for k, v in named.items() if k.startswith("hook ") and k != "hook pytest_runtestloop")
        got["timed_s"] = {k: v[1] for k, v in named.items()}  # each hook and method hook_timer times (nested count twice)
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hooks", action="store_true")
    parser.add_argument("--gpu", action="store_true", help="cost_line_check.py's one-kernel CUDA tests, not the synthetic GPU")
    parser.add_argument("--out", type=Path)
    parser.add_argument("extra", nargs="*")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = [*args.extra, *extra]
    sys.path.insert(0, str(ROOT))
    from tests.helpers import SYNTHETIC_CONFTEST

    roots = {"plain": None, "before": args.before.resolve(), "after": args.after.resolve()}
    rounds: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="per_test_ab_") as tmp:
        folder = Path(tmp)
        (folder / "cost_line_stamps.py").write_text(CPU_STAMPS)
        if args.gpu:
            (folder / "test_small.py").write_text(GPU_TESTS.replace("{tests}", str(args.tests)))
        else:
            (folder / "conftest.py").write_text("import torch  # noqa: F401 - a GPU suite has it loaded\n" + SYNTHETIC_CONFTEST)
            (folder / "test_small.py").write_text(SYNTHETIC_TESTS.replace("{tests}", str(args.tests)))
        for name, root in roots.items():  # warm the caches
            run_once(folder, root, list(args.extra), False)
        names = list(roots)
        for index in range(args.rounds):
            order = names[index % 3:] + names[:index % 3]
            rounds.append({name: run_once(folder, roots[name], list(args.extra), args.hooks) for name in order})
    n = args.tests
    us = 1e6 / n
    summary: dict[str, dict] = {}
    print(f"{n} tests ({'one-kernel CUDA tests' if args.gpu else 'synthetic GPU'}), {args.rounds} rounds, order rotating; µs a test beyond the round's plain run "
          f"(median over rounds); extra: {args.extra}")
    print(f"  plain span {statistics.median(r['plain']['span_s'] for r in rounds) * us:.1f} µs a test")
    for name in roots:
        full = [r[name]["gc"].get("gen2", {}) for r in rounds]
        print(f"  {name:6}  full garbage collections among the tests {[g.get('n') for g in full]}, "
              f"median {statistics.median(g.get('s', 0.0) for g in full):.3f} s")
    for name in ("before", "after"):
        span = [(r[name]["span_s"] - r["plain"]["span_s"]) * us for r in rounds]
        cpu = [(r[name]["cpu_s"] - r["plain"]["cpu_s"]) * us for r in rounds]
        line = [(r[name]["printed_s"] or 0.0) * us for r in rounds]
        got = {"span_diff_us": statistics.median(span), "cpu_diff_us": statistics.median(cpu),
               "line_us": statistics.median(line), "span_diffs": span, "cpu_diffs": cpu, "lines": line}
        got["line_over_span"] = got["line_us"] / got["span_diff_us"] if got["span_diff_us"] > 0 else None
        got["line_over_cpu"] = got["line_us"] / got["cpu_diff_us"] if got["cpu_diff_us"] > 0 else None
        if args.hooks:
            got["hooks_us"] = statistics.median(r[name]["hooks_s"] * us for r in rounds)
        summary[name] = got
        print(f"  {name:6}  span diff {got['span_diff_us']:7.1f}  CPU diff {got['cpu_diff_us']:7.1f}  "
              f"line {got['line_us']:7.1f}  line/span {got['line_over_span'] or float('nan'):.2f}  "
              f"line/CPU {got['line_over_cpu'] or float('nan'):.2f}"
              + (f"  hooks {got['hooks_us']:7.1f}" if args.hooks else ""))
        print(f"          span diffs {[round(x) for x in span]}  CPU diffs {[round(x) for x in cpu]}")
    if args.hooks:  # where the time goes in situ, hook and method by hook and method (nested names count twice)
        names = {k for r in rounds for side in ("before", "after") for k in r[side].get("timed_s", {})}
        per_name = {name: {side: statistics.median(r[side].get("timed_s", {}).get(name, 0.0) * us for r in rounds)
                           for side in ("before", "after")} for name in names}
        summary["timed_us"] = per_name
        print("  µs a test by hook_timer's names (median over rounds), before -> after:")
        for name, got in sorted(per_name.items(), key=lambda item: -max(item[1].values()))[:30]:
            print(f"    {got['before']:8.1f} {got['after']:8.1f}  {name}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
