"""``--gpu-util-html``: real pytest runs write the HTML report at the session's end.

The runs use the synthetic GPU (tests/helpers SYNTHETIC_CONFTEST) so records have GPU numbers
without CUDA, or plant numbers through the record hook (PLANT_CONFTEST) for a baseline regression.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from tests.helpers import (
    PLANT_CONFTEST,
    SYNTHETIC_CONFTEST,
    busy,
    output,
    plant,
    read_json,
    run,
)

pytestmark = pytest.mark.usefixtures("warm_torch")

TESTS = """
import pytest

@pytest.mark.parametrize("i", range(3))
def test_mm(gpu, i):
    gpu.run("nvjet_sm90_tst_256x128", 100_000 * (i + 1))

def test_attention(gpu):
    gpu.run("flash_fwd_kernel", 200_000, stream=7)
    gpu.run("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50_000, stream=8)

@pytest.mark.gpu_util(min_busy_pct=99.9)
def test_limited(gpu):
    gpu.run("nvjet_small", 5_000)

def test_idle():
    pass
"""
IDS = ["test_mm[0]", "test_mm[1]", "test_mm[2]", "test_attention", "test_limited", "test_idle"]


def table_rows(page: str) -> list[str]:
    body = page[page.index('<table id="tests">'):]
    body = body[: body.index("</section>")]  # the table and its <template> of more rows
    return [html.unescape(m) for m in re.findall(r'<tr tabindex="0"[^>]*><td>(.*?)</td>', body)]


def details(page: str) -> dict[str, dict]:
    data = json.loads(re.search(r'id="gu-data">(.*?)</script>', page, re.S).group(1))
    return dict(zip(table_rows(page), data["tests"]))


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_work=TESTS)
    return pytester


def test_the_report_lands_in_the_output_folder(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-traces", "all")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["wrote .gpu_util/gpu_util.csv, .gpu_util/gpu_util.json,*", "*.gpu_util/timelines.json.gz, .gpu_util/report.html"])
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert sorted(table_rows(page)) == sorted(f"test_work.py::{name}" for name in IDS)
    assert table_rows(page)[0] == "test_work.py::test_mm[2]"  # the most GPU time first
    assert '<svg class="bar"' in page and "attention" in page
    doc = read_json(suite.path / ".gpu_util" / "gpu_util.json")
    assert doc["thresholds"] == {"test_work.py::test_limited": "failed"}
    assert "<td>limits failed</td>" in page
    found = details(page)
    assert found["test_work.py::test_attention"]["tr"] == "traces/test_work.py_test_attention.json.gz"
    assert (suite.path / ".gpu_util" / found["test_work.py::test_attention"]["tr"]).is_file()


def test_a_path_of_ones_own(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "--gpu-util-html=reports/gpu.html", "--gpu-util-traces=all", "-k", "attention")
    result.assert_outcomes(passed=1, deselected=5)
    page = (suite.path / "reports" / "gpu.html").read_text(encoding="utf-8")
    assert table_rows(page) == ["test_work.py::test_attention"]
    assert details(page)["test_work.py::test_attention"]["tr"] == "../.gpu_util/traces/test_work.py_test_attention.json.gz"
    assert not (suite.path / ".gpu_util" / "report.html").exists()


def test_the_ini_key(suite: pytest.Pytester) -> None:
    suite.makeini("[pytest]\ngpu_util_html = ci/gpu_report.html\n")
    run(suite, "--gpu-util", "-k", "mm").assert_outcomes(passed=3, deselected=3)
    assert len(table_rows((suite.path / "ci" / "gpu_report.html").read_text(encoding="utf-8"))) == 3


def test_the_option_alone_turns_measuring_on_and_the_header_says_so(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util-html", "reports/alone.html", "-k", "attention")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["gpu-util: on (turned on by --gpu-util-html)", "collected 6 items / 5 deselected*"])
    assert table_rows((suite.path / "reports" / "alone.html").read_text(encoding="utf-8")) == ["test_work.py::test_attention"]
    result.stdout.fnmatch_lines(["wrote .gpu_util/gpu_util.csv, .gpu_util/gpu_util.json,*", "*.gpu_util/timelines.json.gz, reports/alone.html"])
    bare = run(suite, "--gpu-util-html", "-k", "idle")  # no value: DIR/report.html
    bare.stdout.fnmatch_lines(["gpu-util: on (turned on by --gpu-util-html)"])
    assert (suite.path / ".gpu_util" / "report.html").is_file()


def test_the_ini_key_alone_does_not_turn_measuring_on(suite: pytest.Pytester) -> None:
    suite.makeini("[pytest]\ngpu_util_html = ci/gpu_report.html\n")
    result = run(suite, "-k", "idle")
    result.assert_outcomes(passed=1, deselected=5)
    assert "gpu-util: on" not in result.stdout.str() and "GPU utilization" not in result.stdout.str()
    assert not (suite.path / "ci").exists() and not (suite.path / ".gpu_util" / "gpu_util.json").exists()


def test_no_option_no_report(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "-k", "idle").assert_outcomes(passed=1, deselected=5)
    assert (suite.path / ".gpu_util" / "gpu_util.json").is_file()
    assert not (suite.path / ".gpu_util" / "report.html").exists()


def test_a_report_that_cannot_be_written_is_one_usage_error(suite: pytest.Pytester) -> None:
    (suite.path / "taken").mkdir()
    result = run(suite, "--gpu-util", "--gpu-util-html=taken", "-k", "idle")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in output(result).splitlines() if "--gpu-util-html" in line]
    assert len(errors) == 1 and errors[0].startswith("ERROR: --gpu-util-html: could not write")
    assert "Traceback" not in output(result)
    assert (suite.path / ".gpu_util" / "gpu_util.json").is_file()  # the run's files are still written


def test_under_xdist_the_controller_writes_it_with_workers(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = run(suite, "-n", "2", "--gpu-util", "--gpu-util-html")
    result.assert_outcomes(passed=5, failed=1)
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert sorted(table_rows(page)) == sorted(f"test_work.py::{name}" for name in IDS)
    assert "Busy time per worker" in page
    assert {d.get("w") for d in details(page).values()} <= {"gw0", "gw1"}


def test_a_baseline_regression_is_shown(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a="def test_fast():\n    pass\n\ndef test_slow():\n    pass\n")
    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0))
    assert run(pytester, "--gpu-util", "--gpu-util-save", "main").ret == 0
    plant(pytester, test_fast=busy(30.0), test_slow=busy(48.0))
    result = run(pytester, "--gpu-util", "--gpu-util-compare=main", "--gpu-util-html")
    assert result.ret == 1  # the gate still decides the exit status
    page = (pytester.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    section = page[page.index('id="baseline"'):page.index('id="session"')]
    assert "1 regression(s) in 1 test(s)" in section
    assert re.search(r'<tr class="reg"><td class="t">test_a.py::test_fast</td><td>busy_pct.*?→ 30</td>'
                     r'<td class="n">-20.0 pts</td><td class="n">-5 pts</td>', section)
    assert "main.json" in section and "test_a.py::test_slow" not in section  # within limits: listed on demand
    assert details(page)["test_a.py::test_slow"]["cmp"][0][:4] == ["busy_pct", 50.0, 48.0, "-2.0 pts"]


def test_help_lists_the_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--gpu-util-html*PATH*", "*self-contained HTML report*"])


def test_the_file_is_self_contained(suite: pytest.Pytester, tmp_path: Path) -> None:
    run(suite, "--gpu-util", "--gpu-util-html").assert_outcomes(passed=5, failed=1)
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"https?://|<link |<script[^>]* src=|url\(", page)
