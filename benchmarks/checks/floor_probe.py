"""(GPU) The floor under issue 41's self-timed bars: what a plugin that does nothing but the calls a
measured test needs inside its call costs, timed the way the acceptance times ours.

    python benchmarks/checks/floor_probe.py --out DIR [--rounds 5] [--deadline-s 480] [--small 500,5000]

A "floor" plugin (written beside the suites, ``-p floor_plugin``) starts CUPTI's activity records the
way ours does (``pytest_gpuutil.capture.cupti.CuptiSource``: kernels, memcpy, memset and the host's
waits) and wraps each test's call with exactly what issue 41 says must happen there, self-timed
with ``perf_counter`` around its own lines:

- ``floor_lean``: the window's edges only: torch's synchronize and CUPTI's clock before the call,
  the same after it, the two stamps appended to a list;
- ``floor_default``: those, plus the allocator's peaks and counts reset before the call
  (``_cuda_resetPeakMemoryStats``, ``_cuda_resetAccumulatedMemoryStats``) and its one read after it
  (``_cuda_memoryStats``), the peak kept.

Nothing else: no record, no file, no drain, no teardown hook. Then the least a columnar path can do
and still write issue 41's per-test files (``columnar_floor_plugin.py`` beside this script:
``columnar_default``, ``columnar_lean``): the same calls in the test, the node id and outcome
appended at the teardown, and per flush of 100 tests the drain, one attribution, each test's record
dict, its spool line and CSV row; the run's files at the end. Beside them, in the same rounds,
``plain`` (no plugin) and ours (``default``, ``lean``: ``--gpu-util`` as cost_model.py runs it).
``--configs`` picks some (plain always among them); ``default_f1000``, ``default_f10s`` and
``lean_f1000`` are ours with a flush every 1,000 tests, or only by the policy's time and size bounds.
Every configuration runs cost_model.py's small suite (one tensor, four kernels and ``.item()``'s
copy a test) at each size of ``--small``, each run a fresh process, the order shuffled per round.

Per configuration, per round: the self-timed slope (µs a test: the floor plugin's own seconds, or
our run document's measurement cost less its unseen part) and the session-time slope beyond
plain (cost_model.py's run_s basis), and the garbage collector's seconds among the tests beyond
plain's, then the median and range over rounds. Writes
DIR/floor_probe.json and DIR/floor_probe.txt.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import cost_model  # noqa: E402  (benchmarks/cost_model.py: the suites, one run's figures, the slopes)

FLOOR_PLUGIN = r'''
"""floor_plugin: only the calls a measured test needs in its call, self-timed (FLOOR_MODE=default|lean)."""
import inspect
import os
import time

import pytest

_WRAPPER = {"wrapper": True} if "wrapper" in inspect.signature(pytest.hookimpl).parameters else {"hookwrapper": True}
MEMORY = os.environ.get("FLOOR_MODE", "default") == "default"


class Floor:
    def __init__(self):
        self.own_s = 0.0
        self.windows = []  # (start_ns, end_ns, peak bytes): the columns a flush would read
        self.source = None
        self.tests = 0

    def _start(self):
        from columnar_floor_plugin import required_calls  # beside this script (on the runs' PYTHONPATH)

        self.source, self.now, self.sync, self.reset, self.reset_counts, self.stats = required_calls()

    @pytest.hookimpl(**_WRAPPER)
    def pytest_runtest_call(self, item):
        clock = time.perf_counter
        if self.source is None:
            self._start()  # the start-up: not a test's cost
        began = clock()
        self.sync()
        start = self.now()
        if MEMORY:
            self.reset(0)
            self.reset_counts(0)
        self.own_s += clock() - began
        try:
            return (yield)
        finally:
            began = clock()
            self.sync()
            end = self.now()
            peak = self.stats(0)["allocated_bytes"]["all"]["peak"] if MEMORY else 0
            self.windows.append((start, end, peak))
            self.own_s += clock() - began
            self.tests += 1

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config):
        print(f"\nFLOOR_OWN_S {self.own_s:.9f} FLOOR_TESTS {self.tests}")
        if self.source:
            self.source.stop()


def pytest_configure(config):
    config.pluginmanager.register(Floor(), "floor")
'''

FLOORS = {"floor_default": "default", "floor_lean": "lean"}
COLUMNAR = {"columnar_default": "default", "columnar_lean": "lean"}
#: the columnar floor's parts (its COLUMNAR_PARTS line)
COLUMNAR_PARTS = ("in_test", "reports", "flush", "end")
#: ours with another flush policy: a flush every 1,000 tests, or only by the policy's 10 s (and 64 MB)
OURS_VARIANTS = {
    "default_f1000": ["--gpu-util-flush=tests=1000"],
    "default_f10s": ["--gpu-util-flush=tests=1000000"],
    "lean_f1000": [*cost_model.CONFIGS["lean"], "--gpu-util-flush=tests=1000"],
}
CONFIGS = ("plain", "floor_default", "floor_lean", "columnar_default", "columnar_lean", "default", "lean", *OURS_VARIANTS)


def run_one(suite: cost_model.Suite, config: str, work: Path, timeout_s: float) -> dict[str, Any]:
    if config in OURS_VARIANTS:
        return cost_model.run_suite(suite, config, work, timeout_s, args=OURS_VARIANTS[config])
    if config not in FLOORS and config not in COLUMNAR:
        return cost_model.run_suite(suite, config, work, timeout_s)
    plugin = "floor_plugin" if config in FLOORS else "columnar_floor_plugin"
    cmd = [sys.executable, "-m", "pytest", str(suite.path), "-q", "-p", "no:cacheprovider", "-p", plugin,
           "--rootdir", str(suite.path.parent)]
    env = dict(os.environ, FLOOR_MODE=FLOORS.get(config, ""), COLUMNAR_MODE=COLUMNAR.get(config, ""),
               COLUMNAR_DIR=str(work / f"{config}_{suite.name}"),
               PYTHONPATH=os.pathsep.join(p for p in (str(work), str(HERE), str(ROOT), os.environ.get("PYTHONPATH", ""))
                                          if p))
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=max(1.0, timeout_s), env=env)
    wall = time.perf_counter() - began
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{suite.name} {config} exited {done.returncode}: {output.strip()[-1500:]}")
    got = cost_model.parse_run(output, wall)
    own = [line.split() for line in output.splitlines() if line.startswith("FLOOR_OWN_S ")]
    got["measure_s"] = float(own[-1][1]) if own else None
    got["floor_tests"] = int(own[-1][3]) if own else None
    parts = [line.split()[1:] for line in output.splitlines() if line.startswith("COLUMNAR_PARTS ")]
    for part in parts[-1] if parts else ():  # the columnar floor's own seconds by part
        name, _, seconds = part.partition("=")
        got[f"part_{name}_s"] = float(seconds)
    return got


def summary(rounds: cost_model.Rounds, suites: list[cost_model.Suite],
            configs: tuple[str, ...] = CONFIGS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for config in configs:
        if config == "plain":
            out[config] = {"run_s_per_test_us": cost_model.slope_per_round(rounds, suites, config, "run_s", minus_plain=False)}
            continue
        out[config] = {"self_per_test_us": cost_model.slope_per_round(rounds, suites, config, "measure_s", minus_plain=False),
                       "slope_per_test_us": cost_model.slope_per_round(rounds, suites, config, "run_s", minus_plain=True),
                       "gc_per_test_us": cost_model.slope_per_round(rounds, suites, config, "gc_s", minus_plain=True)}
        if config in COLUMNAR:  # its self-timed work by part
            for part in COLUMNAR_PARTS:
                out[config][f"{part}_per_test_us"] = cost_model.slope_per_round(rounds, suites, config, f"part_{part}_s",
                                                                                minus_plain=False)
        if config not in FLOORS and config not in COLUMNAR:  # ours: its self-timed work, torch's calls and the rest
            for key, figure in (("torch_calls_per_test_us", "torch_calls_s"), ("own_beyond_torch_per_test_us",
                                                                               "own_beyond_torch_s")):
                out[config][key] = cost_model.slope_per_round(rounds, suites, config, figure, minus_plain=False)
    return out


def table(doc: dict[str, Any]) -> str:
    lines = [f"floor_probe: {doc['gpu']}, torch {doc['torch']}, {doc['date']}, {doc['rounds']} rounds "
             f"({doc['stopped']}), small suites of {doc['sizes']} tests",
             "µs a test: median over rounds [range]; self-timed = the configuration's own timers, "
             "slope = session time (run_s) beyond plain"]
    for config, got in doc["summary"].items():
        for key, fitted in got.items():
            if fitted:
                lines.append(f"  {config:14} {key:28} {fitted['median']:9.1f}  [{fitted['range'][0]:.1f} .. "
                             f"{fitted['range'][1]:.1f}]  ({fitted['rounds']} rounds)")
    return "\n".join(lines)


def gpu_and_torch() -> tuple[str | None, str | None]:
    """The GPU's name and torch's version, asked of torch in a child (no run of ours reported them)."""
    asked = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__); "
                            "print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"],
                           capture_output=True, text=True, timeout=120)
    said = asked.stdout.splitlines() if asked.returncode == 0 else []
    return (said[1] or None if len(said) > 1 else None), (said[0] if said else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--deadline-s", type=float, default=480.0)
    parser.add_argument("--small", default="500,5000", help="the small suites' sizes (comma-separated)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="configurations (comma-separated; plain always)")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script without a GPU (stand-ins)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    sizes = tuple(int(n) for n in args.small.split(","))
    configs = ("plain", *(c for c in args.configs.split(",") if c and c != "plain"))
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    suites = cost_model.write_suites(work, small=sizes, launch=(), device=args.device)
    (work / "floor_plugin.py").write_text(FLOOR_PLUGIN)
    rounds = cost_model.measure(suites, configs, lambda s, c, left: run_one(s, c, work, left), args.deadline_s,
                                max_rounds=args.rounds, started=started)
    first = next((got for r in rounds.runs for c in configs for got in r.get(c, {}).values() if got.get("gpu")), {})
    gpu, torch_version = (first.get("gpu"), first.get("torch")) if first else gpu_and_torch()
    doc = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
           "torch": torch_version, "sizes": list(sizes), "rounds": len(rounds.runs), "stopped": rounds.stopped,
           "errors": rounds.errors[-3:], "configs": list(configs), "summary": summary(rounds, suites, configs),
           "runs": rounds.runs}
    (args.out / "floor_probe.json").write_text(json.dumps(doc, indent=1, default=str))
    text = table(doc)
    (args.out / "floor_probe.txt").write_text(text + "\n")
    print(text)
    return 0 if rounds.runs else 1


if __name__ == "__main__":
    sys.exit(main())
