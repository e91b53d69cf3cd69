"""Options that take values never swallow a test path: real pytest runs, plus the pure helpers.

argparse gives an option with an optional value (``--gpu-util-compare [NAME|PATH]``) the next word
whatever it is, and ``nargs='+'`` took every word up to the next option; a test path after such an
option was read as a baseline name or a fail expression. Every option that takes a value is run
here followed by a test path, with a second test file that must not be collected.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuutil.options import (
    COMPARE_LATEST,
    OPTIONS,
    OptionError,
    is_test_path,
    keep_test_paths,
    misplaced_expression,
    resolve,
)
from tests.helpers import output, run

pytestmark = pytest.mark.usefixtures("warm_torch")

GATE_TEST = """
def test_gate(metric_table):
    metric_table("t1", ["n"]).add_row({"n": 1})
"""

OTHER_TEST = """
def test_never_collected():
    raise AssertionError("the command named test_gate.py only")
"""

#: inner conftest: what the run made of its options, for the outer test to read
SHOW_CONFTEST = """
import json
from pathlib import Path


def pytest_unconfigure(config):
    from pytest_gpuutil.plugin import STATE_KEY

    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    Path(__file__).with_name("seen.json").write_text(json.dumps({
        "args": [str(a) for a in config.args],
        "compare": state.settings.compare,
        "fail": [e.text for e in state.fail_exprs],
    }))
