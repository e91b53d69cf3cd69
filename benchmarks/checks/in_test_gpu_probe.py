"""(GPU) Why the in-test path costs more in a suite than in a loop (issue 41, part 41i): each part of
``pytest_runtest_call``'s before and after timed in situ, in real pytest runs, with one suspect at a
time changed, beside the same calls in a loop.

    python benchmarks/checks/in_test_gpu_probe.py --out DIR [--tests 300] [--rounds 2] [--budget-s 85]

Each run is a fresh ``pytest --gpu-util`` process over ``--tests`` small tests (a tensor of 1,024
floats made and multiplied five times: six small kernels), with a timing plugin (written beside the
suite) that wraps the in-test calls with a ``perf_counter`` pair each: ``Measuring.begin_test`` /
``end_test`` (the whole before/after of the call hook, less the hook's own two lines),
``ContinuousCapture.begin`` / ``end``, the window edges' synchronize (at begin and at end apart),
``MemoryReads.begin`` / ``end`` (called per test only where the capture does not read the meter at its
own edges), ``MemoryMeter.begin`` / ``read``, ``HostPlaces.begin`` / ``end`` (the stack sampler's), and the
test's body (``pytest_pyfunc_call``); "torch calls" is the capture's own timing of torch's calls at the edges
(``torch_s`` over the suite's windows: what the run document's ``torch_calls_ms`` sums). After the last test, still inside the session, the same capture's
``begin``+``end``, the synchronize and the memory meter's calls run 300 times in a loop.

The variants (interleaved, ``--rounds`` rounds, as many as ``--budget-s`` allows):

- ``default``: ``--gpu-util`` as installed (the stack sampler waits in C between calls);
- ``sampler_py_wait``: the sampler's Python wait (its thread ticks with the GIL between calls, as
  before issue 41i);
- ``no_places``: findings on, the stack sampler and the calls' places off (no thread, no switch interval);
- ``no_switch``: the sampler on, the switch interval left alone;
- ``driver_sync``: the window edges' synchronize by the driver (``cuCtxSynchronize`` through ctypes;
  torch's where it fails) instead of torch's ``_cuda_synchronize`` (runtime, CUPTI's callbacks, torch's layers);
- ``lean``: ``--gpu-util-findings=off --gpu-util-memory=off``.

Writes DIR/in_test_gpu_probe.json (every run's medians and means, µs a call) and
DIR/in_test_gpu_probe.txt (per variant, the median over rounds of each run's median, and the
loop's figures). A variant's difference to ``default`` in ``begin_test`` / ``end_test`` is what that
suspect costs a test in situ; ``in situ`` against ``loop`` is what the suite's cold caches add.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

VARIANTS = {
    "default": [],
    "sampler_py_wait": [],
    "no_places": [],
    "no_switch": [],
    "driver_sync": [],
    "lean": ["--gpu-util-findings=off", "--gpu-util-memory=off"],
}

SUITE = """
import pytest
import torch


@pytest.mark.parametrize("i", range({tests}))
def test_small(i):
    x = torch.ones(1024, device="cuda")
    for _ in range(5):
        x = x * 1.0001
"""

SYNTHETIC_SUITE = """
import pytest


@pytest.mark.parametrize("i", range({tests}))
def test_small(i, gpu):
    for _ in range(6):
        gpu.run("elementwise_kernel", 2_000)
"""

ROOT = Path(__file__).resolve().parents[2]

TIMER = r'''
"""The probe's timing plugin (-p probe_timer): wraps the in-test calls, applies PROBE_VARIANT."""
import ctypes
import json
import os
import resource
import statistics
import time

import pytest

from pytest_gpuutil.capture import continuous
from pytest_gpuutil.capture.places import host, sampler
from pytest_gpuutil.capture.memory import MemoryMeter
from pytest_gpuutil.measurement import memory_reads, windows
from pytest_gpuutil.session import measuring

VARIANT = os.environ["PROBE_VARIANT"]
TIMES = {}
SEEN = {}
EDGE = {"at": "begin"}
clock = time.perf_counter

TURNS = [0]


class CountingRandom(sampler.random.Random):
    """The sampler's jitter: one draw a pass of its loop, i.e. a turn it took the GIL for."""

    def random(self):
        TURNS[0] += 1
        return super().random()


sampler.random = type("random", (), {"Random": CountingRandom})

if VARIANT == "sampler_py_wait":
    sampler._c_wait = lambda: None
elif VARIANT == "no_places":
    windows._host_places = lambda *args: None
elif VARIANT == "no_switch":
    sampler.SAMPLING_SWITCH_INTERVAL_S = 10.0  # begin() lowers the interval only below what it is


