"""The plugin end to end with pytester: options and ini keys, files, summary, traces, no-CUDA path.

The inner runs profile for real: on a machine without CUDA, ``--gpu-util-cpu`` makes the plugin
run torch.profiler with CPU activity, so the profiling path, the nested-profiler guard and the
trace export are exercised (GPU fields stay empty). Tests whose expectations hold only without
CUDA say so with ``requires_no_cuda``.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from typing import Any

import pytest

from pytest_gpuutil.plugin import STATE_KEY
from tests.helpers import (
    HAS_CUDA,
    output,
    read_csv,
    read_json,
    records_by_test,
    requires_no_cuda,
    run,
)

pytestmark = pytest.mark.usefixtures("warm_torch")


OUTCOMES_FILE = """
import pytest

def test_passes():
    assert sum(range(10)) == 45

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_errors(broken):
    pass

@pytest.mark.xfail(reason="known")
def test_xfails():
    assert 0
"""

EXPECTED_OUTCOMES = {
    "test_outcomes.py::test_passes": "passed",
    "test_outcomes.py::test_fails": "failed",
    "test_outcomes.py::test_skipped": "skipped",
    "test_outcomes.py::test_errors": "error",
    "test_outcomes.py::test_xfails": "xfailed",
}

CSV_REQUIRED = ("test", "outcome", "wall_ms", "gpu_busy_ms", "busy_pct", "mm_conv_pct", "kernel_count", "top_kernel")
GPU_FIELDS = ("gpu_busy_ms", "busy_pct", "mm_conv_pct", "kernel_count", "top_kernel")


# -- --help and torch ----------------------------------------------------------------------------
HELP_CODE = """
import sys, pytest
code = pytest.main(["--help", "-p", "no:cacheprovider"])
print("EXIT", int(code), "TORCH", "torch" in sys.modules)
"""


def test_help_lists_the_options_and_ini_keys_without_importing_torch(pytester: pytest.Pytester) -> None:
    result = pytester.run(sys.executable, "-c", HELP_CODE)
    result.stdout.fnmatch_lines(
        [
            "GPU utilization (pytest-gpuutil):",
            "  --gpu-util *profile each test*",
            "  --gpu-util-cpu *",
            "  --gpu-util-top=N *0 = all*",
            "  --gpu-util-dir=DIR *",
            "  --gpu-util-traces=MODE*",
            "  --gpu-util-tables=A,B*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "  gpu_util (bool):*",
            "  gpu_util_cpu (bool):*",
            "  gpu_util_top (string):*",
            "  gpu_util_dir (string):*",
            "  gpu_util_traces (string):*",
            "  gpu_util_tables (string):*",
            "  gpu_util_kernel_rules (linelist):*",
        ],
    )
    result.stdout.fnmatch_lines(["EXIT 0 TORCH False"])


TORCH_PROBE_CONFTEST = """
import pathlib, sys

def pytest_unconfigure(config):
    pathlib.Path(__file__).with_name("torch_status.txt").write_text(str("torch" in sys.modules))
"""

TORCH_PROBE_TESTS = """
def test_plain():
    assert True

def test_with_a_table(metric_table):
    metric_table("probe", ["x"]).add_row({"x": 1})
