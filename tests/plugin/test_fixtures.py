"""The kernel_bench, gpu_trace and metric_table fixtures in real pytest runs (pytester), on the CPU."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import (
    HAS_CUDA,
    read_csv,
    read_json,
    records_by_test,
    requires_no_cuda,
    run,
)

pytestmark = pytest.mark.usefixtures("warm_torch")


NO_CUDA_TIMER_NOTE = "no CUDA device: timed with time.perf_counter on the CPU"


def test_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--fixtures")
    result.stdout.fnmatch_lines(
        [
            "gpu_trace -- *",
            "    Profile *torch.profiler*",
            "kernel_bench -- *",
            "    Time a callable with CUDA events*",
            "metric_table -- *",
            "    Named CSV tables*",
        ],
        consecutive=False,
    )


# -- kernel_bench -------------------------------------------------------------------------------
KERNEL_BENCH_TESTS = """
import torch

def add(a, b):
    return a + b

def test_bench(kernel_bench):
    a = torch.ones(256)
    first = kernel_bench(add, a, a, warmup_ms=1, rep_ms=3, bytes=3 * a.numel() * 4)
    second = kernel_bench(add, a, a, warmup_ms=1, rep_ms=3)
    assert (first.label, second.label) == ("add", "add#2")
    assert first.reps >= 1 and first.median > 0 and first.gbps > 0

def test_fwd_bwd(kernel_bench):
    x = torch.ones(64, requires_grad=True)

    def step():
        return (x * 2).sum()

    result = kernel_bench.fwd_bwd(step, lambda out: out.backward(), warmup=1, runs=4)
    assert (result.forward.reps, result.backward.reps) == (4, 4)
    assert (result.forward.label, result.backward.label) == ("step/forward", "step/backward")
"""


@requires_no_cuda
def test_kernel_bench_falls_back_to_perf_counter_and_lands_in_gpu_util_json(pytester: pytest.Pytester) -> None:
    """Works without --gpu-util; its results alone make the plugin write gpu_util.json."""
    pytester.makepyfile(test_kb=KERNEL_BENCH_TESTS)
    run(pytester).assert_outcomes(passed=2)
    tests = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    bench = tests["test_kb.py::test_bench"]["kernel_bench"]
    assert sorted(bench) == ["add", "add#2"]
    for label, timing in bench.items():
        assert timing["label"] == label
        assert (timing["timer"], timing["device"], timing["unit"]) == ("perf_counter", "cpu", "ms")
        assert timing["note"] == NO_CUDA_TIMER_NOTE
        assert timing["reps"] >= 1 and timing["min"] <= timing["median"] <= timing["max"]
    assert bench["add"]["bytes"] == 3 * 256 * 4 and bench["add"]["gbps"] > 0
    assert bench["add#2"]["gbps"] is None
    fwd_bwd = tests["test_kb.py::test_fwd_bwd"]["kernel_bench"]
    assert sorted(fwd_bwd) == ["step/backward", "step/forward"]
    assert {t["timer"] for t in fwd_bwd.values()} == {"perf_counter"}
    assert {t["reps"] for t in fwd_bwd.values()} == {4}
    # without --gpu-util: no per-test profile, no summary section
    assert tests["test_kb.py::test_bench"]["wall_ms"] is None


def test_kernel_bench_makes_the_test_profiler_step_aside_quietly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kb=KERNEL_BENCH_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu", "-W", "error::pytest_gpuutil.capture.profiler.GpuUtilWarning")
    result.assert_outcomes(passed=2)
    tests = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    for name in ("test_bench", "test_fwd_bwd"):
        record = tests[f"test_kb.py::{name}"]
        assert record["note"] == "kernel_bench times this test; the profiler stepped aside"
        assert record["gpu_busy_ms"] is None and record["kernel_bench"]


# -- gpu_trace ------------------------------------------------------------------------------------
GPU_TRACE_TESTS = """
import gzip, json, torch

def test_block(gpu_trace, tmp_path):
    with gpu_trace("matmul") as t:
        assert t.summary is None
        torch.ones(32, 32) @ torch.ones(32, 32)
    s = t.summary
    assert s is not None and s.window_us > 0
    path = t.save(str(tmp_path / "block.json.gz"))
    with gzip.open(path, "rt") as handle:
        assert json.load(handle)["traceEvents"]
    (tmp_path.parent / "saved_path.txt").write_text(path)

