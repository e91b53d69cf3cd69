"""(GPU) What --gpu-util costs on the suite shapes users have, measured side by side.

    python benchmarks/bench_overhead.py --out DIR [--repeats 3] [--suites small,launch_bound,gpu_bound]
                                        [--extra-args "..."] [--variant NAME=ARGS ...] [--before DIR]
                                        [--warmup]

Runs each suite of ``benchmarks/overhead_suites/`` plain and with ``--gpu-util``, alternating
(plain, gpu_util, plain, gpu_util, ...) in fresh processes, ``--repeats`` times, and reads
pytest's own reported time ("N passed in X s") and the plugin's one-time start-ups ("profiler
start-up X s, not charged to any test", plus "hardware counters start-up X s" when the counters run). The ratio of a repeat is
(gpu_util time - start-up) / plain time; the suite's ``ratio`` is the median over repeats
(``ratio_with_startup`` keeps the start-up in). Writes DIR/overhead.json:

    {"gpu": ..., "torch": ..., "date": ..., "suites": {"small": {"plain_s": [...],
     "gpu_util_s": [...], "startup_s": [...], "ratio": ..., "ratio_with_startup": ...}, ...},
     "startup_s": median start-up over all runs}

and prints a short table last. Needs CUDA.

``--variant NAME=ARGS`` adds more --gpu-util runs to each round (for example
``flush_each=--gpu-util-flush tests=1`` or ``torch=--gpu-util-source torch``), and ``--before DIR``
one with the pytest_gpuutil package found in DIR (an older commit: ``git archive COMMIT
pytest_gpuutil | tar -x -C DIR``); they land under each suite's ``variants``, with the ratio
computed the same way (a version that prints no start-up line has none subtracted).

``--plain-variant NAME=ARGS`` adds a run without ``--gpu-util`` but with ARGS, with this script's
``diagnostics/`` folder on PYTHONPATH: the floor under the plugin's cost, e.g. ``--plain-variant
"floor=-p floor_probe --floor-probe=gpu_work_syncs,window,memory"`` (CUPTI, the windows' edges and
the memory counters with none of the plugin's Python; see ``diagnostics/floor_probe.py``).

``--warmup`` runs every suite in every configuration once, untimed, before the rounds: with
bytecode writing allowed, every module (torch's, pytest's, the plugin's, pytest's assertion-rewritten
plugin modules) is then read from its cache in the timed runs, as on a machine that ran the suite
before. Without it (or with PYTHONDONTWRITEBYTECODE=1 and no cached bytecode), every run compiles
what it imports, plain runs included. ``bytecode`` in the output says which.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
SUITES = {
    "small": "test_small_ops.py",
    "launch_bound": "test_launch_bound.py",
    "gpu_bound": "test_gpu_bound.py",
}
#: pytest's last line: "300 passed in 1.23s" (or "... in 75.02s (0:01:15)")
REPORTED = re.compile(r"\bin ([0-9.]+)s\b")
STARTUP = re.compile(r"profiler start-up ([0-9.]+) s")
#: the hardware counters' one-time start-up, charged to no test either (subtracted with the profiler's)
COUNTERS_STARTUP = re.compile(r"hardware counters start-up ([0-9.]+) s")
MEASURE = re.compile(r"measurement cost ([0-9.]+) s")


def reported_seconds(output: str) -> float:
    lines = [line for line in output.strip().splitlines() if REPORTED.search(line) and ("passed" in line or "failed" in line)]
    if not lines:
        raise ValueError("no 'N passed in X s' line in pytest's output")
    return float(REPORTED.findall(lines[-1])[-1])


def first_float(pattern: re.Pattern[str], output: str) -> Optional[float]:
    match = pattern.search(output)
    return float(match.group(1)) if match else None


def run_suite(suite: str, gpu_util: bool, out_dir: Path, extra: list[str], package_dir: Optional[str] = None) -> dict[str, Any]:
    """One run; ``gpu_util=False`` with ``extra``: a plain variant (diagnostics/ on PYTHONPATH)."""
    cmd = [sys.executable, "-m", "pytest", str(HERE / "overhead_suites" / SUITES[suite]), "-q", "-p", "no:cacheprovider",
           "--rootdir", str(HERE / "overhead_suites")]
    if gpu_util:
        cmd += ["--gpu-util", f"--gpu-util-dir={out_dir / f'gpu_util_{suite}'}"]
    cmd += extra
    env = dict(os.environ)
    paths = [package_dir] if package_dir else []
    if extra and not gpu_util:
        paths.append(str(HERE / "diagnostics"))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (*paths, env.get("PYTHONPATH"))))
    # run from the output folder: `python -m` puts the working directory first on sys.path, where it
    # would shadow the package of --before
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out_dir)
    output = res.stdout + res.stderr
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{output[-4000:]}")
    startup = first_float(STARTUP, output)
    counters = first_float(COUNTERS_STARTUP, output)
    if startup is not None and counters is not None:
        startup += counters
    return {"seconds": reported_seconds(output), "startup_s": startup, "counters_startup_s": counters,
            "measure_s": first_float(MEASURE, output), "tail": output.strip().splitlines()[-6:]}


def _ratios(times: list[float], startups: list[Optional[float]], plain: list[float]) -> dict[str, Any]:
    """Median over rounds of (time - start-up) / plain, and of time / plain."""
    return {
        "ratio": statistics.median((t - (s or 0.0)) / p for t, s, p in zip(times, startups, plain)),
        "ratio_with_startup": statistics.median(t / p for t, p in zip(times, plain)),
    }


def measure(suites: list[str], repeats: int, out_dir: Path, extra: list[str],
            variants: dict[str, tuple[list[str], Optional[str]]],
            after_round: Optional[Callable[[dict[str, Any]], None]] = None, warmup: bool = False,
            plain_variants: Optional[dict[str, list[str]]] = None) -> dict[str, Any]:
    """Every suite plain, with --gpu-util and with each variant, round after round.

    ``after_round`` gets the figures so far after each round (so a run cut short keeps them);
    ``warmup``: one untimed run of each first; ``plain_variants``: runs without --gpu-util, with
    these arguments (reported among the variants).
    """
    plain_variants = plain_variants or {}
    configs = {"plain": ([], None), "gpu_util": (extra, None), **variants,
               **{name: (args, None) for name, args in plain_variants.items()}}
    gpu_util_on = {name: name != "plain" and name not in plain_variants for name in configs}
    if warmup:
        for suite in suites:
            for name, (args, package) in configs.items():
                run_suite(suite, gpu_util_on[name], out_dir, args, package)
    runs: dict[str, dict[str, dict[str, list[Any]]]] = {
        s: {name: {"s": [], "startup_s": [], "counters_startup_s": [], "measure_s": []}
            for name in configs} for s in suites}
    tails: dict[str, list[str]] = {}
    result: dict[str, Any] = {}
    for _ in range(repeats):
        for suite in suites:
            for name, (args, package) in configs.items():
                got = run_suite(suite, gpu_util_on[name], out_dir, args, package)
                for key, value in (("s", got["seconds"]), ("startup_s", got["startup_s"]), ("measure_s", got["measure_s"]),
                                   ("counters_startup_s", got.get("counters_startup_s"))):
                    runs[suite][name][key].append(value)
                if name == "gpu_util":
                    tails[suite] = got["tail"]
        result = _summarise(runs, tails, [*variants, *plain_variants])
        if after_round is not None:
            after_round(result)
    return result


def _summarise(runs: dict[str, dict[str, dict[str, list[Any]]]], tails: dict[str, list[str]],
               variants: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for suite, by_name in runs.items():
        plain, main = by_name["plain"]["s"], by_name["gpu_util"]
        result[suite] = {
            "plain_s": plain,
            "gpu_util_s": main["s"],
            "startup_s": main["startup_s"],
            "counters_startup_s": main["counters_startup_s"],
            "measure_s": main["measure_s"],
            **_ratios(main["s"], main["startup_s"], plain),
            "last_gpu_util_tail": tails[suite],
            "variants": {name: {**by_name[name], **_ratios(by_name[name]["s"], by_name[name]["startup_s"], plain)}
                         for name in variants},
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
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="another --gpu-util run per round with these options (repeatable)")
    parser.add_argument("--plain-variant", action="append", default=[], metavar="NAME=ARGS",
                        help="another run per round without --gpu-util, with these pytest options (repeatable)")
    parser.add_argument("--before", metavar="DIR", help="also run the pytest_gpuutil package in DIR (variant 'before')")
    parser.add_argument("--warmup", action="store_true", help="one untimed run of each suite and configuration first")
    args = parser.parse_args(argv)
    variants: dict[str, tuple[list[str], Optional[str]]] = {}
    for spec in args.variant:
        name, sep, options = spec.partition("=")
        if not sep or not name:
            parser.error(f"--variant {spec!r}: expected NAME=ARGS")
        variants[name] = (shlex.split(options), None)
    plain_variants: dict[str, list[str]] = {}
    for spec in args.plain_variant:
        name, sep, options = spec.partition("=")
        if not sep or not name or not options.strip() or name in variants or name in ("plain", "gpu_util"):
            parser.error(f"--plain-variant {spec!r}: expected NAME=ARGS with a new NAME and some ARGS")
        plain_variants[name] = shlex.split(options)
    if args.before:
        variants["before"] = ([], str(Path(args.before).resolve()))
    args.out.mkdir(parents=True, exist_ok=True)
    suites = [s for s in args.suites.split(",") if s]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; known: {', '.join(SUITES)}")
    bytecode = "not written (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "written and reused"
    doc = {**machine(), "date": dt.date.today().isoformat(), "repeats": args.repeats, "warmup": args.warmup,
           "bytecode": bytecode,
           "extra_args": args.extra_args,
           "variants": {name: {"args": a, "package": p} for name, (a, p) in variants.items()},
           "plain_variants": plain_variants}

    def write(suites_so_far: dict[str, Any]) -> None:
        (args.out / "overhead.json").write_text(json.dumps({**doc, "suites": suites_so_far}, indent=2) + "\n")

    doc["suites"] = measure(suites, args.repeats, Path(tempfile.mkdtemp(prefix="overhead_")), shlex.split(args.extra_args),
                            variants, after_round=write, warmup=args.warmup, plain_variants=plain_variants)
    startups = [s for suite in doc["suites"].values() for s in suite["startup_s"] if s is not None]
    doc["startup_s"] = statistics.median(startups) if startups else None
    (args.out / "overhead.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{doc['gpu']}, torch {doc['torch']}, {doc['date']}; start-up {doc['startup_s']} s (median)")
    print(f"{'suite':14} {'run':12} {'seconds':>36} {'ratio':>6} {'w/ start-up':>11}")
    for suite, s in doc["suites"].items():
        rows = [("plain", s["plain_s"], None), ("gpu_util", s["gpu_util_s"], s)]
        rows += [(name, v["s"], v) for name, v in s["variants"].items()]
        for name, seconds, ratios in rows:
            times = "/".join(f"{v:.2f}" for v in seconds)
            tail = f"{ratios['ratio']:6.3f} {ratios['ratio_with_startup']:11.3f}" if ratios else ""
            print(f"{suite:14} {name:12} {times:>36} {tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