"""


@pytest.mark.parametrize(("args", "imported"), [((), "False"), (("--gpu-util",), "True")])
def test_torch_is_imported_only_with_gpu_util(pytester: pytest.Pytester, args: tuple[str, ...], imported: str) -> None:
    """Without --gpu-util (even using metric_table) torch stays out; with it the same probe sees torch."""
    pytester.makeconftest(TORCH_PROBE_CONFTEST)
    pytester.makepyfile(test_probe=TORCH_PROBE_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=2)
    assert (pytester.path / "torch_status.txt").read_text() == imported


# -- options, ini keys, precedence --------------------------------------------------------------
def settings(pytester: pytest.Pytester, *args: str) -> Any:
    return pytester.parseconfigure(*args).stash[STATE_KEY].settings


def test_defaults(pytester: pytest.Pytester) -> None:
    s = settings(pytester)
    assert (s.enabled, s.cpu_activity, s.top, s.output_dir, s.traces, s.tables) == (
        False, False, 10, ".gpu_util", "none", None
    )


def test_every_option_is_read_from_the_command_line(pytester: pytest.Pytester) -> None:
    s = settings(
        pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-top", "0", "--gpu-util-dir", "out",
        "--gpu-util-traces=failed", "--gpu-util-tables", "a,b",
    )
    assert (s.enabled, s.cpu_activity, s.top, s.output_dir, s.traces, s.tables) == (
        True, True, 0, "out", "failed", ("a", "b")
    )


def test_every_option_is_read_from_its_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpu_util = true
        gpu_util_cpu = true
        gpu_util_top = 0
        gpu_util_dir = from_ini
        gpu_util_traces = all
        gpu_util_tables = a, b
        """
    )
    s = settings(pytester)
    assert (s.enabled, s.cpu_activity, s.top, s.output_dir, s.traces, s.tables) == (
        True, True, 0, "from_ini", "all", ("a", "b")
    )


def test_pyproject_toml_ini_keys(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        gpu_util_top = "3"
        gpu_util_traces = "failed"
        """
    )
    s = settings(pytester)
    assert (s.top, s.traces) == (3, "failed")


def test_command_line_beats_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpu_util_top = 3
        gpu_util_dir = from_ini
        gpu_util_traces = all
        gpu_util_tables = x
        """
    )
    s = settings(pytester, "--gpu-util-top=0", "--gpu-util-dir=from_cli", "--gpu-util-traces=none",
                 "--gpu-util-tables=y")
    assert (s.top, s.output_dir, s.traces, s.tables) == (0, "from_cli", "none", ("y",))


def test_gpu_util_ini_key_enables_the_plugin_and_cli_dir_beats_ini_dir(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpu_util = true
        gpu_util_dir = from_ini
        """
    )
    pytester.makepyfile(test_one="def test_one(): pass")
    run(pytester).assert_outcomes(passed=1)
    assert (pytester.path / "from_ini" / "gpu_util.csv").is_file()
    run(pytester, "--gpu-util-dir", "from_cli").assert_outcomes(passed=1)
    assert (pytester.path / "from_cli" / "gpu_util.csv").is_file()
    assert not (pytester.path / ".gpu_util" / "gpu_util.csv").exists()


def test_absolute_gpu_util_dir(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = tmp_path_factory.mktemp("abs") / "results"
    pytester.makepyfile(test_one="def test_one(): pass")
    run(pytester, "--gpu-util", f"--gpu-util-dir={target}").assert_outcomes(passed=1)
    assert (target / "gpu_util.json").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu-util-top", "-1"), "*argument --gpu-util-top: expected a whole number >= 0, got -1*"),
        (("--gpu-util-top=ten",), "*argument --gpu-util-top: expected a whole number >= 0, got 'ten'*"),
        (("--gpu-util-traces=sometimes",), "*argument --gpu-util-traces: expected one of none, failed, all*"),
        (("--gpu-util-tables=a/b",), "*argument --gpu-util-tables: invalid table name(s) 'a/b'*"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_option(
    pytester: pytest.Pytester, args: tuple[str, ...], message: str
) -> None:
    pytester.makepyfile(test_one="def test_one(): pass")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        ("gpu_util_top = lots", "ERROR: ini key gpu_util_top (option --gpu-util-top): expected a whole number >= 0*"),
        ("gpu_util_traces = sometimes", "ERROR: ini key gpu_util_traces (option --gpu-util-traces): expected one of*"),
        ("gpu_util_kernel_rules =\n    no equals sign here", "ERROR: gpu_util_kernel_rules: line 1 *expected CATEGORY=REGEX*"),
        ("gpu_util_kernel_rules =\n    gemm=([", "ERROR: gpu_util_kernel_rules: line 1*"),
    ],
)
def test_bad_ini_values_are_usage_errors_naming_the_key(pytester: pytest.Pytester, ini: str, message: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_one="def test_one(): pass")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_kernel_rules_ini_come_before_the_built_in_rules(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpu_util_kernel_rules =
            # my fused kernels
            fused_gemm_epilogue=my_fused_.*
            attention=^sm90_xmma_gemm
        """
    )
    config = pytester.parseconfigure()
    classifier = config.stash[STATE_KEY].classifier
    assert classifier.classify("my_fused_kernel_7") == "fused_gemm_epilogue"
    assert classifier.classify("sm90_xmma_gemm_f16f16_f32") == "attention"  # built-in says gemm
    assert config.stash[STATE_KEY].settings.kernel_rules  # read from the ini file