def test_run(gpu_trace):
    def work():
        return torch.ones(16, 16) @ torch.ones(16, 16)

    result = gpu_trace.run(work, warmup=1, runs=2)
    assert result.summary is not None
    assert result.unprofiled_ms > 0 and result.profiled_ms > 0 and result.profiler_overhead > 0

def test_run_checks_its_arguments(gpu_trace):
    import pytest

    with pytest.raises(ValueError, match="runs must be a whole number >= 1"):
        gpu_trace.run(lambda: None, runs=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        gpu_trace.run(42)
"""


def test_gpu_trace_block_and_run_on_the_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gt=GPU_TRACE_TESTS)
    run(pytester).assert_outcomes(passed=3)
    tests = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    block = tests["test_gt.py::test_block"]["gpu_trace"]["matmul"]
    ran = tests["test_gt.py::test_run"]["gpu_trace"]["work"]
    for brief in (block, ran):
        assert brief["window_us"] > 0
        if not HAS_CUDA:
            assert (brief["busy_us"], brief["busy_pct"], brief["kernel_count"]) == (0.0, 0.0, 0)
    # a test that measured nothing (and no --gpu-util) leaves no record
    assert "test_gt.py::test_run_checks_its_arguments" not in tests


def test_gpu_trace_makes_the_test_profiler_step_aside(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gt=GPU_TRACE_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-traces=all")
    result.assert_outcomes(passed=3)
    assert "GpuUtilWarning" not in result.stdout.str()
    tests = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    assert tests["test_gt.py::test_block"]["note"] == "the gpu_trace fixture profiles this test itself"
    assert tests["test_gt.py::test_block"]["gpu_trace"]["matmul"]["window_us"] > 0
    # the stepped-aside tests have no per-test trace; the test that never used gpu_trace has one
    traces = sorted(p.name for p in (pytester.path / ".gpu_util" / "traces").iterdir())
    assert traces == ["test_gt.py_test_run_checks_its_arguments.json.gz"]


# -- metric_table ---------------------------------------------------------------------------------
TABLE_TESTS = """
def test_a(metric_table):
    table = metric_table("speed", ["size", "ms", "note"])
    table.add_row({"size": 1, "ms": 1.5, "note": None})
    table.add_row(lambda: {"ms": 1 / 3, "size": 2, "note": "x"})

def test_b(metric_table):
    metric_table("speed", ["size", "ms", "note"]).add_row({"size": 3, "ms": 2.0, "note": ""})
    metric_table("other", ["v"]).add_row({"v": 7})
"""


def table_path(pytester: pytest.Pytester, name: str):
    return pytester.path / ".gpu_util" / f"metric_table_{name}.csv"


def test_metric_table_rows_header_once_six_decimals_none_empty(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mt=TABLE_TESTS)
    result = run(pytester)
    result.assert_outcomes(passed=2)
    lines = table_path(pytester, "speed").read_text().splitlines()
    assert lines == [
        "test,size,ms,note",
        "test_mt.py::test_a,1,1.500000,",
        "test_mt.py::test_a,2,0.333333,x",
        "test_mt.py::test_b,3,2.000000,",
    ]
    assert table_path(pytester, "other").read_text().splitlines() == ["test,v", "test_mt.py::test_b,7"]
    # metric tables alone write no gpu_util.csv
    assert not (pytester.path / ".gpu_util" / "gpu_util.csv").exists()


def test_metric_table_wrong_rows_fail_the_test_naming_the_columns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
import pytest

def test_missing_and_extra(metric_table):
    metric_table("speed", ["size", "ms", "note"]).add_row({"size": 1, "bogus": 2})

def test_not_a_mapping(metric_table):
    metric_table("speed", ["size", "ms", "note"]).add_row([1, 2, 3])

def test_other_columns(metric_table):
    metric_table("speed", ["size", "ms", "note"])
    metric_table("speed", ["size"])

def test_test_column_is_reserved(metric_table):
    metric_table("t2", ["test", "x"])

def test_good(metric_table):
    metric_table("speed", ["size", "ms", "note"]).add_row({"size": 1, "ms": 0.5, "note": None})
"""
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines(
        [
            "*MetricTableError: metric table 'speed': wrong row for test 'test_bad.py::test_missing_and_extra': "
            "missing column(s) 'ms', 'note'; extra column(s) 'bogus' (columns: 'size', 'ms', 'note')",
            "*MetricTableError: metric table 'speed': row is list, expected a mapping*",
            "*MetricTableError: metric table 'speed' is already registered with columns 'size', 'ms', 'note', not 'size'",
            "*MetricTableError: metric table 't2': column 'test' is added automatically*",
        ],
        consecutive=False,
    )
    # only the good row was written
    assert table_path(pytester, "speed").read_text().splitlines() == [
        "test,size,ms,note",
        "test_bad.py::test_good,1,0.500000,",
    ]


def test_old_metric_tables_are_purged_at_session_start(pytester: pytest.Pytester) -> None:
    out = pytester.path / ".gpu_util"
    out.mkdir()
    (out / "metric_table_stale.csv").write_text("test,old\nx,1\n")
    (out / "metric_table_speed.csv").write_text("test,another,header\nx,1,2\n")
    (out / "keep.txt").write_text("not a table")
    pytester.makepyfile(test_mt=TABLE_TESTS)
    run(pytester).assert_outcomes(passed=2)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "metric_table_other.csv", "metric_table_speed.csv"]
    assert table_path(pytester, "speed").read_text().splitlines()[0] == "test,size,ms,note"
    assert len(table_path(pytester, "speed").read_text().splitlines()) == 4


