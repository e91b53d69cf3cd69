"""GPU memory in real pytest runs on the CPU: limits, usage errors, "not checked", files, gates.

Without CUDA no memory is measured, so the runs plant the figures through the plugin's own
pytest_gpuutil_record hook (tests/helpers PLANT_CONFTEST), as tests/gates does for busy %.
"""
from __future__ import annotations

import json

import pytest

from tests.helpers import (
    PLANT_CONFTEST,
    output,
    plant,
    read_csv,
    read_json,
    records_by_test,
    requires_no_cuda,
    run,
)

pytestmark = pytest.mark.usefixtures("warm_torch")

MEMORY_COLUMNS = ["peak_alloc_mb", "peak_reserved_mb", "leaked_mb", "alloc_retries", "ooms"]


def memory(peak_mb: float, leaked_mb: float = 0.0, **more) -> dict:
    return {"peak_alloc_mb": peak_mb, "peak_reserved_mb": peak_mb * 2, "leaked_mb": leaked_mb, "alloc_retries": 0,
            "ooms": 0, **more}


def test_a_bad_size_is_a_usage_error_naming_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="""
import pytest

@pytest.mark.gpu_util(max_memory="2 parsecs")
def test_big():
    pass
""")
    result = run(pytester, "--gpu-util")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "@pytest.mark.gpu_util on test_m.py::test_big: max_memory: unknown unit in '2 parsecs'" in output(result)


@requires_no_cuda
def test_memory_limits_without_cuda_are_not_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="""
import pytest

@pytest.mark.gpu_util(max_memory="1 GiB", max_leak="0 B")
def test_big():
    pass
""")
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpu_util thresholds NOT CHECKED for 1 test (no GPU measurement):", "  test_m.py::test_big"])
    record = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))["test_m.py::test_big"]
    assert all(record[c] is None for c in MEMORY_COLUMNS) and record["memory_by_device"] == {}


def test_a_memory_limit_fails_the_test_with_the_figure_and_the_limit(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_m="""
import pytest

@pytest.mark.gpu_util(max_memory="1 GiB")
def test_big():
    pass

@pytest.mark.gpu_util(max_leak="1 MiB")
def test_leaky():
    pass

@pytest.mark.gpu_util(max_memory="1 GiB", max_leak="1 MiB")
def test_fine():
    pass
""")
    plant(pytester, test_big=memory(1536.0), test_leaky=memory(300.0, leaked_mb=256.0), test_fine=memory(512.0, 0.5))
    result = run(pytester, "--gpu-util", "--gpu-util-thresholds", "max_memory=64 GiB")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*gpu_util: peak_alloc_mb 1.5 GiB is above max_memory=1.0 GiB*"])
    result.stdout.fnmatch_lines(["*gpu_util: leaked_mb 256.0 MiB is above max_leak=1.0 MiB*"])


def test_memory_fields_are_in_the_files_and_the_summary(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_m="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    by_device = {"0": {"peak_alloc_mb": 2048.0, "peak_reserved_mb": 4096.0, "leaked_mb": 1.0, "alloc_retries": 1,
                       "ooms": 0, "allocated_end_mb": 1.0, "reserved_end_mb": 4096.0}}
    gpu = {"busy_pct": 10.0, "gpu_busy_ms": 1.0, "kernel_count": 4}  # measured on a GPU, as far as the summary knows
    plant(pytester, test_a=memory(2048.0, 1.0, alloc_retries=1, memory_by_device=by_device, **gpu),
          test_b=memory(10.0, **gpu))
    monkeypatch.setenv("COLUMNS", "100")  # every column of the memory table (80 leaves out the retries)
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=2)
    header, rows = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")
    assert header[header.index("peak_alloc_mb"):header.index("ooms") + 1] == MEMORY_COLUMNS
    row = next(r for r in rows if r["test"].endswith("test_a"))
    assert (row["peak_alloc_mb"], row["leaked_mb"], row["alloc_retries"]) == ("2048.000000", "1.000000", "1")
    record = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))["test_m.py::test_a"]
    assert record["memory_by_device"] == by_device
    result.stdout.fnmatch_lines([
        "tests in test_m.py::",  # the file the rows share, once, as the table's caption
        "top tests by peak GPU memory*peak MiB*reserved MiB*left behind MiB*retries*OOMs",
        "*",
        "test_a*2048.0*4096.0*1.0*1*0",
        "test_b*10.0*20.0*0.0*0*0",
    ])


