"""The C injection library (children/inject.c), run for real against a fake libcupti.

The host is a Python process that loads the fake libcupti and calls ``InitializeInjection()``
as the CUDA driver would at ``cuInit``; the library does not care what the program is.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from pytest_gpuutil.children.spool import injection_library
from pytest_gpuutil.children.spool_format import EXITED, INJECTION

from .conftest import child_env
from .helpers import read_spool

pytestmark = pytest.mark.skipif(injection_library() is None, reason="the injection library was not built")

HOST = '''
import ctypes, os, sys, time
fake = ctypes.CDLL(os.environ["FAKE_CUPTI"], mode=ctypes.RTLD_GLOBAL)
fake.fake_work.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
inject = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
assert inject.InitializeInjection() == 1
for step in sys.argv[1:]:
    kind, name, ns, device = step.split(":")
    if kind == "sleep":
        time.sleep(int(ns) / 1e9)
    elif kind == "ready":
        print("ready", flush=True)
    else:
        fake.fake_work(int(kind), name.encode(), int(ns), int(device), 7)
'''


def host(env: dict, *steps: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HOST, *steps], env=env, capture_output=True, text=True, timeout=60,
                          check=True, **kwargs)


def test_kernels_memcpy_and_memset_reach_the_spool_with_an_end(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library(), RANK="3", LOCAL_RANK="1", CUDA_VISIBLE_DEVICES="2,3")
    before = time.time_ns()
    host(env, "0:_Z6matmulv:2000000:0", "0:_Z6matmulv:1000000:1", "1::500000:0", "2::100000:1")
    (child,) = read_spool(str(spool.directory))
    h = child.header
    assert h.capture == INJECTION and h.rank == "3" and h.local_rank == "1" and h.visible_devices == "2,3"
    assert h.library == fake_cupti and h.startup_ns > 0 and before <= h.created_ns <= time.time_ns()
    assert child.names() == ["_Z6matmulv", "_Z6matmulv", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"]
    assert child.durations() == [2_000_000, 1_000_000, 500_000, 100_000]
    kinds = [e.kinds[c] for e in child.events for c in e.codes.tolist()]
    assert kinds == ["kernel", "kernel", "gpu_memcpy", "gpu_memset"]
    assert [d for e in child.events for d in e.devices.tolist()] == [0, 1, 0, 1]
    starts = [s for e in child.events for s in e.starts.tolist()]
    assert starts == sorted(starts) and before < starts[0] < time.time_ns()  # CUPTI's clock: wall-clock ns
    assert [e.reason for e in child.end] == [EXITED]


def test_a_process_that_measures_itself_from_python_is_left_alone(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library())
    code = "import os; os.environ['PYTEST_GPUUTIL_SELF'] = str(os.getpid())\n" + HOST
    subprocess.run([sys.executable, "-c", code, "0:k:1000:0"], env=env, check=True, timeout=60)
    assert read_spool(str(spool.directory)) == []


def test_without_a_spool_nothing_happens(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library())
    del env["PYTEST_GPUUTIL_SPOOL"]
    host(env, "0:k:1000:0")
    assert read_spool(str(spool.directory)) == []


def test_a_libcupti_that_cannot_be_loaded_is_said_not_silenced(spool, fake_cupti, tmp_path) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library())
    env["PYTEST_GPUUTIL_CUPTI"] = str(tmp_path / "missing" / "libcupti.so.13")
    host(env, "0:k:1000:0")
    (child,) = read_spool(str(spool.directory))
    assert len(child.notes) == 1 and child.notes[0].text.startswith("not measured: cannot load")
    assert "missing/libcupti.so.13" in child.notes[0].text and child.events == []


def test_periodic_hand_over_survives_sigkill(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library(), period=0.1)
    proc = subprocess.Popen([sys.executable, "-c", HOST, "0:k1:1000000:0", "ready::0:0", "sleep::30000000000:0"],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # (a bound for a broken child, not a window the test needs)
        while time.monotonic() < deadline:
            files = read_spool(str(spool.directory))
            if files and files[0].events:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["k1"] and child.end == []  # handed over before the kill, no END after it


def test_a_poke_gets_a_hand_over_at_once(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, inject=injection_library(), period=3600)
    proc = subprocess.Popen([sys.executable, "-c", HOST, "0:k1:1000000:0", "ready::0:0", "sleep::30000000000:0"],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.15)
        assert read_spool(str(spool.directory))[0].events == []  # an hour's period: nothing yet
        poked = time.time_ns()
        spool.poke()
        deadline = time.monotonic() + 120
        child = None
        while time.monotonic() < deadline:
            child = read_spool(str(spool.directory))[0]
            if child.events:
                break
            time.sleep(0.01)
        assert child is not None and child.names() == ["k1"] and child.events[-1].covered_ns >= poked
    finally:
        proc.kill()
        proc.wait()