def timed(owner, name, label, keep=None):
    original = getattr(owner, name)

    def wrapper(self, *args, **kwargs):
        if keep is not None:
            SEEN.setdefault(keep, self)
        began = clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            TIMES.setdefault(label, []).append(clock() - began)

    setattr(owner, name, wrapper)


timed(measuring.Measuring, "begin_test", "Measuring.begin_test")
timed(measuring.Measuring, "end_test", "Measuring.end_test")
timed(memory_reads.MemoryReads, "begin", "MemoryReads.begin")
timed(memory_reads.MemoryReads, "end", "MemoryReads.end")
timed(MemoryMeter, "begin", "MemoryMeter.begin", keep="meter")
timed(MemoryMeter, "read", "MemoryMeter.read")
timed(host.HostPlaces, "begin", "HostPlaces.begin")
timed(host.HostPlaces, "end", "HostPlaces.end")
_begin, _end = continuous.ContinuousCapture.begin, continuous.ContinuousCapture.end


def capture_begin(self, key, began_at=None):
    SEEN.setdefault("capture", self)
    EDGE["at"] = "begin"
    began = clock()
    try:
        return _begin(self, key, began_at)
    finally:
        TIMES.setdefault("ContinuousCapture.begin", []).append(clock() - began)


def capture_end(self, began_at=None):
    EDGE["at"] = "end"
    began = clock()
    try:
        return _end(self, began_at)
    finally:
        TIMES.setdefault("ContinuousCapture.end", []).append(clock() - began)


continuous.ContinuousCapture.begin, continuous.ContinuousCapture.end = capture_begin, capture_end
_sync_if_used = continuous.synchronize_if_used


def sync_if_used(torch, quiet=None):
    inner = _sync_if_used(torch, quiet)
    if VARIANT == "driver_sync":
        lib = ctypes.CDLL("libcuda.so.1")
        driver = lib.cuCtxSynchronize
        driver.restype = ctypes.c_int
        is_initialized = torch.cuda.is_initialized
        fallback = inner

        def inner():
            if is_initialized() and driver() != 0:
                fallback()

    def synchronize():
        began = clock()
        try:
            return inner()
        finally:
            TIMES.setdefault("synchronize at " + EDGE["at"], []).append(clock() - began)

    SEEN["sync"] = inner
    return synchronize


continuous.synchronize_if_used = sync_if_used


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    began = clock()
    yield
    TIMES.setdefault("test body", []).append(clock() - began)


def loop(label, body, count=300):
    times = []
    for _ in range(count):
        began = clock()
        body()
        times.append(clock() - began)
    TIMES[label + " (loop)"] = times


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    yield
    capture, meter, sync = SEEN.get("capture"), SEEN.get("meter"), SEEN.get("sync")
    if sync is not None:
        loop("synchronize", sync)
    if capture is not None:
        kept = len(capture._closed)
        SEEN["torch_s"] = getattr(capture, "torch_s", None)  # the suite's, before the loop's windows add to it

        def window():
            capture.begin("probe-loop")
            capture.end()

        saved = {name: list(got) for name, got in TIMES.items()}
        loop("ContinuousCapture.begin+end", window)
        for name in ("ContinuousCapture.begin", "ContinuousCapture.end", "synchronize at begin", "synchronize at end",
                     "HostPlaces.begin", "HostPlaces.end"):
            if name in saved:
                TIMES[name] = saved[name]  # the loop's own calls are not the suite's
        del capture._closed[kept:]
    if meter is not None:
        loop("MemoryMeter.begin", meter.begin)
        loop("MemoryMeter.read", meter.read)


def pytest_unconfigure(config):
    places = SEEN.get("capture") and SEEN["capture"].places
    out = {name: {"calls": len(got), "median_us": statistics.median(got) * 1e6,
                  "mean_us": statistics.fmean(got) * 1e6} for name, got in TIMES.items() if got}
    sampled = getattr(places, "sampler", None)
    out["sampler"] = {"samples": getattr(sampled, "samples_taken", None), "cpu_s": getattr(sampled, "cpu_s", None),
                      "GIL turns": TURNS[0] if sampled is not None else None}
    windows = len(TIMES.get("ContinuousCapture.begin", ()))
    if SEEN.get("torch_s") is not None and windows:  # the capture's own timing of torch's calls at the edges
        out["torch calls"] = {"per_window_us": SEEN["torch_s"] / windows * 1e6}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["process"] = {"voluntary_switches": usage.ru_nvcsw, "involuntary_switches": usage.ru_nivcsw,
                      "cpu_s": usage.ru_utime + usage.ru_stime}
    with open(os.environ["PROBE_OUT"], "w") as handle:
        json.dump(out, handle)
