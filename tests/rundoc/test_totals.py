"""The run's totals and per-GPU table as the run document stores them."""
from __future__ import annotations

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.totals import child_totals, counter_totals, gpu_table, totals

RECORDS = [
    TestRecord(test="t.py::a", outcome="passed", gpu_busy_ms=30.0, wall_ms=60.0, kernel_count=3, devices=("0",),
               measure_ms=2.0, worker="gw1", gpu_busy_us_by_device={"1": 30_000.0}),
    TestRecord(test="t.py::b", outcome="passed", gpu_busy_ms=10.0, wall_ms=40.0, kernel_count=1, devices=("0", "1"),
               measure_ms=3.0, worker="gw0", gpu_busy_us_by_device={"10": 4_000.0, "1": 6_000.0, "cpu": 1.0}),
    TestRecord(test="t.py::c", outcome="skipped"),
]


def test_gpu_table_numbers_first_in_numeric_order_with_their_workers():
    table = gpu_table(RECORDS)
    assert [row["gpu"] for row in table] == ["1", "10", "cpu"]
    assert table[0] == {"gpu": "1", "busy_ms": 36.0, "tests": 2, "workers": ["gw0", "gw1"]}


def test_totals_add_what_measuring_cost_to_the_records_figures():
    processes = {"gw0": {"startup_s": 0.5}, "gw1": {"startup_s": 1.5}}
    found = totals(RECORDS, processes, test_s=2.0, finish_s=0.1)
    assert found["tests"] == 3 and found["profiled"] == 2
    assert found["measure_in_tests_ms"] == 5.0
    assert found["measure_ms"] == pytest.approx(105.0)  # the finish counts once tests were measured
    assert found["measure_share_pct"] == pytest.approx(5.25)
    assert found["startup_s"] == 1.5
    assert found["busy_pct"] == pytest.approx(100.0 * 40.0 / (60.0 + 2 * 40.0))
    assert "counters" not in found and found["children"]["processes"] == 0


def test_counter_and_child_totals_over_processes():
    assert counter_totals({"main": {}}) == {}
    processes = {
        "gw0": {"counters": "nvml", "counters_startup_s": 0.2,
                "counters_cost": {"thread_cpu_s": 0.5, "samples": 10, "wall_s": 10.0, "poll_cpu_s": 0.3, "energy_cpu_s": 0.15,
                                  "process_cpu_s": 0.05}},
        "gw1": {"counters_fallback": "no permission", "children": {"processes": 2, "startup_ms": [30.0, 10.0, 20.0],
                                                                    "notes": ["n"], "problem": "p"}},
    }
    assert counter_totals(processes) == {
        "counters": ["nvml"], "counters_fallback": ["no permission"], "counters_startup_s": 0.2,
        "counters_thread_cpu_s": 0.5, "counters_flush_s": 0.0, "counters_samples": 10,
        "counters_thread_wall_s": 10.0, "counters_thread_pct": 5.0,
        "counters_thread_parts_cpu_s": {"poll": 0.3, "energy": 0.15, "process": 0.05},
    }
    assert child_totals(processes)["children"] == {
        "processes": 2, "measured": 3, "startup_ms_median": 20.0, "startup_ms_max": 30.0, "notes": ["n"],
        "problems": ["p"], "injection": [],
    }
