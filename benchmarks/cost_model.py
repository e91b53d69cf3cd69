"""(GPU) What pytest-gpuutil costs, as a model: start-up (s), µs per test and µs per kernel, beyond a plain run.

    python benchmarks/cost_model.py --out DIR [--deadline-s 420] [--launch-tests 10] [--configs a,b]
    python benchmarks/cost_model.py --out DIR --dry-run      (CPU: writes the suites, prints the plan)
    python benchmarks/cost_model.py --out DIR --acceptance   (issue 41's shape: see ACCEPTANCE_ARGS)
    python benchmarks/cost_model.py --out DIR --device cpu --sizes 5,20 ...   (the whole pipeline on a CPU)

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

Per configuration cost.json also gives, from each round's small suites (``--sizes``, e.g. 500 and
5,000 tests), a slope per round, then their median and range over the rounds:
``self_per_test_us``, the plugin's self-timed work per test (the run document's measurement cost,
``totals.measure_ms``), split into ``torch_calls_per_test_us`` (torch's synchronizes and allocator reads with
CUPTI's clock at the tests' edges, ``totals.torch_calls_ms``) and ``own_beyond_torch_per_test_us`` (the rest: the plugin's own
Python), and ``slope_per_test_us``, the run's time beyond plain per test. With
``--busy-tests`` a suite of that many bf16 matmul tests of ``--busy-seconds`` each runs with the
counters on (``counters_busy``, once before the rounds): ``counters_thread_pct_busy`` is the
sampling thread's CPU over its life, % of one core (``totals.counters_thread_pct``). ``acceptance``
lists issue 41's bars beside the figures, also written as DIR/cost_acceptance.txt.
``--suites-of CONFIG=SUITE,SUITE`` runs a configuration on some suites only (a configuration
without a launch-bound suite gets no µs a kernel); ``--rounds N`` runs N rounds unless the
deadline comes first.

Writes DIR/cost.json (see ``document``) and prints a short table. Needs CUDA (``--dry-run`` and
``--device cpu`` do not).
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
#: the garbage collector among the tests: its seconds, collections and full collections (the conftest's line)
GC = re.compile(r"^COSTGC ([0-9.]+) (\d+) (\d+)$", re.M)
#: the bases fitted, the first one the model's (run_s: the span less pytest's collection, see the module)
BASES = ("run_s", "cpu_s", "tests_s", "span_s", "wall_s", "session_s")

CONFTEST = '''\
"""Stamps the run's span for benchmarks/cost_model.py; creates the CUDA context before the tests."""
import gc
import time

import pytest
import torch

_T = {}
#: the garbage collector's work between the first test's setup and the session's end
_GC = {"s": 0.0, "n": 0, "full": 0, "began": None, "generation": 0}


def _gc_timer(phase, info):
    if "first_test" not in _T or "tests_done" in _T:
        return
    if phase == "start":
        _GC["began"], _GC["generation"] = time.perf_counter(), info["generation"]
    elif _GC["began"] is not None:
        _GC["s"] += time.perf_counter() - _GC["began"]
        _GC["n"] += 1
        _GC["full"] += _GC["generation"] == 2
        _GC["began"] = None


gc.callbacks.append(_gc_timer)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _T["configure"] = time.perf_counter()
    _T["configure_cpu"] = time.process_time()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _T.setdefault("first_test", time.perf_counter())


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    _T.setdefault("tests_done", time.perf_counter())


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
    print(f"COSTGC {_GC['s']:.6f} {_GC['n']} {_GC['full']}")
'''

SMALL_SUITE = '''\
import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_small(i):
    x = torch.ones(1024, device="{device}")
    y = (x * i + 1).sum()
    assert y.item() == 1024 * (i + 1)
'''

LAUNCH_SUITE = '''\
import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_launches(i):
    x = torch.zeros(256, device="{device}")
    for _ in range({kernels}):
        x.add_(1)
    assert x[0].item() == {kernels}
'''


BUSY_SUITE = '''\
import time

