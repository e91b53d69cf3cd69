"""The stack sampler's samples land where the time goes, not where the GIL is handed over (issue 42).

On an H100 the planted "slow host helper" (5 ms of pure Python between two matmuls) was sampled
only at the matmul's line: the sampler needs the GIL to read the frames; a thread running pure
Python hands it over only when Python forces it (after 5 ms by default), a torch op releases it at
once, and a sampler that slept a fixed 5 ms woke in step with a 5 ms loop, just before each op. Here
``time.sleep(0)`` stands for the op (it releases the GIL too)."""
from __future__ import annotations

import sys
import time

import pytest

from pytest_gpuutil.analysis.places import sampled_places
from pytest_gpuutil.capture.places.sampler import SAMPLING_SWITCH_INTERVAL_S, StackSampler

HELPER_LINE = 23  # the helper's loop, below


def slow_helper(seconds: float) -> float:
    end, total = time.perf_counter() + seconds, 0.0
    while time.perf_counter() < end: total += sum(i * 0.5 for i in range(200))  # noqa: E701 - one line, one place
    return total


def test_the_helper_s_line_is_sampled_though_the_gil_is_handed_over_only_at_the_op_between() -> None:
    sampler = StackSampler(time.time_ns, lambda path: path == __file__)
    before = sys.getswitchinterval()
    sampler.begin()
    try:
        assert sys.getswitchinterval() == pytest.approx(SAMPLING_SWITCH_INTERVAL_S)
        for _ in range(60):
            time.sleep(0)  # the op: releases the GIL, as torch's ops do
            slow_helper(0.005)
    finally:
        sampler.end()
    samples = sampler.take()
    sampler.close()
    assert sys.getswitchinterval() == pytest.approx(before)  # the test's interval is back after the call
    lines = {place.line: place for place in sampled_places(samples)}
    # with a fixed 5 ms period and Python's 5 ms switch interval every sample was at the op's line
    assert HELPER_LINE in lines, [(p.line, p.what) for p in lines.values()]
    # a generator expression's frame and its function's, on one line, are one place (the function's
    # name where both were sampled)
    assert len([p for p in lines.values() if p.line == HELPER_LINE]) == 1


def test_a_switch_interval_the_test_set_itself_is_left_alone() -> None:
    sampler = StackSampler(time.time_ns, lambda path: path == __file__)
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.0001)
        sampler.begin()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
        sampler.end()
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sampler.close()
        sys.setswitchinterval(before)
