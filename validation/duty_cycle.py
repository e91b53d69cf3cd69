"""Duty-cycle schedule maths for the ground-truth workloads (pure; no torch).

One period = a spin kernel of ``spin_ms`` on the GPU, a host synchronize, then a host sleep of
``sleep_ms``; the GPU is busy ``spin_ms / (spin_ms + sleep_ms)`` of the time. ``torch.cuda._sleep``
takes clock cycles, so the spin length comes from a measured cycles-per-millisecond rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

#: Duty cycles the ground-truth script measures, as fractions.
DEFAULT_DUTIES: tuple[float, ...] = (0.10, 0.25, 0.50, 0.75, 0.90)


@dataclass(frozen=True)
class DutyPlan:
    """One duty-cycle workload: ``periods`` × (spin ``spin_ms``, sync, sleep ``sleep_ms``)."""

    duty: float
    spin_ms: float
    sleep_ms: float
    periods: int
    spin_cycles: int

    @property
    def period_ms(self) -> float:
        return self.spin_ms + self.sleep_ms

    @property
    def total_ms(self) -> float:
        return self.period_ms * self.periods

    @property
    def expected_busy_pct(self) -> float:
        """Busy % if spins and sleeps were exact (host sleeps overshoot: measure the truth)."""
        return 100.0 * self.spin_ms / self.period_ms


def cycles_for_ms(ms: float, cycles_per_ms: float) -> int:
    """Clock cycles for a spin of ``ms`` milliseconds at the measured rate (at least 1)."""
    if not (math.isfinite(ms) and ms > 0):
        raise ValueError(f"spin length must be a positive number of ms, got {ms!r}")
    if not (math.isfinite(cycles_per_ms) and cycles_per_ms > 0):
        raise ValueError(f"cycles_per_ms must be positive, got {cycles_per_ms!r}")
    return max(1, round(ms * cycles_per_ms))


def sleep_ms_for_duty(duty: float, spin_ms: float) -> float:
    """Host sleep per period that makes ``spin_ms`` a ``duty`` fraction of the period."""
    if not 0.0 < duty <= 1.0:
        raise ValueError(f"duty must be in (0, 1], got {duty!r}")
    if not spin_ms > 0:
        raise ValueError(f"spin_ms must be > 0, got {spin_ms!r}")
    return spin_ms * (1.0 - duty) / duty


def plan_duty_cycle(duty: float, spin_ms: float, periods: int, cycles_per_ms: float) -> DutyPlan:
    """The schedule for one duty cycle."""
    if periods < 1:
        raise ValueError(f"periods must be >= 1, got {periods!r}")
    return DutyPlan(
        duty=duty,
        spin_ms=spin_ms,
        sleep_ms=sleep_ms_for_duty(duty, spin_ms),
        periods=periods,
        spin_cycles=cycles_for_ms(spin_ms, cycles_per_ms),
    )


def truth_busy_pct(kernel_ms: Sequence[float], window_ms: float) -> float:
    """Ground-truth busy %: summed (non-overlapping) spin-kernel times over the wall window."""
    if window_ms <= 0:
        raise ValueError(f"window must be > 0 ms, got {window_ms!r}")
    return 100.0 * sum(kernel_ms) / window_ms
