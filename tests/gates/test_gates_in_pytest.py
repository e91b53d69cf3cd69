"""CI regression gates, end to end: real pytest runs with the plugin installed, on real files.

Without CUDA a record has no GPU numbers, so the runs plant them through the plugin's own
``pytest_gpuutil_record`` hook (see ``PLANT_CONFTEST``): thresholds, baselines, comparisons and
CI outputs then run exactly as they do with numbers measured on a GPU.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gpuutil.gates.baseline import AUTOSAVE_RE

# The runs are in-process (pytester.runpytest) for speed. pytester drops the modules a run first
# imported, and torch (with the parts profiling imports lazily) cannot be imported twice in one
# process: torch is imported here and warm_torch (tests/conftest.py, used by the whole module)
# loads the rest first.
torch = pytest.importorskip("torch")
from tests.helpers import (  # noqa: E402
    CPU_WORK_FIXTURE,
    PLANT_CONFTEST,
    REGRESSION_HEADER,
    TWO_TESTS,
    busy,
    output,
    plant,
    run,
)

pytestmark = pytest.mark.usefixtures("warm_torch")


def saved(pytester: pytest.Pytester, name: str) -> Path:
    """The one baseline file NAME.json (the machine id directory differs on a GPU machine)."""
    found = list((pytester.path / ".gpu_util" / "baselines").glob(f"*/{name}.json"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def baseline_main(pytester: pytest.Pytester) -> Path:
    """Two tests at 50% busy, saved as baseline ``main``."""
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", "--gpu-util-save", "main")
    assert result.ret == 0, output(result)
    path = saved(pytester, "main")
    records = {t["test"]: t for t in json.loads(path.read_text())["tests"]}
    assert records["test_a.py::test_fast"]["busy_pct"] == 50.0
    return path


# -- regression against a saved baseline --------------------------------------------------------
def test_planted_regression_fails_with_table_and_pytest_summary_line(pytester, baseline_main):
    plant(pytester, test_fast=busy(30.0), test_slow=busy(47.0))  # -20 pts fails, -3 pts is within 5
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "main", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 1
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*GPU regressions against baseline*main.json*",
        "tests in test_a.py::",  # the file the rows share, once
        REGRESSION_HEADER,
        "*",
        "test_fast*busy_pct*50*30*-20.0 pts*-5 pts",
        "FAILED: 1 regression(s) in 1 test(s) (limits: busy_pct:5)",
    ])
    result.stdout.fnmatch_lines(["*== 2 passed in *"])  # pytest's own final line survives the gate
    assert "test_slow  busy_pct" not in result.stdout.str()
    assert "Traceback" not in output(result)


def test_no_regression_exits_0(pytester, baseline_main):
    plant(pytester, test_fast=busy(46.0), test_slow=busy(55.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "main", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*main.json: 2 tests compared"])
    assert "FAILED" not in result.stdout.str()


def test_default_fail_expressions_apply_without_gpu_util_fail(pytester, baseline_main):
    plant(pytester, test_fast=busy(50.0, gpu_busy_ms=12.0), test_slow=busy(50.0))  # +20% GPU time
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "main")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["test_fast*gpu_busy_ms*10*12*+20.0%*+10%"])


def test_autosave_then_compare_with_the_latest(pytester):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0))
    assert run(pytester, "--gpu-util", "--gpu-util-autosave").ret == 0
    first = list((pytester.path / ".gpu_util" / "baselines").glob("*/*.json"))
    assert len(first) == 1 and AUTOSAVE_RE.match(first[0].stem), first

    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))
    # compares with the newest autosave (50%), then autosaves this run (30%)
    result = run(pytester, "--gpu-util", "--gpu-util-autosave", "--gpu-util-fail", "busy_pct:5", "--gpu-util-compare")
    assert result.ret == 1, output(result)
    result.stdout.fnmatch_lines([f"*GPU regressions against baseline*{first[0].name}*", REGRESSION_HEADER])
    both = sorted((pytester.path / ".gpu_util" / "baselines").glob("*/*.json"))
    assert len(both) == 2 and both[0] == first[0], both

    # the latest is now the 30% run: no regression
    result = run(pytester, "--gpu-util", "--gpu-util-fail", "busy_pct:5", "--gpu-util-compare")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines([f"no GPU regressions against baseline*{both[1].name}: 2 tests compared"])


# -- no usable baseline ---------------------------------------------------------------------------
def test_missing_baseline_warns_and_passes(pytester):
    pytester.makepyfile(test_a=TWO_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-compare")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["WARNING: no baseline yet for machine * under *baselines*", "*2 passed*"])


def test_missing_baseline_fails_with_compare_strict(pytester):
    pytester.makepyfile(test_a=TWO_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-compare-strict", "--gpu-util-compare")
    assert result.ret == 1
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "WARNING: no baseline yet*",
        "FAILED: no baseline to compare with (--gpu-util-compare-strict)",
        "*== 2 passed in *",
    ])
    assert "Traceback" not in output(result)

    result = run(pytester, "--gpu-util-compare-strict", "--gpu-util-compare")  # no --gpu-util, no records
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAILED: no baseline to compare with (--gpu-util-compare-strict)"])


def test_a_baseline_name_not_saved_yet_warns_naming_the_baselines_there_are(pytester, baseline_main):
    other = baseline_main.parent.parent / "NVIDIA_Imaginary_X9-x2"  # a baseline from another machine
    other.mkdir()
    (other / "nightly.json").write_text(baseline_main.read_text())
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "mian")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=2)
    warnings = [line for line in result.stdout.lines if "WARNING" in line]
    assert len(warnings) == 1, output(result)
    assert warnings[0].startswith("WARNING: no baseline 'mian' for machine ")
    assert " under .gpu_util/baselines (saved for this machine: main, " in warnings[0]
    assert "for other machines: NVIDIA_Imaginary_X9-x2 (nightly)): not compared" in warnings[0]
    assert "GPU regressions" not in result.stdout.str() and "ERROR" not in output(result)


def test_a_baseline_name_not_saved_yet_fails_with_compare_strict(pytester, baseline_main):
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "mian", "--gpu-util-compare-strict")
    assert result.ret == 1, output(result)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "WARNING: no baseline 'mian' for machine *",
        "FAILED: no baseline to compare with (--gpu-util-compare-strict)",
        "*== 2 passed in *",
    ])
    assert "Traceback" not in output(result)


@pytest.mark.parametrize("spec", ["nowhere/main.json", "main-typo.json", "nowhere/main"])
def test_a_baseline_path_that_does_not_exist_is_a_usage_error_of_one_line(pytester, baseline_main, spec):
    result = run(pytester, "--gpu-util", "--gpu-util-compare", spec)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = result.stderr.lines
    assert [line for line in errors if line.strip()] == [
        f"ERROR: --gpu-util-compare: {spec}: no such file (a NAME without '/' or '.json' names a saved baseline)"
    ], output(result)
    assert "Traceback" not in output(result)


def test_baseline_from_another_gpu_model_is_not_compared_unless_any_machine(pytester, baseline_main):
    doc = json.loads(baseline_main.read_text())
    doc["machine_info"]["gpu_model"] = "NVIDIA Imaginary X9"
    doc["machine_info"]["gpu_count"] = 1
    other = pytester.path / "other_machine.json"
    other.write_text(json.dumps(doc))
    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))

    result = run(pytester, "--gpu-util", "--gpu-util-fail", "busy_pct:5", "--gpu-util-compare", str(other))
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "WARNING: baseline *other_machine.json is from machine NVIDIA_Imaginary_X9-x1, this is *: not compared*"
    ])
    assert "GPU regressions" not in result.stdout.str()

    result = run(pytester, "--gpu-util", "--gpu-util-compare-any-machine", "--gpu-util-fail", "busy_pct:5",
                 "--gpu-util-compare", str(other))
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*GPU regressions against baseline*other_machine.json*",
                                 "test_fast*busy_pct*50*30*-20.0 pts*"])


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    (json.dumps({"format": "pytest-gpuutil", "version": 1, "tests": [{"test": "t", "busy_pct": "high"}]}),
     "expected a finite number"),
])
def test_corrupt_baseline_is_a_usage_error_naming_the_file(pytester, baseline_main, content, problem):
    baseline_main.write_text(content)
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    shown = baseline_main.relative_to(pytester.path)  # under the working directory: relative
    assert f"corrupt baseline {shown}: " in err and problem in err, err
    assert "Traceback" not in output(result)


# -- kernel_bench gates ---------------------------------------------------------------------------
KERNEL_BENCH_TEST = CPU_WORK_FIXTURE + """
from pathlib import Path

