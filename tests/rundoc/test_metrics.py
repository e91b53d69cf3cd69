"""Metric access on a record and numbers as messages and tables show them."""
from __future__ import annotations

import math

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import METRICS, finite_number, metric_values
from pytest_gpuutil.rundoc.number_format import compact_number, format_value


def test_directions():
    higher = {m for m, spec in METRICS.items() if spec.higher_is_better}
    assert higher == {"busy_pct", "mm_conv_pct", "attention_pct", "sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct"}
    assert not METRICS["energy_j"].higher_is_better
    assert not METRICS["gpu_busy_ms"].higher_is_better
    assert not METRICS["kernel_bench.p80"].higher_is_better


@pytest.mark.parametrize(("value", "number"), [(3, 3.0), (2.5, 2.5), (True, None), (math.nan, None), (math.inf, None),
                                               ("1", None), (None, None)])
def test_finite_number(value, number):
    assert finite_number(value) == number


def test_metric_values_one_field_or_one_per_kernel_bench_label():
    record = TestRecord(test="t.py::test_a", outcome="passed", busy_pct=80.0, gpu_busy_ms=None,
                        kernel_bench={"mm": {"median": 1.5, "unit": "us"}, "add": {"median": math.nan}, "bad": 3})
    assert metric_values(record, "busy_pct") == {"busy_pct": (80.0, "")}
    assert metric_values(record, "gpu_busy_ms") == {"gpu_busy_ms": (None, "")}
    assert metric_values(record, "kernel_bench.median") == {
        "kernel_bench[mm].median": (1.5, "us"),
        "kernel_bench[add].median": (None, "ms"),
    }


@pytest.mark.parametrize(
    ("value", "shown", "compact"),
    [
        (5.0, "5", "5"),
        (7, "7", "7"),
        (250.0, "250", "250"),
        (123.456, "123.5", "123.456"),
        (12.3, "12.30", "12.3"),
        (12.3456, "12.35", "12.346"),
        (-3.5, "-3.50", "-3.5"),
        (0.125, "0.125", "0.125"),
        (0.012345, "0.0123", "0.012"),
        (1e16, "10000000000000000.0", "10000000000000000"),
    ],
)
def test_format_value_and_compact_number(value: float, shown: str, compact: str):
    assert format_value(value) == shown
    assert compact_number(value) == compact