import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_matmul_bf16(i):
    a = torch.randn({size}, {size}, device="{device}", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    end = time.perf_counter() + {seconds}
    while time.perf_counter() < end:
        for _ in range(10):
            c = a @ b
        float(c[0, 0])
'''

#: the name of the busy suite (GPU-bound tests with the counters on), run apart from the rounds
BUSY = "busy_matmul"


@dataclass(frozen=True)
class Suite:
    """One generated suite: its file, its tests and the GPU operations they launch in all."""

    name: str
    path: Path
    tests: int
    kernels: int


def write_suites(folder: Path, small: Sequence[int] = SMALL_TESTS, launch: Sequence[int] = LAUNCH_KERNELS,
                 launch_tests: int = 10, device: str = "cuda") -> list[Suite]:
    """The suites, each a file of ``folder`` beside one conftest.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conftest.py").write_text(CONFTEST)
    suites = []
    for n in small:
        path = folder / f"test_small_{n}.py"
        path.write_text(SMALL_SUITE.format(tests=n, device=device))
        suites.append(Suite(f"small_{n}", path, n, n * SMALL_OPS))
    for k in launch:
        path = folder / f"test_launch_{k}.py"
        path.write_text(LAUNCH_SUITE.format(tests=launch_tests, kernels=k, device=device))
        suites.append(Suite(f"launch_{k}", path, launch_tests, launch_tests * (k + LAUNCH_EXTRA_OPS)))
    return suites


def write_busy_suite(folder: Path, tests: int, seconds: float, device: str = "cuda") -> Suite:
    """GPU-bound tests: bf16 matmuls of 4,096 (on a CPU 128) for ``seconds`` each (kernels not counted)."""
    path = folder / f"test_{BUSY}.py"
    path.write_text(BUSY_SUITE.format(tests=tests, seconds=seconds, device=device, size=4096 if device == "cuda" else 128))
    return Suite(BUSY, path, tests, 0)


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
    collected = GC.search(output)
    if collected:
        got["gc_s"], got["gc_collections"], got["gc_full"] = (float(collected.group(1)), int(collected.group(2)),
                                                               int(collected.group(3)))
    if run_doc:
        totals, machine = _totals(run_doc), run_doc.get("machine_info") or {}
        if totals.get("measure_ms") is not None:  # the run document's field (the summary line rounds it)
            # self-timed: the plugin's own timers; the line's estimate of what no timer sees (CUPTI's
            # records, the stack sampler: measure_unseen_ms) is kept apart
            unseen_ms = totals.get("measure_unseen_ms") or 0.0
            got["measure_s"] = (totals["measure_ms"] - unseen_ms) / 1000.0
            got["unseen_s"] = unseen_ms / 1000.0
            if totals.get("torch_calls_ms") is not None:  # of the self-timed work, torch's calls at the edges
                got["torch_calls_s"] = totals["torch_calls_ms"] / 1000.0
                got["own_beyond_torch_s"] = got["measure_s"] - got["torch_calls_s"]
        cpu, test_s = totals.get("counters_thread_cpu_s"), totals.get("test_s")
        if cpu is not None and test_s:
            got["counters_thread_cpu_pct"] = 100.0 * cpu / test_s
        for key in ("counters_thread_pct", "counters_thread_parts_cpu_s", "counters", "counters_fallback",
                    "counters_startup_s"):
            if totals.get(key) is not None:
                got[key] = totals[key]
        got["gpu"] = machine.get("gpu_model")
        got["torch"] = machine.get("torch_version") or machine.get("torch")
    return got


def run_suite(suite: Suite, config: str, work: Path, timeout_s: float,
              args: Optional[list[str]] = None) -> dict[str, Any]:
    """One fresh pytest process of ``suite`` in ``config`` (``args``: its options after ``--gpu-util``, when
    not one of CONFIGS'); raises RuntimeError when it fails."""
    args = CONFIGS[config] if args is None else args
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
            started: Optional[float] = None, plan: Optional[dict[str, Sequence[str]]] = None) -> Rounds:
    """Rounds of every suite in every configuration (order shuffled in each round) until the deadline.

    ``run(suite, config, seconds_left)`` gives one run's figures. A round starts only while the
    longest round so far (times 1.1) still fits before ``deadline_s`` seconds from ``started``
    (default: now); the first round always starts. A run that fails (or is cut by the deadline)
    leaves its round incomplete: that round is dropped and the rounds stop. ``plan``: the suites
    (by name) of the configurations that run only some (the others run all).
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
        order = [(s, c) for s in suites for c in configs if s.name in (plan or {}).get(c, [s.name])]
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
    """Rows (1, tests, kernels) of the suites; (1, tests) when kernels follow tests (small suites only)."""
    x = np.array([[1.0, s.tests, s.kernels] for s in suites])
    return x if np.linalg.matrix_rank(x) == 3 else x[:, :2]


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares (intercept s, s per test[, s per kernel]) of ``y`` (one value per suite row of ``x``)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef


def fit_rounds(suites: Sequence[Suite], values: np.ndarray, bootstrap: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The model fitted to ``values[round, suite]`` (seconds), with a bootstrap over the rounds.

    The point estimate fits the suites' means over the rounds; ``ci95`` the 2.5th and 97.5th
    percentiles of the fits of ``bootstrap`` resamples (rounds drawn with replacement); None with
    fewer than two rounds. Without a launch-bound suite the kernels follow the tests: no µs a
    kernel (None), the per-test figure holds the small test's kernels.
    """
    x = design(suites)
    kernels = x.shape[1] == 3
    values = np.asarray(values, dtype=float)
    coef = fit(x, values.mean(axis=0))
    out: dict[str, Any] = {"startup_s": float(coef[0]), "per_test_us": float(coef[1] * 1e6),
                           "per_kernel_us": float(coef[2] * 1e6) if kernels else None, "ci95": None}
    rounds = values.shape[0]
    if rounds >= 2 and bootstrap > 0:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, rounds, size=(bootstrap, rounds))
        means = values[picks].mean(axis=1)  # (bootstrap, suites)
        coefs = np.linalg.lstsq(x, means.T, rcond=None)[0].T  # (bootstrap, 2 or 3)
        lo, hi = np.percentile(coefs, [2.5, 97.5], axis=0)
        out["ci95"] = {"startup_s": [float(lo[0]), float(hi[0])],
                       "per_test_us": [float(lo[1] * 1e6), float(hi[1] * 1e6)],
                       "per_kernel_us": [float(lo[2] * 1e6), float(hi[2] * 1e6)] if kernels else None}
    return out


def slope_per_round(rounds: Rounds, suites: Sequence[Suite], config: str, key: str,
                    minus_plain: bool) -> Optional[dict[str, Any]]:
    """Per round, the slope (µs a test) of ``key`` over the small suites the configuration ran (least
    squares over their sizes; less plain's of the same round and suite when ``minus_plain``), then
    the median and range (min, max) over the rounds; None without two sizes."""
    small = [s for s in suites if s.name.startswith("small_")]
    per_round = []
    for this in rounds.runs:
        points = []
        for suite in small:
            got = this.get(config, {}).get(suite.name, {}).get(key)
            base = this.get("plain", {}).get(suite.name, {}).get(key) if minus_plain else 0.0
            if got is not None and base is not None:
                points.append((suite.tests, got - base))
        if len({n for n, _ in points}) >= 2:
            tests, values = np.array(points, dtype=float).T
            per_round.append(float(np.polyfit(tests, values, 1)[0] * 1e6))
    if not per_round:
        return None
    return {"median": statistics.median(per_round), "range": [min(per_round), max(per_round)],
            "rounds": len(per_round), "per_round": per_round}


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
             meta: Optional[dict[str, Any]] = None, busy: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """cost.json: each configuration's model beyond plain, plain's own slopes, and how they were measured."""
    doc: dict[str, Any] = {"configs": {}, "plain_per_test_us": None, "plain_per_kernel_us": None,
                           "rounds": len(rounds.runs), "basis": BASES[0], **(meta or {})}
    doc["suites"] = {s.name: {"tests": s.tests, "kernels": s.kernels} for s in suites}
    doc["bases"] = {}

    def ran(config: str) -> list[Suite]:
        return [s for s in suites if any(s.name in this.get(config, {}) for this in rounds.runs)]

    for basis in BASES:
        fits: dict[str, Any] = {}
        plain = matrix(rounds, ran("plain"), "plain", basis, minus_plain=False)
        if plain is not None:
            fits["plain"] = fit_rounds(ran("plain"), plain, bootstrap)
        for config in configs:
            if config == "plain":
                continue
            values = matrix(rounds, ran(config), config, basis, minus_plain=True)
            if values is not None and len(ran(config)) >= 2:
                fits[config] = fit_rounds(ran(config), values, bootstrap)
        doc["bases"][basis] = fits
    main = doc["bases"].get(BASES[0], {})
    doc["configs"] = {c: f for c, f in main.items() if c != "plain"}
    if "plain" in main:
        doc["plain_per_test_us"] = main["plain"]["per_test_us"]
        doc["plain_per_kernel_us"] = main["plain"]["per_kernel_us"]
        doc["plain_ci95"] = main["plain"]["ci95"]
    for config in configs:
        if config == "plain":
            continue
        entry = doc["configs"].setdefault(config, {"startup_s": None, "per_test_us": None, "per_kernel_us": None,
                                                   "ci95": None})
        entry["args"] = ["--gpu-util", *(CONFIGS.get(config) or [])]
        entry["suites"] = [s.name for s in ran(config)]
        entry["reported_startup_s"] = _median_of(rounds, config, "startup_s")
        entry["reported_counters_startup_s"] = _median_of(rounds, config, "counters_startup_s")
        entry["self_per_test_us"] = slope_per_round(rounds, suites, config, "measure_s", minus_plain=False)
        entry["slope_per_test_us"] = slope_per_round(rounds, suites, config, BASES[0], minus_plain=True)
        # the self-timed work split: torch's synchronizes and allocator reads at the edges, and the plugin's own rest
        for key, figure in (("torch_calls_per_test_us", "torch_calls_s"),
                            ("own_beyond_torch_per_test_us", "own_beyond_torch_s")):
            entry[key] = slope_per_round(rounds, suites, config, figure, minus_plain=False)
        # the garbage collector's seconds among the tests beyond plain's: part of what no timer of the plugin's sees
        entry["gc_per_test_us"] = slope_per_round(rounds, suites, config, "gc_s", minus_plain=True)
    cpu = _median_of(rounds, "counters", "counters_thread_cpu_pct")
    if cpu is not None:
        doc["counters_thread_cpu_pct"] = cpu
    doc["counters_busy"] = busy_summary(busy)
    doc["counters_thread_pct_busy"] = (doc["counters_busy"] or {}).get("thread_pct_median")
    doc["acceptance"] = acceptance(doc)
    doc["measurement_cost_line"] = summary_line_check(rounds, suites, configs)
    doc["stopped"] = rounds.stopped
    doc["errors"] = rounds.errors[-3:]
    doc["runs"] = rounds.runs
    return doc


def busy_summary(runs: Sequence[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The counters' sampling thread on the busy suite: its share of one core over its life (median
    and range over the runs), the source it read, its parts and the counters' start-up."""
    if not runs:
        return None
    pcts = [r["counters_thread_pct"] for r in runs if r.get("counters_thread_pct") is not None]
    startups = [r["counters_startup_s"] for r in runs if r.get("counters_startup_s") is not None]
    return {"runs": list(runs), "thread_pct_median": statistics.median(pcts) if pcts else None,
            "thread_pct_range": [min(pcts), max(pcts)] if pcts else None,
            "thread_cpu_pct_of_test_time": _median([r.get("counters_thread_cpu_pct") for r in runs]),
            "counters": runs[-1].get("counters"), "counters_fallback": runs[-1].get("counters_fallback"),
            "parts_cpu_s": runs[-1].get("counters_thread_parts_cpu_s"),
            "counters_startup_s": statistics.median(startups) if startups else None}


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


#: issue 41's acceptance: (what, config, figure's path in cost.json, bar, unit)
BARS = (
    ("default: the plugin's self-timed work per test (median)", "default", ("self_per_test_us", "median"), 50.0, "µs"),
    ("default: session-time slope beyond plain per test (median)", "default", ("slope_per_test_us", "median"), 150.0, "µs"),
    ("default: start-up beyond plain", "default", ("startup_s",), 0.10, "s"),
    ("default: per kernel on the launch-bound suites", "default", ("per_kernel_us",), 1.5, "µs"),
    ("lean: the plugin's self-timed work per test (median)", "lean", ("self_per_test_us", "median"), 30.0, "µs"),
    ("counters: sampling thread on the busy suite (% of one core)", None, ("counters_thread_pct_busy",), 5.0, "%"),
    ("counters: their start-up, more than the default's", None, ("counters_busy", "counters_startup_s"), 0.15, "s"),
)


def acceptance(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each bar of issue 41 beside its figure (None: not measured in this run) and whether it holds."""
    rows = []
    for what, config, path, bar, unit in BARS:
        figure: Any = doc["configs"].get(config, {}) if config else doc
        for key in path:
            figure = figure.get(key) if isinstance(figure, dict) else None
        if figure is None and path == ("counters_busy", "counters_startup_s"):
            figure = (doc["configs"].get("counters") or {}).get("reported_counters_startup_s")
        rows.append({"what": what, "figure": figure, "bar": bar, "unit": unit,
                     "met": None if figure is None else bool(figure <= bar)})
    return rows


def acceptance_table(doc: dict[str, Any]) -> str:
    lines = [f"issue 41's acceptance on {doc.get('gpu')}, torch {doc.get('torch')}, {doc.get('date')}: "
             f"{doc['rounds']} rounds ({doc.get('stopped', '')})",
             f"{'':62} {'figure':>10} {'bar':>8}  met"]
    for row in doc.get("acceptance") or ():
        shown = "-" if row["figure"] is None else f"{row['figure']:.3g}"
        met = "n/a" if row["met"] is None else ("yes" if row["met"] else "NO")
        lines.append(f"{row['what']:62} {shown:>8} {row['unit']:<2}{'<= ' + format(row['bar'], 'g'):>7} {row['unit']:<2} {met}")
    for config, fitted in doc["configs"].items():
        for key in ("self_per_test_us", "slope_per_test_us", "torch_calls_per_test_us", "own_beyond_torch_per_test_us",
                    "gc_per_test_us"):
            got = fitted.get(key)
            if got:
                lines.append(f"  {config:9} {key:18} median {got['median']:8.1f} µs, range {got['range'][0]:.1f}.."
                             f"{got['range'][1]:.1f} over {got['rounds']} rounds")
    busy = doc.get("counters_busy")
    if busy:
        lines.append(f"  counters on the busy suite: {busy.get('counters')} {busy.get('counters_fallback') or ''}; "
                     f"thread CPU by part (s): {busy.get('parts_cpu_s')}")
    return "\n".join(lines)


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
                said.append(got["measure_s"] + (got.get("unseen_s") or 0.0))  # the whole line
                startups = (got.get("startup_s") or 0.0) + (got.get("counters_startup_s") or 0.0)
                extra.append(got["span_s"] - plain["span_s"] - startups)
            if said:
                per_suite[suite.name] = {"reported_s": statistics.fmean(said), "extra_span_s": statistics.fmean(extra)}
        found[config] = per_suite
    return found


# -- the table ------------------------------------------------------------------------------------

def _interval(fitted: dict[str, Any], key: str, scale: float, digits: int) -> str:
    ci = fitted.get("ci95")
    if not ci or not ci.get(key):
        return ""
    lo, hi = ci[key]
    return f" ({lo * scale:.{digits}f}..{hi * scale:.{digits}f})"


def table(doc: dict[str, Any]) -> str:
    lines = [f"{doc.get('gpu')}, torch {doc.get('torch')}, {doc.get('date')}; {doc['rounds']} rounds "
             f"({doc.get('stopped', '')}); beyond plain, fitted on the {doc['basis']} (95% bootstrap interval)",
             f"{'config':10} {'start-up s':>24} {'µs per test':>24} {'µs per kernel':>24}"]
    for name, fitted in doc["configs"].items():
        if fitted.get("startup_s") is None:
            lines.append(f"{name:10} {'(one suite: no fit)':>24}")
            continue
        kernel = (f"{fitted['per_kernel_us']:>8.2f}{_interval(fitted, 'per_kernel_us', 1, 2):>16}"
                  if fitted.get("per_kernel_us") is not None else f"{'-':>8}{'':>16}")
        lines.append(f"{name:10} {fitted['startup_s']:>8.3f}{_interval(fitted, 'startup_s', 1, 3):>16} "
                     f"{fitted['per_test_us']:>8.1f}{_interval(fitted, 'per_test_us', 1, 1):>16} {kernel}")
    for basis in ("cpu_s", "tests_s"):
        for name, fitted in (doc.get("bases", {}).get(basis) or {}).items():
            if name != "plain":
                kernel = (f", {fitted['per_kernel_us']:.2f} µs a kernel{_interval(fitted, 'per_kernel_us', 1, 2)}"
                          if fitted.get("per_kernel_us") is not None else "")
                lines.append(f"  on {basis}: {name:9} {fitted['startup_s']:>7.3f} s{_interval(fitted, 'startup_s', 1, 3)}, "
                             f"{fitted['per_test_us']:.1f} µs a test{_interval(fitted, 'per_test_us', 1, 1)}{kernel}")
    if doc.get("plain_per_test_us") is not None:
        kernel = f", {doc['plain_per_kernel_us']:.2f} µs per kernel" if doc.get("plain_per_kernel_us") is not None else ""
        lines.append(f"plain itself: {doc['plain_per_test_us']:.1f} µs per test{kernel}")
    if doc.get("counters_thread_cpu_pct") is not None:
        lines.append(f"counters' sampling thread: {doc['counters_thread_cpu_pct']:.1f}% of one core while the tests ran (median)")
    return "\n".join(lines)


#: issue 41's acceptance shape, one device call of ~6 minutes on an H100 (``--acceptance``): default,
#: lean and counters against plain on 500 and 5,000 small tests, a launch-bound pair for µs a kernel
#: (default and plain only), lean on the small pair, counters on 500 tests only (its start-up each
#: round), 5 rounds, and the counters' thread on 5 tests of 2 s bf16 matmuls
ACCEPTANCE_ARGS = ["--sizes", "500,5000", "--launch-kernels", "200,10000", "--launch-tests", "10", "--rounds", "5",
                   "--suites-of", "lean=small", "--suites-of", "counters=small_min",
                   "--busy-tests", "5", "--busy-seconds", "2", "--places-parts"]


def places_parts(folder: Path) -> dict[str, Any]:
    """The places' own costs, measured by the where step's code in a process of its own (or why not)."""
    script = Path(__file__).resolve().parents[1] / "validation" / "where" / "where_truth.py"
    try:
        subprocess.run([sys.executable, str(script), str(folder), "--cost-only"], check=True, timeout=120,
                       capture_output=True, text=True)
        return json.loads((folder / "cost.json").read_text())
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 500,5000, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes like 500,5000, got {text!r}")
    return sizes


def _plan(entries: Sequence[str], suites: Sequence[Suite], parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """``--suites-of CONFIG=SUITE,SUITE`` entries as {config: suite names}, each name checked (``small``:
    every small suite, ``launch``: every launch-bound one, ``small_min``: the smallest small suite)."""
    plan: dict[str, list[str]] = {}
    names = {s.name for s in suites}
    small = sorted((s for s in suites if s.name.startswith("small_")), key=lambda s: s.tests)
    aliases = {"small": [s.name for s in small], "small_min": [s.name for s in small[:1]],
               "launch": [s.name for s in suites if s.name.startswith("launch_")]}
    for entry in entries:
        config, _, listed = entry.partition("=")
        chosen = [name for n in listed.split(",") if n for name in aliases.get(n, [n])]
        if config not in CONFIGS or not chosen or set(chosen) - names:
            parser.error(f"--suites-of {entry!r}: expected CONFIG=SUITE[,SUITE] with CONFIG one of {', '.join(CONFIGS)} "
                         f"and suites among {', '.join(sorted(names))}")
        plan[config] = chosen
    return plan


def main(argv: Optional[list[str]] = None) -> int:
    began = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--acceptance" in argv:  # the preset first: options given after it win
        argv = [a for a in argv if a != "--acceptance"]
        argv = ACCEPTANCE_ARGS + argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--deadline-s", type=float, default=420.0, help="seconds from the start by which rounds end")
    parser.add_argument("--max-rounds", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=None, help="this many rounds (unless the deadline comes first)")
    parser.add_argument("--sizes", type=_sizes, default=list(SMALL_TESTS), help="tests of the small suites, e.g. 500,5000")
    parser.add_argument("--launch-kernels", type=_sizes, default=list(LAUNCH_KERNELS),
                        help="kernels a test of the launch-bound suites, e.g. 200,10000")
    parser.add_argument("--launch-tests", type=int, default=10, help="tests in each launch-bound suite")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="configurations, plain always among them")
    parser.add_argument("--suites-of", action="append", default=[], metavar="CONFIG=SUITE,SUITE",
                        help="run a configuration on these suites only (repeatable)")
    parser.add_argument("--busy-tests", type=int, default=0, help="tests of the busy suite with the counters on (0: none)")
    parser.add_argument("--busy-seconds", type=float, default=2.0, help="seconds of bf16 matmuls a busy test")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the suites' tensors live (cpu: the pipeline on a machine without a GPU)")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--no-warmup", action="store_true", help="skip the one untimed run of each configuration")
    parser.add_argument("--dry-run", action="store_true", help="write the suites and print the plan; run nothing")
    parser.add_argument("--acceptance", action="store_true", help="issue 41's acceptance shape (ACCEPTANCE_ARGS)")
    parser.add_argument("--places-parts", action="store_true",
                        help="the findings' places part by part (validation/where/where_truth.py --cost-only) into "
                             "cost.json's parts.places: µs more per sync and per copy, the sampler's share of a core")
    args = parser.parse_args(argv)
    configs = ["plain", *(c for c in args.configs.split(",") if c and c != "plain")]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if args.launch_tests < 1:
        parser.error("--launch-tests must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cost_model_"))
    suites = write_suites(work / "suites", args.sizes, args.launch_kernels, args.launch_tests, args.device)
    plan = _plan(args.suites_of, suites, parser)
    busy_suite = write_busy_suite(work / "suites", args.busy_tests, args.busy_seconds, args.device) if args.busy_tests else None
    if args.dry_run:
        for suite in suites:
            runs_in = [c for c in configs if suite.name in plan.get(c, [suite.name])]
            print(f"{suite.name:14} {suite.tests:5d} tests {suite.kernels:8d} kernels  {', '.join(runs_in)}  {suite.path}")
        if busy_suite is not None:
            print(f"{BUSY:14} {busy_suite.tests:5d} tests of {args.busy_seconds:g} s bf16 matmuls, counters on, once")
        print(f"configs: {', '.join(configs)}; {args.rounds or 'rounds'} rounds until {args.deadline_s:.0f} s")
        return 0

    def run(suite: Suite, config: str, left: float) -> dict[str, Any]:
        return run_suite(suite, config, work, timeout_s=left)

    meta = {"date": dt.date.today().isoformat(), "gpu": None, "torch": None, "python": sys.version.split()[0],
            "launch_tests": args.launch_tests, "deadline_s": args.deadline_s, "device": args.device,
            "plan": plan, "busy_suite": ({"tests": args.busy_tests, "seconds": args.busy_seconds, "dtype": "bfloat16",
                                          "args": ["--gpu-util", *CONFIGS["counters"]]} if busy_suite else None),
            "bytecode": "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "written and reused"}
    busy: list[dict[str, Any]] = []
    if args.places_parts:  # before the rounds: a quiet GPU, the same process shape as the where step's
        meta["parts"] = {"places": places_parts(work / "places")}

    def write(rounds: Rounds) -> None:
        for this in rounds.runs:
            for got in this.get("default", {}).values():
                meta["gpu"] = meta["gpu"] or got.get("gpu")
                meta["torch"] = meta["torch"] or got.get("torch")
        doc = document(rounds, suites, configs, args.bootstrap, meta, busy)
        (args.out / "cost.json").write_text(json.dumps(doc, indent=1) + "\n")
        (args.out / "cost_acceptance.txt").write_text(table(doc) + "\n\n" + acceptance_table(doc) + "\n")

    if not args.no_warmup:  # bytecode written, every module read once: every timed run starts alike
        for config in configs:
            try:
                run(suites[0], config, 120)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"warm-up {config} failed: {str(exc)[:2000]}")
                return 1
    if busy_suite is not None:
        try:
            busy.append(run(busy_suite, "counters", busy_suite.tests * args.busy_seconds + 120))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"the busy suite failed: {str(exc)[:2000]}")
    rounds = measure(suites, configs, run, args.deadline_s, started=began,
                     max_rounds=args.rounds if args.rounds is not None else args.max_rounds, after_round=write, plan=plan)
    write(rounds)
    doc = json.loads((args.out / "cost.json").read_text())
    print(table(doc))
    print(acceptance_table(doc))
    for error in rounds.errors:
        print("error:", error[:2000])
    return 0 if rounds.runs else 1


if __name__ == "__main__":
    sys.exit(main())
