"""A synthetic hardware-counter source: samples of real time whose values tests set, no GPU needed.

It implements the sampler's source protocol (``name``, ``period_ns``, ``fields``, ``start``,
``poll``, ``stop``), plus ``energy_mj`` and ``process_pids`` that the sampler reads when a
``pytest_gpuutil_counter_source`` hook hands it over. ``level(sm_pct=..., tensor_pct=...)`` sets
what the samples completed from now on read; ``watts`` the power its energy counter adds up.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional

import numpy as np

from pytest_gpuutil.analysis.counters import CounterSamples


class SyntheticCounters:
    name = "synthetic_counters"

    def __init__(self, period_ns: int = 1_000_000, fields: tuple[str, ...] = ("sm_pct", "tensor_pct", "dram_bw_pct"),
                 fail_after_polls: Optional[int] = None):
        self.period_ns: Optional[int] = period_ns
        self.fields = fields
        self.values = {name: 0.0 for name in fields}
        self.watts = 100.0
        self.other_pids: set[int] = set()
        self.fail_after_polls = fail_after_polls
        self.polls = 0
        self.started = self.stopped = False
        self._next = 0
        self._energy_origin = time.time_ns()
        self._lock = threading.Lock()
        self._segments: list[tuple[int, dict[str, float]]] = []  # (from ns, values)

    def level(self, **values: float) -> None:
        """From now on, samples read these values."""
        with self._lock:
            self._segments.append((time.time_ns(), {**self.values, **values}))
            self.values = {**self.values, **values}

    def _value_at(self, t: int) -> dict[str, float]:
        current = self._segments[0][1] if self._segments else self.values
        for since, values in self._segments:
            if since <= t:
                current = values
        return current

    def start(self) -> None:
        self.started = True
        self._next = time.time_ns()
        self._segments.append((self._next, dict(self.values)))

    def poll(self) -> CounterSamples:
        self.polls += 1
        if self.fail_after_polls is not None and self.polls > self.fail_after_polls:
            raise RuntimeError("synthetic failure")
        now = time.time_ns()
        period = int(self.period_ns or 1)
        count = max(0, (now - self._next) // period)
        starts = self._next + np.arange(count, dtype=np.int64) * period
        self._next += count * period
        with self._lock:
            rows = [self._value_at(int(s + period // 2)) for s in starts.tolist()]
        return CounterSamples(starts, starts + period, {f: np.asarray([r[f] for r in rows], dtype=np.float64)
                                                        for f in self.fields})

    def stop(self) -> CounterSamples:
        self.stopped = True
        return self.poll()

    def energy_mj(self) -> int:
        return int((time.time_ns() - self._energy_origin) / 1e9 * self.watts * 1000)

    def process_pids(self) -> set[int]:
        return {os.getpid(), *self.other_pids}


def synthetic_counters_conftest(period_ns: int = 1_000_000) -> str:
    """conftest text for inner runs: this module's SyntheticCounters behind the plugin's
    ``pytest_gpuutil_counter_source`` hook, and a ``counters`` fixture that sets its levels
    (self-contained, so xdist workers can load it too)."""
    from pathlib import Path

    source = Path(__file__).read_text(encoding="utf-8").split("\n\ndef synthetic_counters_conftest")[0]
    source = source.replace("from __future__ import annotations\n", "")  # may follow another conftest's text
    return source + f'''


import pytest as _pytest

COUNTERS = SyntheticCounters(period_ns={period_ns})


def pytest_gpuutil_counter_source(config):
    return COUNTERS


@_pytest.fixture
def counters():
    return COUNTERS
'''


#: SM % as a share of busy % by a test's largest category, for synthetic documents (measured on an
#: H100: a bf16 matmul keeps ~95 % of its busy time on the SMs, a 1k-element add_ loop ~0.1 %)
SM_SHARE = {"gemm": 0.95, "attention": 0.85, "conv": 0.8, "communication": 0.3, "elementwise": 0.04,
            "triton_pointwise": 0.5, "triton_reduction": 0.6, "memcpy": 0.01}
TENSOR_SHARE = {"gemm": 0.92, "attention": 0.7, "conv": 0.65, "triton_template": 0.6}


def with_counters(doc: dict, seed: int = 0, source: str = "cupti_pm_sampling", period_ms: float = 1.0) -> dict:
    """A copy of a run document whose tests carry hardware-counter fields as a run with counters
    would (deterministic: from each test's busy % and largest category); tests under two sampling
    periods get the too-short note, and the document gets its per-file and session figures."""
    import copy
    import random

    from pytest_gpuutil.analysis.counters import TOO_SHORT, summarise

    rng = random.Random(seed)
    out = copy.deepcopy(doc)
    for test in out["tests"]:
        busy, wall = test.get("busy_pct"), test.get("wall_ms")
        if busy is None or wall is None:
            continue
        categories = test.get("categories") or {}
        top = max(categories, key=lambda c: categories[c].get("time_us", 0), default="other")
        sm = busy * SM_SHARE.get(top, 0.3) * rng.uniform(0.9, 1.05)
        tensor = busy * TENSOR_SHARE.get(top, 0.0) * rng.uniform(0.9, 1.05)
        dram = min(100.0, busy * rng.uniform(0.05, 0.6))
        power = 120 + 5 * sm
        test["counters_source"] = source
        test["counter_sums"] = {"sm_pct": [wall, sm * wall], "tensor_pct": [wall, tensor * wall],
                                "dram_bw_pct": [wall, dram * wall], "energy_j": [wall, power * wall / 1000]}
        if wall < 2 * period_ms:
            test["counters_note"] = TOO_SHORT
            continue
        test.update(sm_pct=sm, tensor_pct=tensor, dram_bw_pct=dram, occupancy_pct=sm * 0.4)
        if wall >= 1000:
            test.update(energy_j=power * wall / 1000, avg_power_w=power)
    out["counters"] = summarise((t["test"], t.get("counter_sums") or {}) for t in out["tests"])
    return out