"""

#: a value for every option that takes one (None: the option's value is optional and left out)
SAMPLE_VALUES = {
    "--gpu-util-top": "3",
    "--gpu-util-dir": "out",
    "--gpu-util-traces": "none",
    "--gpu-util-tables": "t1",
    "--gpu-util-save": "snap",
    "--gpu-util-compare": None,
    "--gpu-util-html": None,
    "--gpu-util-fail": "busy_pct:5",
    "--gpu-util-thresholds": "min_busy_pct=0",
    "--gpu-util-source": "torch",
    "--gpu-util-flush": "tests=5",
    "--gpu-util-history": None,
    "--gpu-util-history-runs": "3",
    "--gpu-util-findings": "off",
    "--gpu-util-findings-ignore": "gpu-idle,host-sync",
    "--gpu-util-findings-floor": "2ms,5%",
    "--gpu-util-counters": "off",
    "--gpu-util-counters-interval": "2",
    "--gpu-util-children": "off",
    "--gpu-util-memory": "off",
    "--gpu-util-timelines": "5",
    "--gpu-util-timeline-gap": "0.5",
}

VALUE_OPTIONS = [spec.flag for spec in OPTIONS if spec.kind != "flag"]


@pytest.fixture
def two_files(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SHOW_CONFTEST)
    pytester.makepyfile(test_gate=GATE_TEST, test_other=OTHER_TEST)
    return pytester


def seen(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "seen.json").read_text())


# -- real runs ----------------------------------------------------------------------------------
def test_the_command_from_the_issue_runs_the_test_path_and_parses_the_expression(two_files):
    assert run(two_files, "--gpu-util", "--gpu-util-save", "base", "test_gate.py").ret == 0
    result = run(two_files, "--gpu-util", "--gpu-util-compare", "base", "--gpu-util-fail",
                 "kernel_bench.median:50%", "test_gate.py")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)
    assert seen(two_files) == {"args": ["test_gate.py"], "compare": "base", "fail": ["kernel_bench.median:50%"]}
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*base.json: 1 tests compared*"])


@pytest.mark.parametrize("flag", VALUE_OPTIONS)
def test_every_option_with_a_value_leaves_the_test_path_after_it_a_test_path(two_files, flag):
    assert flag in SAMPLE_VALUES, f"give {flag} a sample value in SAMPLE_VALUES"
    value = SAMPLE_VALUES[flag]
    words = [flag] if value is None else [flag, value]
    result = run(two_files, "--gpu-util", *words, "test_gate.py")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)
    assert seen(two_files)["args"] == ["test_gate.py"]


@pytest.mark.parametrize("target", ["test_gate.py", "test_gate.py::test_gate", "sub", "sub/", "./sub/test_in_sub.py"])
def test_a_test_path_after_bare_compare_is_collected_and_the_newest_baseline_used(two_files, target):
    (two_files.path / "sub").mkdir()
    (two_files.path / "sub" / "test_in_sub.py").write_text(GATE_TEST)
    result = run(two_files, "--gpu-util", "--gpu-util-compare", target)
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)
    assert seen(two_files)["args"] == [target]
    assert seen(two_files)["compare"] == COMPARE_LATEST
    result.stdout.fnmatch_lines(["WARNING: no baseline yet for machine *"])


def test_a_name_after_compare_is_the_baseline_and_equals_form_wins_over_a_folder(two_files):
    assert run(two_files, "--gpu-util", "--gpu-util-save", "sub", "test_gate.py").ret == 0
    (two_files.path / "sub").mkdir()
    result = run(two_files, "--gpu-util", "--gpu-util-compare=sub", "test_gate.py")
    assert result.ret == 0, output(result)
    assert seen(two_files)["compare"] == "sub"
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*sub.json: 1 tests compared*"])

    result = run(two_files, "--gpu-util", "--gpu-util-compare", "sub", "test_gate.py")  # a folder: a test path
    assert seen(two_files) == {"args": ["sub", "test_gate.py"], "compare": COMPARE_LATEST,
                               "fail": ["busy_pct:5", "mm_conv_pct:5", "gpu_busy_ms:10%"]}


def test_a_json_path_after_compare_is_the_baseline(two_files):
    assert run(two_files, "--gpu-util", "--gpu-util-save", "snap", "test_gate.py").ret == 0
    saved = next((two_files.path / ".gpu_util" / "baselines").glob("*/snap.json"))
    result = run(two_files, "--gpu-util", "--gpu-util-compare", str(saved), "test_gate.py")
    assert result.ret == 0, output(result)
    assert seen(two_files)["compare"] == str(saved)
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("words", [
    ["--gpu-util-fail", "busy_pct:5", "--gpu-util-fail", "gpu_busy_ms:10%", "--gpu-util-fail", "kernel_count:3"],
    ["--gpu-util-fail", "busy_pct:5,gpu_busy_ms:10%,kernel_count:3"],
    ["--gpu-util-fail", "busy_pct:5, gpu_busy_ms:10%", "--gpu-util-fail=kernel_count:3"],
    ["--gpu-util-fail", "busy_pct:5 gpu_busy_ms:10% kernel_count:3"],
])
def test_repeated_and_comma_separated_fail_expressions_are_the_same(two_files, words):
    result = run(two_files, "--gpu-util", *words, "test_gate.py")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)
    assert seen(two_files)["fail"] == ["busy_pct:5", "gpu_busy_ms:10%", "kernel_count:3"]
    assert seen(two_files)["args"] == ["test_gate.py"]


def test_the_ini_key_takes_several_expressions(two_files):
    two_files.makeini("[pytest]\ngpu_util_fail = busy_pct:5 gpu_busy_ms:10%,kernel_count:3\n")
    result = run(two_files, "--gpu-util", "test_gate.py")
    assert result.ret == 0, output(result)
    assert seen(two_files)["fail"] == ["busy_pct:5", "gpu_busy_ms:10%", "kernel_count:3"]
    two_files.makeini("[pytest]\ngpu_util_fail = busy_pct:5 test_gate.py\n")
    result = run(two_files, "--gpu-util", "test_gate.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini key gpu_util_fail (option --gpu-util-fail): bad fail expression 'test_gate.py'" in output(result)


def test_the_old_several_values_form_is_a_usage_error_showing_the_new_one(two_files):
    result = run(two_files, "--gpu-util", "--gpu-util-fail", "busy_pct:5", "gpu_busy_ms:10%", "test_gate.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("--gpu-util-fail takes one expression per use: 'gpu_busy_ms:10%' after --gpu-util-fail busy_pct:5"
            in output(result))
    assert "--gpu-util-fail busy_pct:5 --gpu-util-fail gpu_busy_ms:10%" in output(result)


def test_a_bad_fail_expression_names_the_option(two_files):
    result = run(two_files, "--gpu-util", "--gpu-util-fail", "busy_pct:lots", "test_gate.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "argument --gpu-util-fail: bad fail expression 'busy_pct:lots'" in output(result)


def test_xdist_workers_see_the_same_test_path(two_files):
    pytest.importorskip("xdist")
    result = run(two_files, "-n", "2", "--gpu-util", "--gpu-util-compare", "test_gate.py")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)


# -- the pure helpers ---------------------------------------------------------------------------
@pytest.mark.parametrize("word, is_path", [
    ("tests/test_x.py", True),
    ("test_x.py", True),
    ("test_x.py::test_a[1]", True),
    ("existing_folder", True),
    ("existing_folder/", True),
    ("tests/gpu", False),  # no such folder: a baseline path, which says what is wrong with it
    ("main", False),
    ("main.json", False),
    ("runs/main.json", False),
    ("report.html", False),  # an existing file: an output path written again (--gpu-util-html)
    ("-k", False),
    ("", False),
])
def test_is_test_path(tmp_path: Path, word: str, is_path: bool):
    (tmp_path / "existing_folder").mkdir()
    (tmp_path / "report.html").write_text("<html></html>")
    assert is_test_path(word, tmp_path) is is_path


def test_keep_test_paths_rewrites_only_a_bare_compare_before_a_test_path(tmp_path: Path):
    args = ["--gpu-util", "--gpu-util-compare", "t.py", "--gpu-util-compare", "main", "x.py"]
    fixed, kept = keep_test_paths(args, tmp_path)
    assert fixed == ["--gpu-util", f"--gpu-util-compare={COMPARE_LATEST}", "t.py", "--gpu-util-compare", "main", "x.py"]
    assert kept == ["t.py"]
    assert args[1] == "--gpu-util-compare"  # the caller's list is left alone
    assert keep_test_paths(["--", "--gpu-util-compare", "t.py"], tmp_path) == (["--", "--gpu-util-compare", "t.py"], [])


def test_misplaced_expression(tmp_path: Path):
    assert misplaced_expression(["--fail", "busy_pct:5", "a.json"], "--fail", tmp_path) is None
    assert misplaced_expression(["--fail", "busy_pct:5", "test_x.py::test_a"], "--fail", tmp_path) is None
    assert "'wall_ms:3'" in misplaced_expression(["--fail=busy_pct:5", "wall_ms:3"], "--fail", tmp_path)
    (tmp_path / "wall_ms:3").write_text("")  # a file of that name is what the user meant
    assert misplaced_expression(["--fail=busy_pct:5", "wall_ms:3"], "--fail", tmp_path) is None
    with pytest.raises(OptionError, match="one expression per use"):
        keep_test_paths(["--gpu-util-fail", "busy_pct:5", "gpu_busy_ms:10%"], tmp_path)


def test_resolve_checks_each_ini_value_of_a_repeatable_option():
    spec = next(s for s in OPTIONS if s.flag == "--gpu-util-fail")
    assert resolve(spec, None, ["busy_pct:5", "wall_ms:3,kernel_count:2"]) == ["busy_pct:5", "wall_ms:3,kernel_count:2"]
    assert resolve(spec, ["busy_pct:1"], ["busy_pct:5"]) == ["busy_pct:1"]
    with pytest.raises(OptionError, match="ini key gpu_util_fail"):
        resolve(spec, None, ["busy_pct:5", "nope"])


@pytest.mark.parametrize("words, by", [
    (["--gpu-util"], None),
    (["--gpu-util-save", "snap"], "--gpu-util-save"),
    (["--gpu-util-autosave"], "--gpu-util-autosave"),
    (["--gpu-util-compare"], "--gpu-util-compare"),
    (["--gpu-util-compare=snap"], "--gpu-util-compare"),
    (["--gpu-util-fail", "busy_pct:5"], "--gpu-util-fail"),
    (["--gpu-util-history"], "--gpu-util-history"),
])
def test_options_that_need_measurements_turn_measuring_on(two_files, words, by):
    result = run(two_files, *words, "test_gate.py")
    assert result.ret == 0, output(result)
    header = "gpu-util: on (--gpu-util)" if by is None else f"gpu-util: on (turned on by {by})"
    assert [line for line in result.stdout.lines if line.startswith("gpu-util:")] == [header]
    result.stdout.fnmatch_lines(["*- GPU utilization (pytest-gpuutil) -*"])
    doc = json.loads((two_files.path / ".gpu_util" / "gpu_util.json").read_text())
    assert [t["test"] for t in doc["tests"]] == ["test_gate.py::test_gate"]


def test_without_any_of_them_nothing_is_measured_and_the_header_is_quiet(two_files):
    two_files.makeini("[pytest]\ngpu_util_fail = busy_pct:5\ngpu_util_save = nightly\n")  # ini keys alone: off
    result = run(two_files, "test_gate.py")
    assert result.ret == 0, output(result)
    assert "gpu-util:" not in result.stdout.str() and "GPU utilization" not in result.stdout.str()
    assert not (two_files.path / ".gpu_util" / "baselines").exists()
    two_files.makeini("[pytest]\ngpu_util = true\n")
    result = run(two_files, "test_gate.py")
    result.stdout.fnmatch_lines(["gpu-util: on (gpu_util = true in the ini file)"])