SLEEP_S = float((Path(__file__).parent / "sleep_s.txt").read_text())

def test_kb(kernel_bench, cpu_work):
    kernel_bench(cpu_work, SLEEP_S, warmup_ms=2, rep_ms=20, label="sleepy")
"""


def test_kernel_bench_median_relative_gate(pytester):
    """kernel_bench timings on perf_counter (a clock the work alone moves): 1 ms per call in the baseline, 3 ms now."""
    pytester.makepyfile(test_kb=KERNEL_BENCH_TEST)
    (pytester.path / "sleep_s.txt").write_text("0.001")
    assert run(pytester, "--gpu-util-save", "kb").ret == 0
    base = json.loads(saved(pytester, "kb").read_text())["tests"][0]["kernel_bench"]["sleepy"]
    assert 0.9 < base["median"] < 2.5, base

    (pytester.path / "sleep_s.txt").write_text("0.003")
    result = run(pytester, "--gpu-util-compare", "kb", "--gpu-util-fail", "kernel_bench.median:5%")
    assert result.ret == 1, output(result)
    result.stdout.fnmatch_lines([REGRESSION_HEADER, "*", "test_kb*kernel_bench[[]sleepy[]].median*+*%*+5%"])
    result.assert_outcomes(passed=1)

    (pytester.path / "sleep_s.txt").write_text("0.001")  # faster than the 3 ms run is not a regression
    assert run(pytester, "--gpu-util-save", "kb3").ret == 0  # baseline with the 1 ms timing again
    (pytester.path / "sleep_s.txt").write_text("0.0005")
    result = run(pytester, "--gpu-util-compare", "kb3", "--gpu-util-fail", "kernel_bench.median:5%")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*kb3.json: 1 tests compared"])


# -- per-test thresholds --------------------------------------------------------------------------
MARKED_TESTS = """
import pytest

