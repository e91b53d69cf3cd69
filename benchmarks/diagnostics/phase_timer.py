"""A pytest plugin that stamps the session's phases (``-p phase_timer``, this folder on PYTHONPATH).

At the end it prints one line, ``PHASES {...}``: seconds from pytest_sessionstart to the loop's
start, the first test's set-up (after the plugins' own preparations), the last test's teardown,
the loop's end, and the start and end of the session-finish and terminal-summary hooks (every
plugin's implementation inside them); and ``GC {...}``: the garbage collections between the first
set-up and the last teardown, by generation, with their seconds (a full collection walks every
object torch made: tens of milliseconds). session_phases.py reads both.
"""
from __future__ import annotations

import gc
import json
import time

import pytest

_T: dict[str, float] = {}
#: per generation: [collections, seconds] while tests run
_GC: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
_GC_STARTED: list[float] = []


def _gc_callback(phase: str, info: dict) -> None:
    if "first_setup" not in _T or "loop_end" in _T:
        return
    if phase == "start":
        _GC_STARTED[:] = [time.perf_counter()]
    elif _GC_STARTED:
        counted = _GC[info["generation"]]
        counted[0] += 1
        counted[1] += time.perf_counter() - _GC_STARTED[0]


gc.callbacks.append(_gc_callback)


def _mark(key: str) -> None:
    _T[key] = time.perf_counter()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _mark("start")


def _around(begin: str, end: str):
    """A hookwrapper that stamps ``begin`` before every plugin's implementation and ``end`` after."""
    @pytest.hookimpl(hookwrapper=True)
    def wrapper():
        _mark(begin)
        yield
        _mark(end)
    return wrapper


pytest_runtestloop = _around("loop_begin", "loop_end")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if "first_setup" not in _T:
        _mark("first_setup")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _mark("last_teardown")


pytest_sessionfinish = _around("finish_begin", "finish_end")
pytest_terminal_summary = _around("summary_begin", "summary_end")


def pytest_unconfigure(config):
    start = _T.get("start")
    if start is not None:
        print("PHASES " + json.dumps({k: round(v - start, 4) for k, v in _T.items()}))
        print("GC " + json.dumps({f"gen{g}": {"n": int(n), "s": round(t, 4)} for g, (n, t) in _GC.items()}))