# -- files and summary --------------------------------------------------------------------------
def test_csv_has_one_row_per_test_with_its_outcome(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_FILE)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu")
    result.assert_outcomes(passed=1, failed=1, skipped=1, errors=1, xfailed=1)
    header, rows = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")
    assert [c for c in header if c in CSV_REQUIRED] == list(CSV_REQUIRED)
    assert {r["test"]: r["outcome"] for r in rows} == EXPECTED_OUTCOMES
    assert len(rows) == len(EXPECTED_OUTCOMES)
    by_test = {r["test"]: r for r in rows}
    # the call phase ran (and was profiled) for these; not for the skipped one or the setup error
    for name in ("test_passes", "test_fails", "test_xfails"):
        assert float(by_test[f"test_outcomes.py::{name}"]["wall_ms"]) >= 0
    assert by_test["test_outcomes.py::test_skipped"]["wall_ms"] == ""
    assert by_test["test_outcomes.py::test_errors"]["wall_ms"] == ""


@requires_no_cuda
def test_no_cuda_path_writes_files_with_empty_gpu_fields_and_one_summary_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_FILE)
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=1, failed=1, skipped=1, errors=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*- GPU utilization (pytest-gpuutil) -*",
            "no CUDA device found: GPU fields are empty in the files (5 tests ran, 1 skipped)",
            "wrote .gpu_util/gpu_util.csv, .gpu_util/gpu_util.json",
        ]
    )
    assert result.stdout.str().count("no CUDA device found") == 1
    assert "session GPU busy" not in result.stdout.str()
    _, rows = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")
    assert len(rows) == 5
    for row in rows:
        assert all(row[f] == "" for f in GPU_FIELDS), row
        assert row["wall_ms"] == ""  # without --gpu-util-cpu nothing is profiled on a CPU-only machine
    doc = read_json(pytester.path / ".gpu_util" / "gpu_util.json")
    assert {t["note"] for t in doc["tests"]} == {"no CUDA device"}


def test_paths_outside_the_working_directory_are_printed_absolute(pytester: pytest.Pytester,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    outside = tmp_path_factory.mktemp("gu_s")
    result = run(pytester, "--gpu-util", f"--gpu-util-dir={outside}", "--gpu-util-save", "main",
                 f"--gpu-util-html={outside / 'page.html'}")
    assert result.ret == 0, output(result)
    wrote = " ".join(line for line in result.stdout.lines if line.startswith(("wrote ", "  ")))
    for path in (outside / "gpu_util.csv", outside / "page.html", next(outside.glob("baselines/*/main.json"))):
        assert str(path) in wrote, output(result)
    assert "../" not in result.stdout.str()
    inside = run(pytester, "--gpu-util", "--gpu-util-dir=sub/out", "--gpu-util-html")
    inside.stdout.fnmatch_lines(["wrote sub/out/gpu_util.csv, sub/out/gpu_util.json, sub/out/report.html"])


@requires_no_cuda
def test_gpu_util_cpu_profiles_on_the_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one(): assert sum(range(1000))")
    run(pytester, "--gpu-util", "--gpu-util-cpu").assert_outcomes(passed=1)
    (row,) = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")[1]
    assert float(row["wall_ms"]) > 0
    assert all(row[f] == "" for f in GPU_FIELDS)


def test_gpu_util_json_has_machine_info_and_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_outcomes=OUTCOMES_FILE)
    run(pytester, "--gpu-util", "--gpu-util-cpu").assert_outcomes(passed=1, failed=1, skipped=1, errors=1, xfailed=1)
    doc = read_json(pytester.path / ".gpu_util" / "gpu_util.json")
    info = doc["machine_info"]
    for key in ("gpu_model", "gpu_count", "driver", "cuda", "torch", "host", "git_commit"):
        assert key in info, key
    assert info["torch"] and info["host"]
    assert isinstance(info["gpu_count"], int)
    if not HAS_CUDA:
        assert (info["gpu_model"], info["gpu_count"], info["cuda_available"]) == (None, 0, False)
    tests = records_by_test(doc)
    assert {k: v["outcome"] for k, v in tests.items()} == EXPECTED_OUTCOMES
    assert [t["test"] for t in doc["tests"]] == sorted(EXPECTED_OUTCOMES)
    assert doc["totals"]["tests"] == 5


