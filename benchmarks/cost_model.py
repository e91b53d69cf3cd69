"""(GPU) What pytest-gpuutil costs, as a model: start-up (s), µs per test and µs per kernel, beyond a plain run.

    python benchmarks/cost_model.py --out DIR [--deadline-s 420] [--launch-tests 10] [--configs a,b]
    python benchmarks/cost_model.py --out DIR --dry-run      (CPU: writes the suites, prints the plan)

Six suites are generated into a temporary folder: small tests (ones, mul, add, sum, ``.item()``:
4 kernels and a copy each) in suites of 100 / 300 / 1,000 tests, and launch-bound tests (``x.add_(1)``
K times, then ``.item()``) with K = 200 / 2,000 / 20,000 kernels, ``--launch-tests`` tests each
(default 10: the 20,000-kernel suite is then ~2 s a run on an H100). Each suite runs in fresh
processes in every configuration, in rounds, the order shuffled within each round:

- ``plain``: pytest without the plugin;
- ``default``: ``--gpu-util``;
- ``lean``: ``--gpu-util --gpu-util-findings=off --gpu-util-memory=off``;
- ``counters``: ``--gpu-util --gpu-util-counters=auto``.

A run's time (``run_s``) is the span from the first ``pytest_configure`` to the last
``pytest_unconfigure`` less pytest's collection (stamped by the suites' own conftest: everything
the plugin does, none of the interpreter's start or torch's import, which the suite's conftest does
anyway). Collection is left out because the plugin does nothing there (its one collection hook
takes well under a millisecond) while importing and parametrizing 1,000 tests takes a few tenths
of a second whose scatter grows with the tests, so it would blur the per-test slope; the CUDA
context the conftest creates at the session's start, and the plugin's start-up with it, stay in.
Kept too and fitted the same way (``bases``): ``cpu_s``, the process's CPU time (every thread)
over the same span less collection, which a busy shared host's preemption does not stretch (the
GPU host's wall times scatter by a fifth between rounds; the plugin's cost is CPU work);
``tests_s``, from the first test's set-up to the end, without the CUDA context's creation (whose
time varies by a tenth of a second and lands in the start-up); the whole span, the process's wall
time and pytest's own "in X s". For each configuration the
differences to plain of the same round and suite are fitted by least squares as

    extra seconds = start-up + tests x per_test + kernels x per_kernel

(kernels: every GPU operation the tests launch, copies included), and plain's own times the same
way (``plain_per_test_us``, ``plain_per_kernel_us``); ``ci95``: the 2.5th and 97.5th percentiles
of the same fit over bootstrap resamples of the rounds. Rounds run until ``--deadline-s`` (from
the script's start) would be passed by one more round (the first round always runs; each process
is also stopped at the deadline); DIR/cost.json is written after every round, so a run cut short
keeps what it had. With the counters on, their sampling thread's CPU time over the tests' time
(from each run's gpu_util.json) is kept as ``counters_thread_cpu_pct`` (% of one core).

Writes DIR/cost.json (see ``document``) and prints a short table. Needs CUDA (``--dry-run`` does not).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

#: the configurations, by name: None runs pytest without the plugin
CONFIGS: dict[str, Optional[list[str]]] = {
    "plain": None,
    "default": [],
    "lean": ["--gpu-util-findings=off", "--gpu-util-memory=off"],
    "counters": ["--gpu-util-counters=auto"],
}
SMALL_TESTS = (100, 300, 1000)
LAUNCH_KERNELS = (200, 2000, 20000)
#: GPU operations of one small test (fill, mul, add, sum, and .item()'s copy)
SMALL_OPS = 5
#: GPU operations of a launch-bound test besides its K adds (the zeros' fill and .item()'s copy)
LAUNCH_EXTRA_OPS = 2
SPAN = re.compile(r"^COSTSPAN ([0-9.]+)$", re.M)
COLLECTION = re.compile(r"^COSTCOLLECTION ([0-9.]+)$", re.M)
CPU = re.compile(r"^COSTCPU ([0-9.]+)$", re.M)
TESTS = re.compile(r"^COSTTESTS ([0-9.]+)$", re.M)
REPORTED = re.compile(r"\bin ([0-9.]+)s\b")
STARTUP = re.compile(r"profiler start-up ([0-9.]+) s")
COUNTERS_STARTUP = re.compile(r"hardware counters start-up ([0-9.]+) s")
MEASURE = re.compile(r"measurement cost ([0-9.]+) s")
#: the bases fitted, the first one the model's (run_s: the span less pytest's collection, see the module)
BASES = ("run_s", "cpu_s", "tests_s", "span_s", "wall_s", "session_s")

CONFTEST = '''\
"""Stamps the run's span for benchmarks/cost_model.py; creates the CUDA context before the tests."""
import time

