"""(GPU) Where a window's edges spend their time in situ: each part of ContinuousCapture.begin/end
timed inside a real pytest run of small tests (five tiny kernels a test), not in a loop.

    python benchmarks/checks/edge_probe.py --out DIR [--tests 300] [--rounds 2]

Runs the suite with ``-p edge_probe`` under ``--gpu-util`` (default), with findings off (no
places sampler) and with a raw ``_cuda_synchronize`` just before the plugin's begin (``presync``:
does the first driver call after pytest's set-up pay the cold cost, whoever makes it?). The
plugin part (loaded with ``-p edge_probe``) wraps, once the capture exists, the capture's
synchronize, its source's clock, the places' begin/end, the profiler check and the memory
meter's begin/read, each split by the edge it ran at, and prints ``EDGEPROBE {...}``: per name
the calls and the median and mean µs. Writes DIR/edge_probe.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SUITE = '''
import pytest
import torch

X = None


@pytest.mark.parametrize("i", range({tests}))
def test_small(i):
    global X
    if X is None:
        X = torch.ones(256, device="cuda")
    for _ in range(5):
        X.add_(1.0)
'''


class _Probe:
    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.edge = "outside"
        self.wrapped = False

    def add(self, name: str, seconds: float) -> None:
        self.times.setdefault(name, []).append(seconds)

    def timed(self, name: str, function: Callable[..., Any], by_edge: bool = True) -> Callable[..., Any]:
        clock = time.perf_counter

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(f"{name} @{self.edge}" if by_edge else name, clock() - began)

        return wrapper

    def edge_timed(self, edge: str, function: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.edge = edge
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(f"ContinuousCapture.{edge} (whole)", clock() - began)
                self.edge = "outside"

        return wrapper

    def wrap(self, config: pytest.Config) -> None:
        self.wrapped = True
        from pytest_gpuutil.plugin import STATE_KEY

        state = config.stash.get(STATE_KEY, None)
        if state is None:
            return
        measurement = state.measuring.measurement
        capture = measurement.capture
        if capture is not None:
            capture.begin = self.edge_timed("begin", capture.begin)
            capture.end = self.edge_timed("end", capture.end)
            capture.synchronize = self.timed("synchronize", capture.synchronize)
            capture.profiler_active = self.timed("profiler_active", capture.profiler_active)
            source = capture.source
            source.now = self.timed("source.now", source.now)
            if capture.places is not None:
                capture.places.begin = self.timed("places.begin", capture.places.begin)
                capture.places.end = self.timed("places.end", capture.places.end)
        meter = measurement.memory_reads.meter
        if meter is not None:
            meter.begin = self.timed("MemoryMeter.begin", meter.begin, by_edge=False)
            meter.read = self.timed("MemoryMeter.read", meter.read, by_edge=False)
        for name in ("begin", "end"):
            method = getattr(measurement, name)
            setattr(measurement, name, self.timed(f"Measurement.{name}", method, by_edge=False))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_ProbePlugin(), "edge-probe")


class _ProbePlugin:
    def __init__(self) -> None:
        self.probe = _Probe()
        self.presync = os.environ.get("EDGE_PROBE_PRESYNC") == "1"

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not self.probe.wrapped:
            self.probe.wrap(item.config)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        clock = time.perf_counter
        if self.presync:
            import torch

            if torch.cuda.is_initialized():
                began = clock()
                torch._C._cuda_synchronize()
                self.probe.add("raw _cuda_synchronize before the plugin's begin", clock() - began)
        began = clock()
        yield
        self.probe.add("whole call phase (all plugins, the body)", clock() - began)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Item) -> Any:
        began = time.perf_counter()
        yield
        self.probe.add("test body", time.perf_counter() - began)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        out = {}
        for name, values in self.probe.times.items():
            us = [v * 1e6 for v in values[20:]] or [v * 1e6 for v in values]  # the first 20 tests warm up
            out[name] = {"calls": len(values), "median_us": round(statistics.median(us), 2),
                         "mean_us": round(statistics.fmean(us), 2)}
        print("EDGEPROBE " + json.dumps(out), flush=True)


CONFIGS = {
    "default": ["--gpu-util"],
    "findings_off": ["--gpu-util", "--gpu-util-findings=off"],
    "presync": ["--gpu-util"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_small.py").write_text(SUITE.replace("{tests}", str(args.tests)))
        for _ in range(args.rounds):
            for name, extra in CONFIGS.items():
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
                if name == "presync":
                    env["EDGE_PROBE_PRESYNC"] = "1"
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "edge_probe",
                       "test_small.py", f"--gpu-util-dir={folder / 'out'}", *extra]
                done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=300)
                line = next((ln for ln in done.stdout.splitlines() if ln.startswith("EDGEPROBE ")), None)
                if line is None:
                    print(f"{name}: rc={done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                    continue
                results[name].append(json.loads(line[len("EDGEPROBE "):]))
    (args.out / "edge_probe.json").write_text(json.dumps(results, indent=1) + "\n")
    for name, rounds in results.items():
        print(f"== {name} ({len(rounds)} rounds): median µs a call, per round")
        names = sorted({k for r in rounds for k in r})
        for key in names:
            print(f"  {key:60s} " + "  ".join(f"{r[key]['median_us']:8.2f}" if key in r else "       -" for r in rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
