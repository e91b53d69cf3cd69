"""The run history end to end: real pytest runs (pytester) with --gpu-util-history and --gpu-util-compare history.

kernel_bench times its work with perf_counter here (no CUDA), on a clock the work alone moves
(tests/helpers CPU_WORK_FIXTURE), so the timings are exact; busy % is planted through the plugin's
own record hook (tests/helpers PLANT_CONFTEST) where a test needs exact numbers.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil.cli import history as history_cli
from pytest_gpuutil.history.store import SCHEMA_VERSION, open_history

torch = pytest.importorskip("torch")  # before pytester snapshots sys.modules (see tests/conftest.py warm_torch)
from tests.helpers import CPU_WORK_FIXTURE, PLANT_CONFTEST, TWO_TESTS, busy, output, plant, run  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_torch")

#: two kernel_bench tests; SLOW=5 makes the first five times slower
KB_TESTS = CPU_WORK_FIXTURE + """
import os

SLOW = float(os.environ.get("SLOW", "1"))


def test_kb(kernel_bench, cpu_work):
    kernel_bench(cpu_work, 0.01 * SLOW, warmup_ms=2, rep_ms=80, label="sleepy")


def test_steady(kernel_bench, cpu_work):
    kernel_bench(cpu_work, 0.01, warmup_ms=2, rep_ms=50, label="steady")