def test_no_summary_and_no_files_without_gpu_util(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one(): pass")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "GPU utilization" not in result.stdout.str()
    assert not (pytester.path / ".gpu_util").exists()


# -- traces ---------------------------------------------------------------------------------------
TRACE_TESTS = """
def test_work():
    assert sum(i * i for i in range(1000)) > 0

def test_broken():
    assert False
"""


def trace_files(pytester: pytest.Pytester) -> list[str]:
    folder = pytester.path / ".gpu_util" / "traces"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_traces_all_writes_a_gzip_chrome_trace_per_test_that_analyze_reads(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tr=TRACE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-traces=all").assert_outcomes(passed=1, failed=1)
    assert trace_files(pytester) == ["test_tr.py_test_broken.json.gz", "test_tr.py_test_work.json.gz"]
    path = pytester.path / ".gpu_util" / "traces" / "test_tr.py_test_work.json.gz"
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        trace = json.load(handle)
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    result = pytester.run(sys.executable, "-m", "pytest_gpuutil", "analyze", "--format", "json", str(path))
    assert result.ret == 0, result.stderr.str()
    summary = json.loads(result.stdout.str())
    assert summary["path"] == str(path)
    assert summary["window_us"] > 0
    if not HAS_CUDA:
        assert (summary["kernel_count"], summary["busy_us"]) == (0, 0.0)


def test_traces_failed_writes_only_failed_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tr=TRACE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-traces", "failed").assert_outcomes(passed=1, failed=1)
    assert trace_files(pytester) == ["test_tr.py_test_broken.json.gz"]


def test_traces_none_is_the_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tr=TRACE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-cpu").assert_outcomes(passed=1, failed=1)
    assert (pytester.path / ".gpu_util" / "gpu_util.csv").is_file()
    assert trace_files(pytester) == []


def test_traces_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpu_util_traces = failed\n")
    pytester.makepyfile(test_tr=TRACE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-cpu").assert_outcomes(passed=1, failed=1)
    assert trace_files(pytester) == ["test_tr.py_test_broken.json.gz"]


# -- the nested-profiler guard --------------------------------------------------------------------
NESTED_TESTS = """
import pytest, torch

def test_own_profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert "aten::mm" in {e.key for e in prof.key_averages()}

@pytest.fixture
def fixture_profiler():
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    yield prof
    prof.stop()
    assert "aten::mm" in {e.name for e in prof.events()}, "the plugin clobbered the fixture's profiler"

def test_profiler_from_a_fixture(fixture_profiler):
    torch.ones(8, 8) @ torch.ones(8, 8)

def test_after():
    torch.ones(8, 8) @ torch.ones(8, 8)
"""


def test_a_test_with_its_own_profiler_passes_with_a_warning_and_a_note(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nested=NESTED_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-traces=all")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*GpuUtilWarning: pytest-gpuutil: the test started its own torch.profiler session; this test is not measured*",
            "*GpuUtilWarning: pytest-gpuutil: a torch.profiler session was already active*",
        ],
        consecutive=False,
    )
    tests = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    assert tests["test_nested.py::test_own_profiler"]["note"] == "the test started its own torch.profiler session"
    assert tests["test_nested.py::test_profiler_from_a_fixture"]["note"] == "a torch.profiler session was already active"
    # the guard is gone after the test: the next test is profiled and its trace written
    assert tests["test_nested.py::test_after"]["wall_ms"] > 0
    assert trace_files(pytester) == ["test_nested.py_test_after.json.gz"]


# -- nothing broken takes the session down ---------------------------------------------------------
def test_unwritable_gpu_util_dir_is_an_error_line_not_a_crash(pytester: pytest.Pytester) -> None:
    (pytester.path / "not_a_dir").write_text("a file where the output folder should be")
    pytester.makepyfile(
        test_tr=TRACE_TESTS
        + """
def test_table(metric_table):
    metric_table("t", ["x"]).add_row({"x": 1})
"""
    )
    result = run(pytester, "--gpu-util", "--gpu-util-cpu", "--gpu-util-traces=all", "--gpu-util-dir=not_a_dir/sub")
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    result.stdout.fnmatch_lines(
        [
            "*- GPU utilization (pytest-gpuutil) -*",
            "ERROR: could not write metric table rows to *not_a_dir/sub*",
            "ERROR: could not write results to *not_a_dir/sub*",
            "WARNING: could not write trace *not_a_dir/sub/traces/test_tr.py_test_broken.json.gz*",
            "*1 failed, 2 passed*",
        ]
    )
    assert out.count("could not write metric table rows") == 1


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="needs pytest-xdist")
def test_xdist_workers_send_their_records_to_the_controller(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_outcomes=OUTCOMES_FILE,
        test_tables="""
import pytest

@pytest.mark.parametrize("n", range(4))
def test_row(metric_table, n):
    metric_table("sizes", ["n", "sq"]).add_row({"n": n, "sq": n * n / 3})
""",
    )
    result = run(pytester, "-n", "2", "--gpu-util", "--gpu-util-cpu")
    result.assert_outcomes(passed=5, failed=1, skipped=1, errors=1, xfailed=1)
    _, rows = read_csv(pytester.path / ".gpu_util" / "gpu_util.csv")
    assert len(rows) == 9
    assert {r["test"]: r["outcome"] for r in rows if r["test"].startswith("test_outcomes")} == EXPECTED_OUTCOMES
    assert {r["worker"] for r in rows} <= {"gw0", "gw1"} and all(r["worker"] for r in rows)
    header, table = read_csv(pytester.path / ".gpu_util" / "metric_table_sizes.csv")
    assert header == ["test", "n", "sq"]
    assert sorted((r["n"], r["sq"]) for r in table) == [("0", "0.000000"), ("1", "0.333333"), ("2", "1.333333"), ("3", "3.000000")]


@requires_no_cuda
def test_no_cuda_line_when_every_test_is_skipped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.skip(reason="needs a GPU")
        def test_gpu():
            pass
        """
    )
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(skipped=1)
    # what happened, as pytest's own summary says it ("1 skipped"), not "1 test ran"
    result.stdout.fnmatch_lines(["1 test skipped: no CUDA device found, nothing measured"])
    result.stdout.no_fnmatch_line("*ran)*")
    result.stdout.no_fnmatch_line("*session GPU busy*")


def test_a_writer_that_fails_with_something_else_than_oserror_is_one_line(pytester: pytest.Pytester,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_util.json needs msgspec: a broken environment ends the run with one line, not a traceback."""
    import sys

    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    monkeypatch.setitem(sys.modules, "msgspec", None)  # `import msgspec` now raises ImportError
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["ERROR: could not write results to .gpu_util: *Error: *msgspec*"])