'''


def run_one(work: Path, variant: str, extra: list[str], index: int) -> dict[str, Any]:
    out = work / f"run_{index}_{variant}.json"
    env = {**os.environ, "PROBE_VARIANT": variant, "PROBE_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "probe_timer",
                           "-o", "addopts=", "--gpu-util", *extra, "test_probe_suite.py"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - began
    if done.returncode != 0 or not out.exists():
        return {"variant": variant, "failed": done.returncode, "tail": (done.stdout + done.stderr)[-2000:], "s": seconds}
    return {"variant": variant, "s": seconds, "figures": json.loads(out.read_text())}


def summary(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    by_variant: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for name, figures in run.get("figures", {}).items():
            if "median_us" in figures:
                by_variant.setdefault(run["variant"], {}).setdefault(name, []).append(figures["median_us"])
                by_variant[run["variant"]].setdefault(name + " [mean]", []).append(figures["mean_us"])
    for run in runs:
        figures = run.get("figures", {})
        for group in ("process", "sampler", "torch calls"):
            for name, value in (figures.get(group) or {}).items():
                if isinstance(value, (int, float)):
                    by_variant.setdefault(run["variant"], {}).setdefault(f"{group}: {name} (a run)", []).append(value)
    table = {variant: {name: statistics.median(values) for name, values in names.items()}
             for variant, names in by_variant.items()}
    names = sorted({name for names in table.values() for name in names if not name.endswith("[mean]")})
    variants = [v for v in VARIANTS if v in table]
    lines = ["µs a call: the median over rounds of each run's median (mean in brackets)",
             f"{'':40s}" + "".join(f"{v:>20s}" for v in variants)]
    for name in names:
        cells = []
        for v in variants:
            med, mean = table[v].get(name), table[v].get(name + " [mean]")
            if med is not None and mean is None:
                cells.append(f"{med:12.3f}")
            else:
                cells.append(f"{med:9.2f} ({mean:7.2f})" if med is not None else f"{'-':>20s}")
        lines.append(f"{name:40s}" + "".join(f"{c:>20s}" for c in cells))
    return table, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=85.0)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--synthetic", action="store_true",
                        help="the probe's own check on a CPU machine: the tests' synthetic GPU (no CUDA: no memory, no synchronize)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("in_test_gpu_probe: torch is not importable", file=sys.stderr)
        return 2
    if not (args.synthetic or torch.cuda.is_available()):
        print("in_test_gpu_probe: no CUDA GPU here", file=sys.stderr)
        return 2
    gpu = "synthetic (CPU)" if args.synthetic else torch.cuda.get_device_name(0)
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [v for v in args.variants.split(",") if v in VARIANTS]
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="in_test_probe_") as tmp:
        work = Path(tmp)
        (work / "test_probe_suite.py").write_text(SYNTHETIC_SUITE.format(tests=args.tests) if args.synthetic
                                                  else SUITE.format(tests=args.tests))
        if args.synthetic:
            sys.path.insert(0, str(ROOT))
            from tests.helpers import SYNTHETIC_CONFTEST

            (work / "conftest.py").write_text(SYNTHETIC_CONFTEST + "\nGPU.wants_places = True  # the stack sampler runs\n")
        (work / "probe_timer.py").write_text(textwrap.dedent(TIMER))
        index = 0
        for round_ in range(args.rounds):
            for variant in chosen:
                elapsed = time.perf_counter() - started
                per_run = max((r["s"] for r in runs), default=10.0)
                if elapsed + per_run > args.budget_s:
                    break
                run = run_one(work, variant, VARIANTS[variant], index)
                run["round"] = round_
                runs.append(run)
                index += 1
                state = "failed" if "failed" in run else "ok"
                print(f"round {round_} {variant:16s} {run['s']:5.1f} s {state}", flush=True)
    table, text = summary(runs)
    header = (f"in_test_gpu_probe: {gpu}, torch {torch.__version__}, {args.tests} tests a run, "
              f"{len(runs)} runs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    (args.out / "in_test_gpu_probe.json").write_text(json.dumps(
        {"gpu": gpu, "torch": torch.__version__, "tests": args.tests, "runs": runs, "summary": table}, indent=1))
    (args.out / "in_test_gpu_probe.txt").write_text(header + "\n" + text + "\n")
    print(header)
    print(text)
    failed = [r for r in runs if "failed" in r]
    for run in failed[:2]:
        print(f"--- {run['variant']} failed (rc {run['failed']}):\n{run['tail']}")
    return 1 if failed and len(failed) == len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
