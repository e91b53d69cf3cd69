"""Findings with places end to end (issue 42): ``pytest --gpu-util`` with a source on the wall clock
whose host waits come from the C callback, called by the tests as the CUDA runtime calls it; the
first place reaches gpu_util.json, the terminal's worst tests and the run's summary."""
from __future__ import annotations

import json

import pytest

from pytest_gpuutil.capture import host_waits
from pytest_gpuutil.capture.places.calls import frames_module

waits = host_waits.load_module()
pytestmark = pytest.mark.skipif(waits is None or frames_module() is None or not hasattr(waits, "set_frame_reader"),
                                reason="the package was installed without its C parts, or this Python's frames are not read")

CONFTEST = '''
import time

import pytest

from pytest_gpuutil.capture import host_waits
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns

WAITS = host_waits.load_module()


class WallClockGpu:
    name = "wall-clock GPU"
    wants_places = True

    def __init__(self):
        self.events = []
        WAITS.set_clock(0)
        WAITS.take()

    def start(self): ...
    def stop(self): ...
    def now(self): return time.time_ns()
    def pending_bytes(self): return 0

    def drain(self):
        events, self.events = self.events, []
        return GpuColumns.from_events(events), 0

    def drain_syncs(self):
        types, starts, ends = host_waits.unpack(WAITS.take()[0])
        return SyncColumns(["cudaStreamSynchronize"] * len(types), starts.tolist(), (ends - starts).tolist())

    def run(self, name, dur_ns):
        self.events.append(GpuEvent(name, "kernel", "0", "7", time.time_ns(), dur_ns))


GPU = WallClockGpu()


def pytest_gpuutil_event_source(config):
    return GPU


@pytest.fixture
def gpu():
    return GPU


def spin(ns):
    end = time.time_ns() + ns
    while time.time_ns() < end:
        pass


def item():
    """What .item() does to the runtime: a copy, then a stream synchronize."""
    WAITS.call_back(41, 0); WAITS.call_back(41, 1)
    WAITS.call_back(131, 0)
    spin(15_000)
    WAITS.call_back(131, 1)
'''

TESTS = '''
from conftest import item, spin

def test_read_back_every_step(gpu):
    for _ in range(40):
        gpu.run("nvjet_sm90_tst_256x128", 20_000)
        item()  # the read-back
        spin(300_000)

def test_quiet(gpu):
    gpu.run("nvjet_sm90_tst_256x128", 200_000)
'''


def test_the_first_place_reaches_the_run_file_and_the_terminal(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_loop=TESTS)
    result = pytester.runpytest_subprocess("--gpu-util", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())
    record = next(t for t in doc["tests"] if t["test"].endswith("test_read_back_every_step"))
    sync = next(f for f in record["findings"] if f["rule"] == "host-sync")
    place = sync["places"][0]
    # the innermost frame outside the skipped folders: the conftest's item(), then the test's line
    assert (place["file"], place["function"], place["count"]) == ("conftest.py", "item", 40)
    assert place["text"] == "WAITS.call_back(131, 0)" and place["what"].startswith("40 syncs")
    top = next(t for t in doc["findings_summary"]["top"] if t["rule"] == "host-sync")
    assert top["first_place"] == f"conftest.py:{place['line']}"
    result.stdout.fnmatch_lines([f"*test_read_back_every_step*host-sync*at conftest.py:{place['line']}*"])