"""

GATE = ("--gpu-util-compare", "history", "--gpu-util-fail", "kernel_bench.median:50%")


def db_of(pytester: pytest.Pytester) -> Path:
    return pytester.path / ".gpu_util" / "history.sqlite"


def history_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert history_cli.main(["--db", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def five_runs(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_kb=KB_TESTS)
    for _ in range(5):
        result = run(pytester, "--gpu-util-history")
        assert result.ret == 0, output(result)
    return pytester


# -- the acceptance -----------------------------------------------------------------------------------
def test_five_runs_make_a_history_of_five_runs(five_runs, capsys):
    doc = history_json(db_of(five_runs), capsys)
    assert len(doc["runs"]) == 5 and {r["tests"] for r in doc["runs"]} == {2}
    assert len(doc["tests"]["test_kb.py::test_kb"]["metrics"]["kernel_bench[sleepy].median"]) == 5
    assert all(r["date"] and r["machine_id"] for r in doc["runs"])


def test_an_unchanged_run_passes_and_a_5x_slower_kernel_bench_fails_with_pytests_summary_line(five_runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # room for the table's limit column
    result = run(five_runs, *GATE)
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["no GPU regressions against history .gpu_util/history.sqlite (median of each test's "
                                 "last 5 runs on *): 2 tests compared"])
    monkeypatch.setenv("SLOW", "5")
    result = run(five_runs, *GATE)
    assert result.ret == 1, output(result)
    result.stdout.fnmatch_lines([
        "*GPU regressions against history .gpu_util/history.sqlite (median of each test's last 5 runs on *)*",
        "test*metric*baseline*now*change*limit",
    ])
    result.stdout.fnmatch_lines(["tests in test_kb.py::",
                                 "test_kb*kernel_bench[[]sleepy[]].median*+*%*+50%, noise ±* ms"])
    result.stdout.fnmatch_lines(["FAILED: * regression(s) in * test(s) (limits: kernel_bench.median:50%)"])
    result.stdout.fnmatch_lines(["*== 2 passed in *"])
    assert "Traceback" not in output(result)


def test_xdist_workers_write_one_history_run_for_the_session(pytester, capsys):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_kb=KB_TESTS, test_b=TWO_TESTS)
    result = run(pytester, "-n", "2", "--gpu-util", "--gpu-util-history")
    assert result.ret == 0, output(result)
    doc = history_json(db_of(pytester), capsys)
    assert len(doc["runs"]) == 1 and doc["runs"][0]["tests"] == 4
    workers = {json.loads(row[0])["worker"] for row in
               sqlite3.connect(db_of(pytester)).execute("SELECT record FROM records")}
    assert workers <= {"gw0", "gw1"} and workers  # made on the workers, written once by the controller


def test_the_history_holds_commit_branch_and_every_record(pytester, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_SHA", "0123456789abcdef")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    monkeypatch.delenv("GITHUB_HEAD_REF", raising=False)
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    plant(pytester, test_fast=busy(50.0), test_slow=busy(20.0))
    assert run(pytester, "--gpu-util", "--gpu-util-history=hist/runs.sqlite").ret == 0
    (row,) = history_json(pytester.path / "hist" / "runs.sqlite", capsys)["runs"]
    assert row["branch"] == "main" and row["commit"] in ("0123456789abcdef", row["machine_info"].get("git_commit"))
    assert row["tests"] == 2


# -- the noise-aware rule in a run ----------------------------------------------------------------------
def noisy_history(pytester: pytest.Pytester, values: list[float]) -> None:
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    for value in values:
        plant(pytester, test_fast=busy(value), test_slow=busy(50.0))
        assert run(pytester, "--gpu-util", "--gpu-util-history").ret == 0


def test_a_change_past_the_limit_inside_the_noise_passes_and_says_so(pytester, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # room for the table's limit column
    noisy_history(pytester, [50.0, 56.0, 44.0, 55.0, 45.0])  # median 50, scaled MAD 7.4: noise ±22 pts
    plant(pytester, test_fast=busy(40.0), test_slow=busy(50.0))  # -10 pts: past busy_pct:5, inside the noise
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines([
        "no GPU regressions against history*: 2 tests compared",
        "1 change(s) past the limit but within the noise of the last runs (median ± 3 scaled MADs), not regressions: "
        "test_a.py::test_fast busy_pct 50 -> 40 (-10.0 pts)",
    ])
    plant(pytester, test_fast=busy(20.0), test_slow=busy(50.0))  # -30 pts: outside the noise too
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-fail", "busy_pct:5",
                 "--gpu-util-html")
    assert result.ret == 1, output(result)
    result.stdout.fnmatch_lines(["test_fast*busy_pct*50*20*-30.0 pts*-5 pts, noise ±22.24 pts"])
    page = (pytester.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert "history .gpu_util/history.sqlite (median of each test&#x27;s last 5 runs on" in page  # the page's baseline
    assert '<tr class="reg"><td class="t">test_a.py::test_fast</td><td>busy_pct' in page  # the gate's regression
    fast = page[page.index("<td>test_a.py::test_fast</td>"):]
    fast = fast[: fast.index("</tr>")]
    assert "busy_pct over 6 runs, oldest first: 50.000 … now 20.000" in fast and 'fill="#e15759"' in fast


def test_history_runs_limits_the_runs_compared_with(pytester):
    noisy_history(pytester, [50.0, 56.0, 44.0, 55.0, 45.0, 30.0, 30.0, 30.0])
    plant(pytester, test_fast=busy(30.0), test_slow=busy(50.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-history-runs", "3",
                 "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0, output(result)  # the last 3 runs: 30 30 30
    result.stdout.fnmatch_lines(["no GPU regressions against history*last 3 runs*: 2 tests compared"])
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0, output(result)  # the last 5: 55 45 30 30 30, median 30


def test_a_history_with_one_run_warns_and_does_not_gate(pytester):
    noisy_history(pytester, [50.0])
    plant(pytester, test_fast=busy(1.0), test_slow=busy(1.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["WARNING: the run history .gpu_util/history.sqlite has 1 earlier run(s) of these "
                                 "tests on *: a test is gated once it has 3; not compared"])
    strict = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "--gpu-util-compare-strict")
    assert strict.ret == 1, output(strict)


def test_no_history_yet_warns(pytester):
    pytester.makepyfile(test_a=TWO_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["WARNING: no run history yet at .gpu_util/history.sqlite: not compared"])


def test_compare_history_keeps_the_test_path_after_it(pytester):
    pytester.makepyfile(test_a=TWO_TESTS, test_other="def test_never():\n    raise AssertionError\n")
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "history", "test_a.py")
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=2)
    result = run(pytester, "--gpu-util", "--gpu-util-history", "test_a.py")  # a bare --gpu-util-history too
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=2)
    assert db_of(pytester).exists()


def test_the_ini_key_names_the_history(pytester, capsys):
    pytester.makepyfile(test_a=TWO_TESTS)
    pytester.makeini("[pytest]\ngpu_util_history = ci/gpu.sqlite\n")
    assert run(pytester, "--gpu-util").ret == 0
    assert len(history_json(pytester.path / "ci" / "gpu.sqlite", capsys)["runs"]) == 1


def test_a_run_already_in_the_history_is_not_compared_with_itself(five_runs, monkeypatch):
    monkeypatch.setenv("SLOW", "5")
    assert run(five_runs, "--gpu-util-history").ret == 0  # the slow run joins the history (its 6th run)
    done = gpuutil("compare", "--history", ".gpu_util/history.sqlite", ".gpu_util/gpu_util.json", "--fail",
                   "kernel_bench.median:50%", cwd=five_runs.path)
    assert done.returncode == 1, done.stdout + done.stderr  # against the 5 runs before it, not itself
    assert "test_kb.py::test_kb" in done.stdout and "last 5 runs" in done.stdout
    done = gpuutil("report", ".gpu_util/gpu_util.json", "--history", ".gpu_util/history.sqlite", cwd=five_runs.path)
    assert done.returncode == 0, done.stderr
    page = (five_runs.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert "kernel_bench[sleepy].median over 6 runs, oldest first" in page  # 5 earlier and this one, not 7


def test_the_html_report_draws_a_trend_line_per_test(five_runs):
    result = run(five_runs, "--gpu-util-history", "--gpu-util-html")
    assert result.ret == 0, output(result)
    page = (five_runs.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert page.count('<svg class="spark"') == 2 and '<th title="the test' in page
    assert "kernel_bench[sleepy].median over 6 runs, oldest first" in page


# -- a history that cannot be used never costs the run -------------------------------------------------
def foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()


def newer(path: Path) -> None:
    with open_history(path, create=True):
        pass
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.write_bytes(os.urandom(4096)), "not an SQLite database (corrupt, or another kind of file)"),
    (foreign, "not a pytest-gpuutil history (an SQLite database of another program: no application id, tables users)"),
    (newer, f"written by a newer pytest-gpuutil (history schema {SCHEMA_VERSION + 1}; this one reads {SCHEMA_VERSION})"),
])
@pytest.mark.parametrize("words", [["--gpu-util-history"], ["--gpu-util-compare", "history"],
                                   ["--gpu-util-history", "--gpu-util-compare", "history", "--gpu-util-html"]])
def test_a_bad_history_is_one_error_line_and_the_run_files_are_still_written(pytester, make, problem, words):
    pytester.makepyfile(test_a=TWO_TESTS)
    db = db_of(pytester)
    db.parent.mkdir()
    make(db)
    before = db.read_bytes()
    result = run(pytester, "--gpu-util", *words)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output(result)
    result.assert_outcomes(passed=2)
    errors = [line for line in result.stdout.lines if line.startswith("ERROR: ")]
    option = "--gpu-util-compare" if "--gpu-util-compare" in words else "--gpu-util-history"
    assert errors == [f"ERROR: {option}: {db}: {problem}"]
    assert "Traceback" not in output(result)
    assert (pytester.path / ".gpu_util" / "gpu_util.json").exists()
    assert db.read_bytes() == before  # left as it was


# -- CI shards ------------------------------------------------------------------------------------------
def gpuutil(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpuutil", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_two_shards_merge_into_one_run_that_report_compare_and_history_take(pytester, capsys):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS, test_kb=KB_TESTS)
    plant(pytester, test_fast=busy(50.0), test_slow=busy(20.0))
    assert run(pytester, "--gpu-util", "--gpu-util-dir", "shard1", "test_a.py").ret == 0
    assert run(pytester, "--gpu-util", "--gpu-util-dir", "shard2", "test_kb.py").ret == 0
    done = gpuutil("merge", "shard1/gpu_util.json", "shard2/gpu_util.json", "-o", "merged/gpu_util.json",
                   cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "merged 2 runs into merged/gpu_util.json (4 tests)\n" and done.stderr == ""
    merged = json.loads((pytester.path / "merged" / "gpu_util.json").read_text())
    assert sorted(t["test"] for t in merged["tests"]) == [
        "test_a.py::test_fast", "test_a.py::test_slow", "test_kb.py::test_kb", "test_kb.py::test_steady"]

    done = gpuutil("report", "merged/gpu_util.json", cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    page = (pytester.path / "merged" / "report.html").read_text(encoding="utf-8")
    assert "test_a.py::test_fast" in page and "test_kb.py::test_steady" in page
    done = gpuutil("compare", "shard1/gpu_util.json", "merged/gpu_util.json", "--fail", "busy_pct:5", cwd=pytester.path)
    assert done.returncode == 0 and done.stdout.startswith("no regressions: 2 tests compared"), done.stdout

    for _ in range(3):
        done = gpuutil("history", "--db", "h.sqlite", "--add", "merged/gpu_util.json", cwd=pytester.path)
        assert done.returncode == 0, done.stderr
    plant(pytester, test_fast=busy(30.0), test_slow=busy(20.0))  # the next run of shard 1: test_fast slower
    assert run(pytester, "--gpu-util", "--gpu-util-dir", "shard1b", "test_a.py").ret == 0
    done = gpuutil("compare", "--history", "h.sqlite", "shard1b/gpu_util.json", "--fail", "busy_pct:5",
                   cwd=pytester.path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 regressions in 1 of 2 tests compared against the history h.sqlite" in done.stdout, done.stdout
    assert len(history_json(pytester.path / "h.sqlite", capsys)["runs"]) == 3


def test_a_shard_merged_with_itself_exits_2_with_one_line(pytester):
    pytester.makepyfile(test_a=TWO_TESTS)
    assert run(pytester, "--gpu-util").ret == 0
    done = gpuutil("merge", ".gpu_util/gpu_util.json", ".gpu_util/gpu_util.json", "-o", "out.json", cwd=pytester.path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: .gpu_util/gpu_util.json: test test_a.py::test_fast is twice in the list "
                           "(each test may come from one shard only)\n")
