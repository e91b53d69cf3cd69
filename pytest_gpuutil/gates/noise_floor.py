"""No gate on noise: a change the same code shows between runs is not a regression.

A short test's percentages swing between identical runs: 1.4 ms of GPU work in a 2-3 ms window
reads 57 % busy in one run and 45 % in the next (the window grew by 0.6 ms of host time, the GPU
work did not change). So a window-share gate (``busy_pct``, ``mm_conv_pct``, ``attention_pct``:
points of the test's window) flags a test only when the milliseconds behind the points changed by
at least the floor: the share's own ms (``pct x wall``: GPU time, matmul time) or the rest of the
window's (idle time, other work). A gate on milliseconds (``gpu_busy_ms``, ``wall_ms``) flags only a
change of at least the floor in ms. The floor is ``FLOOR_MS`` (1 ms, as the findings' floor).
Records without ``wall_ms`` (planted or old ones) are gated without the floor. Other metrics
(kernel_bench timings, memory, counters, findings) have their own statistics and are not floored;
``--gpu-util-compare history`` adds each metric's noise over the test's last runs on top.
"""
from __future__ import annotations

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import finite_number

#: the smallest change in ms (GPU, idle or category time) a percentage or ms gate acts on
FLOOR_MS = 1.0

#: window shares in points of the call's wall time (across the devices the test used)
_WINDOW_SHARES = ("busy_pct", "mm_conv_pct", "attention_pct")
_MS_METRICS = ("gpu_busy_ms", "wall_ms")


def _window_ms(record: TestRecord) -> float | None:
    wall = finite_number(record.wall_ms)
    return None if wall is None else wall * max(1, len(record.devices))


def ms_behind(metric: str, old: TestRecord, new: TestRecord) -> float | None:
    """How many ms of work or idle time the change of ``metric`` stands for (None: not floored)."""
    if metric in _MS_METRICS:
        before, after = finite_number(getattr(old, metric)), finite_number(getattr(new, metric))
        return None if before is None or after is None else abs(after - before)
    if metric not in _WINDOW_SHARES:
        return None
    before_pct, after_pct = finite_number(getattr(old, metric)), finite_number(getattr(new, metric))
    before_w, after_w = _window_ms(old), _window_ms(new)
    if None in (before_pct, after_pct, before_w, after_w):
        return None
    part_before, part_after = before_pct / 100.0 * before_w, after_pct / 100.0 * after_w  # type: ignore[operator]
    rest_before, rest_after = before_w - part_before, after_w - part_after  # type: ignore[operator]
    return max(abs(part_after - part_before), abs(rest_after - rest_before))


def below_floor(metric: str, old: TestRecord, new: TestRecord, floor_ms: float = FLOOR_MS) -> bool:
    """True when the change of ``metric`` stands for less than ``floor_ms`` of GPU or idle time."""
    behind = ms_behind(metric, old, new)
    return behind is not None and behind < floor_ms