import pytest
import torch

_T = {}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _T["configure"] = time.perf_counter()
    _T["configure_cpu"] = time.process_time()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _T.setdefault("first_test", time.perf_counter())


def pytest_sessionstart(session):
    if torch.cuda.is_available():
        torch.ones(1, device="cuda").sum().item()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    began, began_cpu = time.perf_counter(), time.process_time()
    yield
    _T["collection"] = time.perf_counter() - began
    _T["collection_cpu"] = time.process_time() - began_cpu


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    print(f"\\nCOSTSPAN {time.perf_counter() - _T['configure']:.6f}")
    print(f"COSTCOLLECTION {_T.get('collection', 0.0):.6f}")
    print(f"COSTCPU {time.process_time() - _T['configure_cpu'] - _T.get('collection_cpu', 0.0):.6f}")
    print(f"COSTTESTS {time.perf_counter() - _T['first_test'] if 'first_test' in _T else 0.0:.6f}")
'''

SMALL_SUITE = '''\
import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_small(i):
    x = torch.ones(1024, device="cuda")
    y = (x * i + 1).sum()
    assert y.item() == 1024 * (i + 1)
'''

LAUNCH_SUITE = '''\
import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_launches(i):
    x = torch.zeros(256, device="cuda")
    for _ in range({kernels}):
        x.add_(1)
    assert x[0].item() == {kernels}