def test_memory_gates_and_baselines(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_m="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    plant(pytester, test_a=memory(1000.0), test_b=memory(100.0, leaked_mb=0.0))
    run(pytester, "--gpu-util", "--gpu-util-save", "base").assert_outcomes(passed=2)
    saved = json.loads(next((pytester.path / ".gpu_util" / "baselines").glob("*/base.json")).read_text())
    assert {t["test"]: t["peak_alloc_mb"] for t in saved["tests"]} == {"test_m.py::test_a": 1000.0, "test_m.py::test_b": 100.0}

    plant(pytester, test_a=memory(1150.0), test_b=memory(100.0, leaked_mb=2.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare=base", "--gpu-util-fail", "peak_alloc_mb:10%",
                 "--gpu-util-fail", "leaked_mb:1")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "---- GPU regressions against baseline*",
        "tests in test_m.py::",
        "test*metric*baseline*now*change*limit",
        "*",
        "test_a*peak_alloc_mb*1000*1150*+15.0%*+10%",
        "test_b*leaked_mb*0*2*+2*MiB*+1 MiB",
    ])
    plant(pytester, test_a=memory(1050.0), test_b=memory(100.0, leaked_mb=0.5))
    result = run(pytester, "--gpu-util", "--gpu-util-compare=base", "--gpu-util-fail", "peak_alloc_mb:10%",
                 "--gpu-util-fail", "leaked_mb:1")
    assert result.ret == 0


def test_memory_off_with_memory_history_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="def test_one():\n    pass\n")
    result = run(pytester, "--gpu-util", "--gpu-util-memory=off", "--gpu-util-memory-history")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpu-util-memory-history reads the allocator's history" in output(result)
    assert "cannot go with --gpu-util-memory=off" in output(result)
    result = run(pytester, "--gpu-util", "--gpu-util-memory=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "expected on or off, got 'sometimes'" in output(result)


@requires_no_cuda
def test_memory_off_says_why_memory_limits_were_not_checked(pytester: pytest.Pytester) -> None:
    """(On a GPU, tests/capture/test_memory_gpu.py checks that no figures are read.)"""
    pytester.makepyfile(test_m="""
import pytest

@pytest.mark.gpu_util(max_memory="1 GiB")
def test_big():
    pass
""")
    result = run(pytester, "--gpu-util", "--gpu-util-memory=off")
    result.assert_outcomes(passed=1)
    said = " ".join(result.stdout.str().split())  # the summary wraps the line at the terminal's width
    assert ("gpu_util thresholds NOT CHECKED for 1 test (no GPU measurement, or only memory limits under "
            "--gpu-util-memory=off): test_m.py::test_big") in said


def test_memory_fields_take_the_largest_peaks_and_sum_the_rest_over_devices() -> None:
    """memory_fields' one pass over the devices gives what max() and sum() over them give (one device, several)."""
    from pytest_gpuutil.capture.memory import MIB, DeviceMemory
    from pytest_gpuutil.measurement.call_profile import TestMemory
    from pytest_gpuutil.session.record_builder import memory_fields, memory_note

    a = DeviceMemory("0", 3 * MIB, 8 * MIB, -MIB, 1, 0, MIB, 8 * MIB)
    b = DeviceMemory("1", 5 * MIB, 6 * MIB, 2 * MIB, 0, 1, 4 * MIB, 6 * MIB)
    c = DeviceMemory("2", 5 * MIB, 9 * MIB, 0, 2, 0, 0, 9 * MIB)
    for devices in ((a,), (b,), (a, b), (b, a, c), (c, b)):
        got = memory_fields(TestMemory(devices, None, 0.0), lambda d: f"gpu{d}")
        assert got["peak_alloc_mb"] == max(d.peak_alloc for d in devices) / MIB
        assert got["peak_reserved_mb"] == max(d.peak_reserved for d in devices) / MIB
        assert got["leaked_mb"] == sum(d.leaked for d in devices) / MIB
        assert (got["alloc_retries"], got["ooms"]) == (sum(d.alloc_retries for d in devices), sum(d.ooms for d in devices))
        assert list(got["memory_by_device"]) == [f"gpu{d.device}" for d in devices]
        assert bool(memory_note(TestMemory(devices, None, 0.0))) == any(d.ooms for d in devices)
    assert memory_fields(TestMemory((), None, 0.0), str) == {} and memory_note(None) == ""
