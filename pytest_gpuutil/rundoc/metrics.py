"""The comparable metrics of a record (what ``--gpu-util-fail`` and the history name), which way is
worse, and how a record's values of one are read."""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from pytest_gpuutil.records import TestRecord


@dataclass(frozen=True)
class MetricSpec:
    """How one comparable metric is read and which way is worse."""

    name: str
    higher_is_better: bool
    unit: str  # "pts" for percentages, "ms", or "" (counts)


#: Metrics that ``--fail`` accepts, in the order they are listed in error messages.
METRICS: Mapping[str, MetricSpec] = MappingProxyType({
    spec.name: spec
    for spec in (
        MetricSpec("busy_pct", True, "pts"),
        MetricSpec("mm_conv_pct", True, "pts"),
        MetricSpec("attention_pct", True, "pts"),
        MetricSpec("gpu_busy_ms", False, "ms"),
        MetricSpec("wall_ms", False, "ms"),
        MetricSpec("kernel_count", False, ""),
        MetricSpec("peak_alloc_mb", False, "MiB"),
        MetricSpec("peak_reserved_mb", False, "MiB"),
        MetricSpec("leaked_mb", False, "MiB"),
        MetricSpec("sm_pct", True, "pts"),
        MetricSpec("tensor_pct", True, "pts"),
        MetricSpec("dram_bw_pct", True, "pts"),
        MetricSpec("occupancy_pct", True, "pts"),
        MetricSpec("energy_j", False, "J"),
        MetricSpec("kernel_bench.median", False, "ms"),
        MetricSpec("kernel_bench.mean", False, "ms"),
        MetricSpec("kernel_bench.min", False, "ms"),
        MetricSpec("kernel_bench.p20", False, "ms"),
        MetricSpec("kernel_bench.p80", False, "ms"),
        MetricSpec("findings", False, ""),
    )
})

_KERNEL_BENCH = "kernel_bench."


def finite_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def metric_values(record: TestRecord, metric: str) -> dict[str, tuple[float | None, str]]:
    """Reported metric name -> (value, unit) for one record (several for ``kernel_bench.X``)."""
    if metric.startswith(_KERNEL_BENCH):
        stat = metric[len(_KERNEL_BENCH):]
        return {
            f"kernel_bench[{label}].{stat}": (
                finite_number(stats.get(stat)),
                str(stats.get("unit", "ms")),
            )
            for label, stats in record.kernel_bench.items()
            if isinstance(stats, Mapping)
        }
    return {metric: (finite_number(getattr(record, metric)), "")}