@pytest.mark.gpu_util(min_busy_pct=20)
def test_low():
    pass

@pytest.mark.gpu_util(min_busy_pct=20)
def test_high():
    pass

@pytest.mark.gpu_util(max_kernel_count=5)
def test_many_kernels():
    pass

@pytest.mark.gpu_util(min_mm_conv_pct=10)
def test_mm_unmeasured():
    pass
"""


def test_marker_thresholds_fail_and_pass(pytester):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_m=MARKED_TESTS)
    plant(
        pytester,
        test_low=busy(10.0),
        test_high=busy(30.0),
        test_many_kernels=busy(30.0, kernel_count=9),
        test_mm_unmeasured=busy(30.0, mm_conv_pct=None),
    )
    result = run(pytester, "--gpu-util", "-rA")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        "*_ test_low _*",
        "gpu_util: busy_pct 10 is below min_busy_pct=20",
        "*_ test_many_kernels _*",
        "gpu_util: kernel_count 9 is above max_kernel_count=5",
        "*_ test_mm_unmeasured _*",
        "gpu_util: mm_conv_pct was not measured, required by min_mm_conv_pct=10",
    ])
    result.stdout.fnmatch_lines(["PASSED test_m.py::test_high"])
    outcomes = {t["test"]: t["outcome"] for t in json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["tests"]}
    assert outcomes == {
        "test_m.py::test_low": "failed",
        "test_m.py::test_high": "passed",
        "test_m.py::test_many_kernels": "failed",
        "test_m.py::test_mm_unmeasured": "failed",
    }
    assert "NOT CHECKED" not in result.stdout.str()


def test_marker_without_gpu_data_is_not_checked_never_passed(pytester):
    if torch.cuda.is_available():
        pytest.skip("with CUDA the test is measured (tests/test_gpu.py covers that)")
    pytester.makepyfile(test_m=MARKED_TESTS)
    result = run(pytester, "--gpu-util")
    assert result.ret == 0  # not checked is not a failure ...
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([  # ... and not a pass either: the summary says so
        "gpu_util thresholds NOT CHECKED for 4 tests (no GPU measurement):",  # too long for one line at 80
        "  test_m.py::test_low",
        "  test_m.py::test_high",
    ])
    record = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["tests"][0]
    assert record["busy_pct"] is None and record["note"] == "no CUDA device"


def test_ini_default_thresholds_with_marker_override(pytester):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makeini("[pytest]\ngpu_util_thresholds = min_busy_pct=20 max_kernel_count=100\n")
    pytester.makepyfile(test_i="""
        import pytest

        def test_default():
            pass

        @pytest.mark.gpu_util(min_busy_pct=5)
        def test_marker_wins():
            pass

        def test_ok():
            pass
    """)
    plant(pytester, test_default=busy(10.0), test_marker_wins=busy(10.0), test_ok=busy(30.0))
    result = run(pytester, "--gpu-util")
    assert result.ret == 1
    result.assert_outcomes(passed=2, failed=1)
    # the failure's own section; pytest 7 leaves the reason out of an 80-column short summary line
    result.stdout.fnmatch_lines(["*_ test_default _*", "gpu_util: busy_pct 10 is below min_busy_pct=20",
                                 "FAILED test_i.py::test_default*"])

    pytester.makeini("[pytest]\ngpu_util_thresholds = min_busy=20\n")
    result = run(pytester, "--gpu-util")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "gpu_util_thresholds: unknown threshold min_busy" in result.stderr.str()


def test_record_hook_is_called_at_call_for_limits_and_at_teardown_for_the_kept_record(pytester):
    pytester.makeconftest("""
        from pathlib import Path

        def pytest_gpuutil_record(item, record, when):
            with open(Path(__file__).parent / "calls.txt", "a") as handle:
                handle.write(f"{item.name} {when} {record.outcome}\\n")
    """)
    pytester.makepyfile(test_w="""
        import pytest

        @pytest.mark.gpu_util(max_gpu_ms=1e6)  # passes when measured (on a GPU), not checked on the CPU
        def test_marked():
            pass

        def test_plain():
            pass
    """)
    assert run(pytester, "--gpu-util").ret == 0
    calls = (pytester.path / "calls.txt").read_text().splitlines()
    assert calls == ["test_marked call passed", "test_marked teardown passed", "test_plain teardown passed"]
    (pytester.path / "calls.txt").unlink()
    assert run(pytester).ret == 0  # without --gpu-util (and no fixture) there is no record at all
    assert not (pytester.path / "calls.txt").exists()


def test_record_hook_must_return_a_record(pytester):
    pytester.makeconftest("def pytest_gpuutil_record(item, record, when):\n    return {'busy_pct': 1}\n")
    pytester.makepyfile(test_a=TWO_TESTS)
    result = run(pytester, "--gpu-util")
    assert result.ret != 0
    assert "pytest_gpuutil_record for test_a.py::test_fast returned dict" in output(result)


# -- the compare command --------------------------------------------------------------------------
def compare_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpuutil", "compare", *args],
                          capture_output=True, text=True, timeout=120)


def test_compare_cli_exit_codes_on_real_run_files(pytester, baseline_main):
    run_file = pytester.path / ".gpu_util" / "gpu_util.json"
    base = pytester.path / "base.json"
    shutil.copy(run_file, base)
    plant(pytester, test_fast=busy(47.0), test_slow=busy(50.0))
    assert run(pytester, "--gpu-util").ret == 0
    good = shutil.copy(run_file, pytester.path / "good.json")
    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))
    assert run(pytester, "--gpu-util").ret == 0
    bad = shutil.copy(run_file, pytester.path / "bad.json")
    garbage = pytester.path / "garbage.json"
    garbage.write_text("[1, 2")

    ok = compare_cli(str(base), str(good), "--fail", "busy_pct:5")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("no regressions: 2 tests compared")

    regressed = compare_cli(str(base), str(bad), "--fail", "busy_pct:5")
    assert regressed.returncode == 1, regressed.stderr
    assert "test_a.py::test_fast" in regressed.stdout and "-20.0 pts" in regressed.stdout
    assert "test_a.py::test_slow" not in regressed.stdout.split("\n", 2)[2].split("regressions in")[0]

    broken = compare_cli(str(base), str(garbage))
    assert broken.returncode == 2
    assert broken.stderr.startswith("error: ") and "garbage.json" in broken.stderr

    bad_expr = compare_cli(str(base), str(good), "--fail", "busy:5")
    assert bad_expr.returncode == 2 and "unknown metric 'busy'" in bad_expr.stderr


# -- CI outputs -----------------------------------------------------------------------------------
def test_junit_xml_has_gpu_util_properties(pytester):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    plant(pytester, test_fast=busy(42.5, mm_conv_pct=12.25, top_kernel="sm90_gemm"), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", "--junitxml=out.xml")
    assert result.ret == 0
    root = ET.parse(pytester.path / "out.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_fast"].iter("property")}
    assert props["gpu_util.busy_pct"] == "42.5"
    assert props["gpu_util.mm_conv_pct"] == "12.25"
    assert props["gpu_util.gpu_busy_ms"] == "10"
    assert props["gpu_util.kernel_count"] == "4"
    assert props["gpu_util.top_kernel"] == "sm90_gemm"
    assert "gpu_util.note" not in props
    slow = {p.get("name"): p.get("value") for p in cases["test_slow"].iter("property")}
    assert slow["gpu_util.busy_pct"] == "50" and "gpu_util.top_kernel" not in slow


def test_github_step_summary_gets_a_markdown_table(pytester, baseline_main, monkeypatch):
    summary = pytester.path / "step_summary.md"
    summary.write_text("earlier step output\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    plant(pytester, test_fast=busy(30.0, gpu_busy_ms=20.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "main", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 1
    text = summary.read_text()
    assert text.startswith("earlier step output\n\n### GPU utilization (pytest-gpuutil)\n")
    lines = text.splitlines()
    header = lines.index("| test | busy % | mm/conv % | GPU ms | kernels | top kernel |")
    assert lines[header + 2].startswith("| `test_a.py::test_fast` | 30 |")  # most GPU time first
    assert lines[header + 3].startswith("| `test_a.py::test_slow` | 50 |")
    assert "#### :x: 1 GPU regressions" in lines
    assert "| `test_a.py::test_fast` | busy_pct | 50 | 30 | -20.0 pts | -5 pts |" in lines


def test_github_step_summary_honours_top_0_and_kernel_bench_gates(pytester, monkeypatch):
    summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_many="""
        import pytest

        @pytest.mark.parametrize("i", range(12))
        def test_t(i):
            pass
    """)
    plant(pytester, **{f"test_t[{i}]": busy(50.0, gpu_busy_ms=float(i + 1)) for i in range(12)})
    assert run(pytester, "--gpu-util", "--gpu-util-top", "0").ret == 0
    assert "All tests by GPU time:" in summary.read_text()
    assert summary.read_text().count("| `test_many.py::test_t[") == 12
    summary.unlink()
    assert run(pytester, "--gpu-util", "--gpu-util-top", "3").ret == 0
    assert "Top 3 tests by GPU time:" in summary.read_text()

    summary.unlink()
    pytester.makepyfile(test_kb=KERNEL_BENCH_TEST)
    (pytester.path / "sleep_s.txt").write_text("0.001")
    assert run(pytester, "test_kb.py", "--gpu-util-save", "kb").ret == 0
    assert "GPU utilization" in summary.read_text()  # --gpu-util-save turns measuring on
    summary.unlink()
    (pytester.path / "sleep_s.txt").write_text("0.003")
    result = run(pytester, "test_kb.py", "--gpu-util-compare", "kb", "--gpu-util-fail", "kernel_bench.median:5%")
    assert result.ret == 1
    assert "#### :x: 1 GPU regressions" in summary.read_text()
    assert "| `test_kb.py::test_kb` | kernel_bench[sleepy].median |" in summary.read_text()