ENABLED_TESTS = TABLE_TESTS + """
def test_disabled_rows_are_not_computed(metric_table):
    def expensive():
        raise AssertionError("row callable of a disabled table was called")
    metric_table("other", ["v"]).add_row(expensive)
"""


@pytest.mark.parametrize("how", ["cli", "ini"])
def test_gpu_util_tables_limits_the_tables_written(pytester: pytest.Pytester, how: str) -> None:
    pytester.makepyfile(test_mt=ENABLED_TESTS)
    if how == "ini":
        pytester.makeini("[pytest]\ngpu_util_tables = speed\n")
        result = run(pytester)
    else:
        pytester.makeini("[pytest]\ngpu_util_tables = other\n")  # the command line wins
        result = run(pytester, "--gpu-util-tables", "speed")
    result.assert_outcomes(passed=3)
    assert table_path(pytester, "speed").is_file()
    assert not table_path(pytester, "other").exists()


def test_unknown_table_in_the_enabled_list_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mt=TABLE_TESTS)
    result = run(pytester, "--gpu-util-tables=speed,nope")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        ["ERROR: --gpu-util-tables: unknown metric table(s) 'nope'; registered tables: 'other', 'speed'"]
    )
    assert table_path(pytester, "speed").is_file()


def test_metric_table_and_kernel_bench_under_gpu_util_cpu(pytester: pytest.Pytester) -> None:
    """The fixtures and per-test profiling together: records, tables and the summary agree."""
    pytester.makepyfile(test_mt=TABLE_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*- GPU utilization (pytest-gpuutil) -*", "metric tables: 4 rows in *"], consecutive=False)
    _, rows = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")
    assert [r["test"] for r in rows] == ["test_mt.py::test_a", "test_mt.py::test_b"]
    assert all(float(r["wall_ms"]) > 0 for r in rows)


def test_an_undeletable_old_table_is_an_error_line_not_a_crash(pytester: pytest.Pytester) -> None:
    out = pytester.path / ".gpu_util"
    out.mkdir()
    stale = out / "metric_table_stale.csv"
    stale.write_text("test,old\n")
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(stale)], capture_output=True).returncode != 0:
        pytest.skip("needs chattr +i (root on a filesystem that supports it) to make a file undeletable")
    try:
        pytester.makepyfile(test_one="def test_one(): pass")
        result = run(pytester)
    finally:
        subprocess.run([chattr, "-i", str(stale)], check=True)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["ERROR: could not delete old metric tables in *.gpu_util: *metric_table_stale.csv*"])
