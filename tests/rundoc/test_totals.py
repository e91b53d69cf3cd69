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


def _loop_figures(records: list) -> dict:
    """The definition, a loop over the records (what record_figures and gpu_table read by columns)."""
    measured = [r for r in records if r.gpu_busy_ms is not None]
    gpu_ms = sum(r.gpu_busy_ms or 0.0 for r in measured)
    capacity_ms = sum((r.wall_ms or 0.0) * max(1, len(r.devices)) for r in measured)
    with_children = [r for r in measured if any(not p.get("parent") for p in r.processes)]
    per_gpu: dict = {}
    for record in records:
        for gpu, busy_us in record.gpu_busy_us_by_device.items():
            entry = per_gpu.setdefault(gpu, {"gpu": gpu, "busy_ms": 0.0, "tests": 0, "workers": set()})
            entry["busy_ms"] += busy_us / 1000
            entry["tests"] += 1
            entry["workers"].add(record.worker or "main")
    return {"measure_in_tests_ms": sum(r.measure_ms or 0.0 for r in records), "tests": len(records),
            "profiled": len(measured), "with_gpu_work": sum(1 for r in measured if r.kernel_count or r.gpu_busy_ms),
            "gpu_busy_ms": gpu_ms, "profiled_wall_ms": sum(r.wall_ms or 0.0 for r in measured),
            "busy_pct": 100.0 * gpu_ms / capacity_ms if capacity_ms > 0 else 0.0,
            "with_child_processes": len(with_children),
            "with_gpu_work_only_in_children": sum(
                1 for r in with_children if (r.kernel_count or r.gpu_busy_ms)
                and not any(p.get("parent") and p.get("gpu_ms") for p in r.processes)),
            "child_work_not_measured": sum(1 for r in with_children if not (r.kernel_count or r.gpu_busy_ms)),
            "gpus": {gpu: {**e, "workers": sorted(e["workers"])} for gpu, e in per_gpu.items()}}


def _random_records(seed: int, gpus: int, per_test: int) -> list:
    import random

    rng = random.Random(seed)
    values = (None, 0.0, -0.0, 0, 1e-300, 1e300, 0.1, 0.2, 0.3, 7)
    records = []
    for i in range(400):
        def pick(float_only: bool) -> object:
            if rng.random() < 0.85:
                return rng.uniform(0, 50)
            return rng.choice([v for v in values if isinstance(v, float)] if float_only else values)
        shape = seed % 3  # 0: floats throughout, 1: some None, ints and zeros, 2: some tests not measured
        busy = None if shape == 2 and i % 7 == 0 else pick(shape != 1)
        used = {str(rng.randrange(gpus)): rng.uniform(0, 9e4) for _ in range(rng.randint(0, per_test))}
        processes = ({"pid": 1, "parent": True, "gpu_ms": rng.choice((0.0, 2.0))},
                     {"pid": 2, "parent": False}) if i % 11 == 0 else ()
        records.append(TestRecord(f"t.py::x[{i}]", "passed", gpu_busy_ms=busy, wall_ms=pick(shape != 1),
                                  measure_ms=pick(shape != 1), kernel_count=rng.choice((0, 1, 5)),
                                  devices=tuple(used) or (("0",) if i % 2 else ()), worker=f"gw{i % 3}" if i % 5 else "",
                                  gpu_busy_us_by_device=used, processes=processes))
    return records


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gpus, per_test", [(1, 1), (3, 1), (4, 2)])
def test_columns_give_the_loops_figures_bit_for_bit(seed: int, gpus: int, per_test: int) -> None:
    from pytest_gpuutil.rundoc.totals import record_figures

    records = _random_records(seed, gpus, per_test)
    for part in (records, records[:1], records[:0], [r for r in records if r.gpu_busy_ms is None]):
        want = _loop_figures(part)
        got = {**record_figures(part), "gpus": {e["gpu"]: e for e in gpu_table(part)}}
        got["gpus"], want["gpus"] = sorted(got["gpus"].items()), sorted(want["gpus"].items())
        assert repr(got) == repr(want)  # repr: the same floats (a zero's sign too), ints where ints
        assert [e["gpu"] for e in gpu_table(part)] == sorted(gpu for gpu, _ in want["gpus"])  # "0".."3"
