"""Helpers shared by the test modules: data paths, pytester runs, reading the plugin's files.

Beside this: ``reference.py`` (an independent busy-time reference), ``headless_chromium.py`` (the
headless-browser harness), ``synthetic_run.py`` (synthetic run documents and baselines for the HTML
report) and ``memory_workloads.py`` (tests with known GPU memory behaviour). The benchmark and
validation scripts import these too; nothing here imports from benchmarks/, validation/ or scripts/.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"

try:
    import torch

    HAS_CUDA = bool(torch.cuda.is_available())
except ImportError:  # pragma: no cover - torch is a dependency
    HAS_CUDA = False

requires_no_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA path")

#: conftest for inner runs: replaces each named test's record fields by those in planted.json
PLANT_CONFTEST = '''
import dataclasses
import json
from pathlib import Path


def pytest_gpuutil_record(item, record, when):
    path = Path(__file__).parent / "planted.json"
    planted = json.loads(path.read_text()) if path.exists() else {}
    fields = planted.get(item.name)
    if fields is None:
        return None
    return dataclasses.replace(record, **{"note": "", **fields})
'''

TWO_TESTS = """
def test_fast():
    pass

def test_slow():
    pass
"""

REGRESSION_HEADER = "test*metric*baseline*now*change*limit"


#: conftest addition: which records each test's end made ready, in order (batches.jsonl: one
#: ``[test, [tests whose records the run took then]]`` per test that made some ready). It reads the
#: run's receiver, where a plain run's records go straight from the teardown (an xdist worker's
#: travel on the teardown report instead).
LOG_BATCHES = """

import json as _json, pathlib as _pathlib
import pytest as _pytest

_TAKEN = [0]


@_pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield
    from pytest_gpuutil.plugin import STATE_KEY

    records = item.config.stash[STATE_KEY].receiver.records
    new, _TAKEN[0] = records[_TAKEN[0]:], len(records)
    if new:
        with open(_pathlib.Path(__file__).parent / "batches.jsonl", "a") as handle:
            handle.write(_json.dumps([item.name, [r.test.split("::")[-1] for r in new]]) + "\\n")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An in-process pytest run without the cache plugin (nothing written outside the sandbox)."""
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def output(result: pytest.RunResult) -> str:
    return result.stdout.str() + "\n" + result.stderr.str()


def plant(pytester: pytest.Pytester, **tests: dict[str, Any]) -> None:
    """Record fields the PLANT_CONFTEST plants, per test function name."""
    (pytester.path / "planted.json").write_text(json.dumps(tests))


def busy(value: float, **more: Any) -> dict[str, Any]:
    """A planted record at ``value`` % busy: 10 ms of GPU work in a window that agrees with it (on a GPU host the
    real window is a fraction of a ms, and a busy-% change on it is under the gates' 1 ms noise floor)."""
    wall = {"wall_ms": 10.0 * 100.0 / value} if value > 0 else {}
    return {"busy_pct": value, "gpu_busy_ms": 10.0, "kernel_count": 4, **wall, **more}


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of a CSV file the plugin wrote."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or ()), list(reader)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def records_by_test(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["test"]: t for t in doc["tests"]}


#: conftest for inner runs: a synthetic GPU (no CUDA needed) that --gpu-util's continuous capture
#: reads through the plugin's pytest_gpuutil_event_source hook. Tests "launch" work with the
#: ``gpu`` fixture: ``gpu.run("name", 300_000)`` occupies the fake GPU for 300 µs (the clock is
#: real time, so windows and events are real), ``gpu.run(..., stream=8)`` on another stream.
#: ``gpu.replay(events, waits)`` lays out events ``(name, kind, offset ns, dur ns)`` and host waits
#: ``(name, offset ns, dur ns)`` from now and returns once they are over (for patterns such as a
#: launch-bound loop, which a spinning Python loop cannot draw exactly); ``drain_syncs()`` hands the
#: waits to the capture, as CUPTI's synchronization records.
SYNTHETIC_CONFTEST = '''
import time

import pytest

from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns


class SyntheticGpu:
    name = "synthetic"

    def __init__(self):
        self.collecting = False
        self.events = []
        self.waits = []
        self.starts = 0
        self.drains = 0

    # the event-source protocol
    def start(self):
        self.collecting = True
        self.starts += 1

    def stop(self):
        self.collecting = False

    def now(self):
        return time.perf_counter_ns()

    def pending_bytes(self):
        return 200 * len(self.events)

    def drain(self):
        self.drains += 1
        events, self.events = self.events, []
        return GpuColumns.from_events(events), 0

    def drain_syncs(self):
        waits, self.waits = self.waits, []
        return SyncColumns(*map(list, zip(*waits))) if waits else SyncColumns()

    # what tests call
    def run(self, name, dur_ns, kind="kernel", stream=7, device=0):
        start = self.now()
        while self.now() < start + dur_ns:
            pass
        if self.collecting:
            self.events.append(GpuEvent(name, kind, device, stream, start, dur_ns))

    def replay(self, events, waits=()):
        base = self.now()
        end = base
        for name, kind, offset, dur in events:
            if self.collecting:
                self.events.append(GpuEvent(name, kind, 0, 7, base + offset, dur))
            end = max(end, base + offset + dur)
        for name, offset, dur in waits:
            if self.collecting:
                self.waits.append((name, base + offset, dur))
            end = max(end, base + offset + dur)
        while self.now() < end:
            pass


GPU = SyntheticGpu()


def pytest_gpuutil_event_source(config):
    return GPU


@pytest.fixture
def gpu():
    return GPU
'''

#: the synthetic GPU on a clock of its own that moves only as it is read (1 µs a reading) and as its work
#: runs: a busy machine's pauses between readings add no idle time to a test (appended to SYNTHETIC_CONFTEST)
VIRTUAL_CLOCK = '''

class VirtualClockGpu(SyntheticGpu):
    def __init__(self):
        super().__init__()
        self.clock = time.perf_counter_ns()

    def now(self):
        self.clock += 1_000
        return self.clock


GPU = VirtualClockGpu()
'''


#: a test file's fixture ``cpu_work``: a function that "takes" S seconds on ``time.perf_counter``, the clock
#: kernel_bench times with on the CPU, moved by the work alone (a busy machine makes it no slower; patched
#: for the test only)
CPU_WORK_FIXTURE = '''
import sys
import time as _time

import pytest as _pytest


@_pytest.fixture
def cpu_work(monkeypatch):
    now = [_time.perf_counter()]

    def perf_counter():
        now[0] += 1e-9
        return now[0]

    def work(seconds):
        now[0] += seconds
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            _time.sleep(seconds)  # kernel_bench times with CUDA events there: the GPU's clock must move too

    monkeypatch.setattr(_time, "perf_counter", perf_counter)
    return work
'''