'''


@dataclass(frozen=True)
class Suite:
    """One generated suite: its file, its tests and the GPU operations they launch in all."""

    name: str
    path: Path
    tests: int
    kernels: int


def write_suites(folder: Path, small: Sequence[int] = SMALL_TESTS, launch: Sequence[int] = LAUNCH_KERNELS,
                 launch_tests: int = 10) -> list[Suite]:
    """The suites, each a file of ``folder`` beside one conftest.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conftest.py").write_text(CONFTEST)
    suites = []
    for n in small:
        path = folder / f"test_small_{n}.py"
        path.write_text(SMALL_SUITE.format(tests=n))
        suites.append(Suite(f"small_{n}", path, n, n * SMALL_OPS))
    for k in launch:
        path = folder / f"test_launch_{k}.py"
        path.write_text(LAUNCH_SUITE.format(tests=launch_tests, kernels=k))
        suites.append(Suite(f"launch_{k}", path, launch_tests, launch_tests * (k + LAUNCH_EXTRA_OPS)))
    return suites


# -- one run --------------------------------------------------------------------------------------

def first_float(pattern: re.Pattern[str], text: str) -> Optional[float]:
    match = pattern.search(text)
    return float(match.group(1)) if match else None


def reported_seconds(output: str) -> Optional[float]:
    lines = [line for line in output.strip().splitlines() if REPORTED.search(line) and "passed" in line]
    return float(REPORTED.findall(lines[-1])[-1]) if lines else None


def _totals(doc: dict[str, Any]) -> dict[str, Any]:
    totals = doc.get("totals")
    return totals if isinstance(totals, dict) else doc


def parse_run(output: str, wall_s: float, run_doc: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The figures of one run from its output (and the plugin's gpu_util.json, when it wrote one)."""
    span, collection = first_float(SPAN, output), first_float(COLLECTION, output)
    got: dict[str, Any] = {"wall_s": wall_s, "span_s": span, "collection_s": collection,
                           "run_s": None if span is None or collection is None else span - collection,
                           "cpu_s": first_float(CPU, output), "tests_s": first_float(TESTS, output),
                           "session_s": reported_seconds(output),
                           "startup_s": first_float(STARTUP, output),
                           "counters_startup_s": first_float(COUNTERS_STARTUP, output),
                           "measure_s": first_float(MEASURE, output)}
    if run_doc:
        totals, machine = _totals(run_doc), run_doc.get("machine_info") or {}
        cpu, test_s = totals.get("counters_thread_cpu_s"), totals.get("test_s")
        if cpu is not None and test_s:
            got["counters_thread_cpu_pct"] = 100.0 * cpu / test_s
        got["gpu"] = machine.get("gpu_model")
        got["torch"] = machine.get("torch_version") or machine.get("torch")
    return got


def run_suite(suite: Suite, config: str, work: Path, timeout_s: float) -> dict[str, Any]:
    """One fresh pytest process of ``suite`` in ``config``; raises RuntimeError when it fails."""
    args = CONFIGS[config]
    out_dir = work / f"out_{config}_{suite.name}"
    cmd = [sys.executable, "-m", "pytest", str(suite.path), "-q", "-p", "no:cacheprovider",
           "--rootdir", str(suite.path.parent)]
    if args is not None:
        cmd += ["--gpu-util", f"--gpu-util-dir={out_dir}", *args]
    began = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=max(1.0, timeout_s))
    wall = time.perf_counter() - began
    output = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError(f"{suite.name} {config} exited {res.returncode}: {output.strip()[-1500:]}")
    doc = None
    if args is not None:
        try:
            doc = json.loads((out_dir / "gpu_util.json").read_text())
        except (OSError, ValueError):
            doc = None
    return parse_run(output, wall, doc)


# -- the rounds, by a deadline --------------------------------------------------------------------

@dataclass
class Rounds:
    """Every run so far: ``runs[round][config][suite] = figures``, and why the rounds stopped."""

    runs: list[dict[str, dict[str, dict[str, Any]]]] = field(default_factory=list)
    stopped: str = ""
    errors: list[str] = field(default_factory=list)


def measure(suites: Sequence[Suite], configs: Sequence[str], run: Callable[[Suite, str, float], dict[str, Any]],
            deadline_s: float, clock: Callable[[], float] = time.perf_counter, max_rounds: int = 1000,
            seed: int = 0, after_round: Optional[Callable[[Rounds], None]] = None,
            started: Optional[float] = None) -> Rounds:
    """Rounds of every suite in every configuration (order shuffled in each round) until the deadline.

    ``run(suite, config, seconds_left)`` gives one run's figures. A round starts only while the
    longest round so far (times 1.1) still fits before ``deadline_s`` seconds from ``started``
    (default: now); the first round always starts. A run that fails (or is cut by the deadline)
    leaves its round incomplete: that round is dropped and the rounds stop.
    """
    started = clock() if started is None else started
    rng = random.Random(seed)
    done = Rounds()
    longest = 0.0
    while len(done.runs) < max_rounds:
        left = deadline_s - (clock() - started)
        if done.runs and longest * 1.1 > left:
            done.stopped = f"deadline: {left:.0f} s left, a round takes up to {longest:.0f} s"
            break
        began = clock()
        order = [(s, c) for s in suites for c in configs]
        rng.shuffle(order)
        this: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in configs}
        try:
            for suite, config in order:
                left = deadline_s - (clock() - started)
                if left <= 0:
                    raise TimeoutError("the deadline came inside a round")
                this[config][suite.name] = run(suite, config, left)
        except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
            done.errors.append(str(exc))
            done.stopped = f"round {len(done.runs) + 1} incomplete: {str(exc).splitlines()[0][:200]}"
            break
        done.runs.append(this)
        longest = max(longest, clock() - began)
        if after_round is not None:
            after_round(done)
    else:
        done.stopped = f"{max_rounds} rounds"
    return done


# -- the fit --------------------------------------------------------------------------------------

def design(suites: Sequence[Suite]) -> np.ndarray:
    return np.array([[1.0, s.tests, s.kernels] for s in suites])


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares (intercept s, s per test, s per kernel) of ``y`` (one value per suite row of ``x``)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef


def fit_rounds(suites: Sequence[Suite], values: np.ndarray, bootstrap: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The model fitted to ``values[round, suite]`` (seconds), with a bootstrap over the rounds.

    The point estimate fits the suites' means over the rounds; ``ci95`` the 2.5th and 97.5th
    percentiles of the fits of ``bootstrap`` resamples (rounds drawn with replacement); None with
    fewer than two rounds.
    """
    x = design(suites)
    values = np.asarray(values, dtype=float)
    coef = fit(x, values.mean(axis=0))
    out: dict[str, Any] = {"startup_s": float(coef[0]), "per_test_us": float(coef[1] * 1e6),
                           "per_kernel_us": float(coef[2] * 1e6), "ci95": None}
    rounds = values.shape[0]
    if rounds >= 2 and bootstrap > 0:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, rounds, size=(bootstrap, rounds))
        means = values[picks].mean(axis=1)  # (bootstrap, suites)
        coefs = np.linalg.lstsq(x, means.T, rcond=None)[0].T  # (bootstrap, 3)
        lo, hi = np.percentile(coefs, [2.5, 97.5], axis=0)
        out["ci95"] = {"startup_s": [float(lo[0]), float(hi[0])],
                       "per_test_us": [float(lo[1] * 1e6), float(hi[1] * 1e6)],
                       "per_kernel_us": [float(lo[2] * 1e6), float(hi[2] * 1e6)]}
    return out


def matrix(rounds: Rounds, suites: Sequence[Suite], config: str, basis: str, minus_plain: bool) -> Optional[np.ndarray]:
    """values[round, suite] of one configuration (less plain's of the same round), rounds with every value."""
    rows = []
    for this in rounds.runs:
        row = []
        for suite in suites:
            got = this.get(config, {}).get(suite.name, {}).get(basis)
            base = this.get("plain", {}).get(suite.name, {}).get(basis) if minus_plain else 0.0
            if got is None or base is None:
                break
            row.append(got - base)
        else:
            rows.append(row)
    return np.array(rows) if rows else None


def _median_of(rounds: Rounds, config: str, key: str) -> Optional[float]:
    values = [got[key] for this in rounds.runs for got in this.get(config, {}).values() if got.get(key) is not None]
    return statistics.median(values) if values else None


def document(rounds: Rounds, suites: Sequence[Suite], configs: Sequence[str], bootstrap: int = 2000,
             meta: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """cost.json: each configuration's model beyond plain, plain's own slopes, and how they were measured."""
    doc: dict[str, Any] = {"configs": {}, "plain_per_test_us": None, "plain_per_kernel_us": None,
                           "rounds": len(rounds.runs), "basis": BASES[0], **(meta or {})}
    doc["suites"] = {s.name: {"tests": s.tests, "kernels": s.kernels} for s in suites}
    doc["bases"] = {}
    for basis in BASES:
        fits: dict[str, Any] = {}
        plain = matrix(rounds, suites, "plain", basis, minus_plain=False)
        if plain is not None:
            fits["plain"] = fit_rounds(suites, plain, bootstrap)
        for config in configs:
            if config == "plain":
                continue
            values = matrix(rounds, suites, config, basis, minus_plain=True)
            if values is not None:
                fits[config] = fit_rounds(suites, values, bootstrap)
        doc["bases"][basis] = fits
    main = doc["bases"].get(BASES[0], {})
    doc["configs"] = {c: f for c, f in main.items() if c != "plain"}
    if "plain" in main:
        doc["plain_per_test_us"] = main["plain"]["per_test_us"]
        doc["plain_per_kernel_us"] = main["plain"]["per_kernel_us"]
        doc["plain_ci95"] = main["plain"]["ci95"]
    for config in doc["configs"]:
        doc["configs"][config]["args"] = ["--gpu-util", *(CONFIGS.get(config) or [])]
        doc["configs"][config]["reported_startup_s"] = _median_of(rounds, config, "startup_s")
        doc["configs"][config]["reported_counters_startup_s"] = _median_of(rounds, config, "counters_startup_s")
    cpu = _median_of(rounds, "counters", "counters_thread_cpu_pct")
    if cpu is not None:
        doc["counters_thread_cpu_pct"] = cpu
    doc["measurement_cost_line"] = summary_line_check(rounds, suites, configs)
    doc["stopped"] = rounds.stopped
    doc["errors"] = rounds.errors[-3:]
    doc["runs"] = rounds.runs
    return doc


def summary_line_check(rounds: Rounds, suites: Sequence[Suite], configs: Sequence[str]) -> dict[str, Any]:
    """Per configuration and suite: the summary's "measurement cost" (mean) beside the measured extra
    span over plain (mean, start-ups left out as the line leaves them out)."""
    found: dict[str, Any] = {}
    for config in configs:
        if config == "plain":
            continue
        per_suite = {}
        for suite in suites:
            said, extra = [], []
            for this in rounds.runs:
                got, plain = this.get(config, {}).get(suite.name), this.get("plain", {}).get(suite.name)
                if not got or not plain or got.get("measure_s") is None or got.get("span_s") is None \
                        or plain.get("span_s") is None:
                    continue
                said.append(got["measure_s"])
                startups = (got.get("startup_s") or 0.0) + (got.get("counters_startup_s") or 0.0)
                extra.append(got["span_s"] - plain["span_s"] - startups)
            if said:
                per_suite[suite.name] = {"reported_s": statistics.fmean(said), "extra_span_s": statistics.fmean(extra)}
        found[config] = per_suite
    return found


# -- the table ------------------------------------------------------------------------------------

def _interval(fitted: dict[str, Any], key: str, scale: float, digits: int) -> str:
    ci = fitted.get("ci95")
    if not ci:
        return ""
    lo, hi = ci[key]
    return f" ({lo * scale:.{digits}f}..{hi * scale:.{digits}f})"


def table(doc: dict[str, Any]) -> str:
    lines = [f"{doc.get('gpu')}, torch {doc.get('torch')}, {doc.get('date')}; {doc['rounds']} rounds "
             f"({doc.get('stopped', '')}); beyond plain, fitted on the {doc['basis']} (95% bootstrap interval)",
             f"{'config':10} {'start-up s':>24} {'µs per test':>24} {'µs per kernel':>24}"]
    for name, fitted in doc["configs"].items():
        lines.append(f"{name:10} {fitted['startup_s']:>8.3f}{_interval(fitted, 'startup_s', 1, 3):>16} "
                     f"{fitted['per_test_us']:>8.1f}{_interval(fitted, 'per_test_us', 1, 1):>16} "
                     f"{fitted['per_kernel_us']:>8.2f}{_interval(fitted, 'per_kernel_us', 1, 2):>16}")
    for basis in ("cpu_s", "tests_s"):
        for name, fitted in (doc.get("bases", {}).get(basis) or {}).items():
            if name != "plain":
                lines.append(f"  on {basis}: {name:9} {fitted['startup_s']:>7.3f} s{_interval(fitted, 'startup_s', 1, 3)}, "
                             f"{fitted['per_test_us']:.1f} µs a test{_interval(fitted, 'per_test_us', 1, 1)}, "
                             f"{fitted['per_kernel_us']:.2f} µs a kernel{_interval(fitted, 'per_kernel_us', 1, 2)}")
    if doc.get("plain_per_test_us") is not None:
        lines.append(f"plain itself: {doc['plain_per_test_us']:.1f} µs per test, {doc['plain_per_kernel_us']:.2f} µs per kernel")
    if doc.get("counters_thread_cpu_pct") is not None:
        lines.append(f"counters' sampling thread: {doc['counters_thread_cpu_pct']:.1f}% of one core while the tests ran (median)")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    began = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--deadline-s", type=float, default=420.0, help="seconds from the start by which rounds end")
    parser.add_argument("--max-rounds", type=int, default=1000)
    parser.add_argument("--launch-tests", type=int, default=10, help="tests in each launch-bound suite")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="configurations, plain always among them")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--no-warmup", action="store_true", help="skip the one untimed run of each configuration")
    parser.add_argument("--dry-run", action="store_true", help="write the suites and print the plan; run nothing")
    args = parser.parse_args(argv)
    configs = ["plain", *(c for c in args.configs.split(",") if c and c != "plain")]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if args.launch_tests < 1:
        parser.error("--launch-tests must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cost_model_"))
    suites = write_suites(work / "suites", launch_tests=args.launch_tests)
    if args.dry_run:
        for suite in suites:
            print(f"{suite.name:14} {suite.tests:5d} tests {suite.kernels:8d} kernels  {suite.path}")
        print(f"configs: {', '.join(configs)}; rounds until {args.deadline_s:.0f} s")
        return 0

    def run(suite: Suite, config: str, left: float) -> dict[str, Any]:
        return run_suite(suite, config, work, timeout_s=left)

    meta = {"date": dt.date.today().isoformat(), "gpu": None, "torch": None, "python": sys.version.split()[0],
            "launch_tests": args.launch_tests, "deadline_s": args.deadline_s,
            "bytecode": "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "written and reused"}

    def write(rounds: Rounds) -> None:
        for this in rounds.runs:
            for got in this.get("default", {}).values():
                meta["gpu"] = meta["gpu"] or got.get("gpu")
                meta["torch"] = meta["torch"] or got.get("torch")
        doc = document(rounds, suites, configs, args.bootstrap, meta)
        (args.out / "cost.json").write_text(json.dumps(doc, indent=1) + "\n")

    if not args.no_warmup:  # bytecode written, every module read once: every timed run starts alike
        for config in configs:
            try:
                run(suites[0], config, 120)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"warm-up {config} failed: {str(exc)[:2000]}")
                return 1
    rounds = measure(suites, configs, run, args.deadline_s, started=began, max_rounds=args.max_rounds,
                     after_round=write)
    write(rounds)
    doc = json.loads((args.out / "cost.json").read_text())
    print(table(doc))
    for error in rounds.errors:
        print("error:", error[:2000])
    return 0 if rounds.runs else 1


if __name__ == "__main__":
    sys.exit(main())
