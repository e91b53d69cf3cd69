"""pytest-html interop: its report's rows gain GPU ms / busy % columns and an extra with figures and bar.

pytest-html builds a test's row when the test's teardown report is logged; the plugin then builds
every record at its own test's teardown (records are otherwise flushed in batches), so each row
gets its own test's figures, in a plain run and under xdist alike.
"""
from __future__ import annotations

import html
import json
import re

import pytest

from tests.helpers import SYNTHETIC_CONFTEST, run

pytest.importorskip("pytest_html")
pytestmark = pytest.mark.usefixtures("warm_torch")

TESTS = """
import pytest

@pytest.mark.parametrize("i", range(4))
def test_mm(gpu, i):
    gpu.run("nvjet_sm90_tst_256x128", 100_000 * (i + 1))

def test_attention(gpu):
    gpu.run("flash_fwd_kernel", 200_000)

def test_fails(gpu):
    gpu.run("nvjet_sm90_tst_256x128", 50_000)
    assert False
"""


def rows_of(path) -> dict[str, dict]:
    """pytest-html 4's test data (the JSON blob its page renders from), by test id."""
    text = path.read_text(encoding="utf-8")
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="(.*?)"', text, re.S).group(1)))
    return {test: entries[-1] for test, entries in blob["tests"].items()}


def gpu_ms(row: dict) -> str:
    return re.search(r'<td class="col-gpu-ms">(.*?)</td>', "".join(row["resultsTableRow"])).group(1)


@pytest.mark.parametrize("xdist", [False, True], ids=["plain", "xdist"])
def test_each_row_gets_its_own_figures(pytester: pytest.Pytester, xdist: bool) -> None:
    if xdist:
        pytest.importorskip("xdist")
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_work=TESTS)
    args = ["-n", "2"] if xdist else []
    result = run(pytester, *args, "--gpu-util", "--html=report.html", "--self-contained-html")  # default batched flushes
    result.assert_outcomes(passed=5, failed=1)
    rows = rows_of(pytester.path / "report.html")
    assert len(rows) == 6
    assert [gpu_ms(rows[f"test_work.py::test_mm[{i}]"]) for i in range(4)] == ["0.100", "0.200", "0.300", "0.400"]
    assert gpu_ms(rows["test_work.py::test_fails"]) == "0.050"
    extra = [e for e in rows["test_work.py::test_attention"]["extras"] if e["format_type"] == "html"]
    assert len(extra) == 1
    assert "GPU utilization" in extra[0]["content"] and "GPU 0.200 ms" in extra[0]["content"]
    assert "<svg" in extra[0]["content"] and "attention" in extra[0]["content"]
    header = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "GPU ms</th>" in header and "GPU busy %</th>" in header
    tests = [r["test"] for r in json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["tests"]]
    assert sorted(tests) == sorted(rows)  # each record once in the run, though it also rode on its report


def test_without_gpu_util_the_columns_stay_empty(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = run(pytester, "--html=report.html")
    result.assert_outcomes(passed=1)
    row = rows_of(pytester.path / "report.html")["test_plain.py::test_a"]
    assert gpu_ms(row) == "" and not [e for e in row["extras"] if e["format_type"] == "html"]


def test_not_registered_without_a_pytest_html_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + """

def pytest_sessionfinish(session):
    print("interop:", session.config.pluginmanager.get_plugin("gpuutil-pytest-html") is not None)
""")
    pytester.makepyfile(test_work=TESTS)
    result = run(pytester, "--gpu-util", "-s", "-k", "attention")
    result.stdout.fnmatch_lines(["*interop: False*"])


def test_a_pytest_html_older_than_4_1_is_named_in_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-html 4.0 renders a row before the record arrives: the columns would stay empty, so the run says so."""
    from pytest_gpuutil.report.html_report import pytest_html_too_old

    assert pytest_html_too_old() == ""  # the installed one (the test extra asks for 4.1 or later)
    info = tmp_path / "pytest_html-4.0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-html\nVersion: 4.0.2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pytest_html_too_old() == ("the pytest-html report gets no GPU columns: they need pytest-html 4.1 or later "
                                     "(4.0.2 here)")
