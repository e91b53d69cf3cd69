"""``gpuutil report RUN.json [--baseline B.json] [-o OUT]``: the HTML report from saved files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_gpuutil import cli
from pytest_gpuutil.cli import report as report_cli
from pytest_gpuutil.records import TestRecord

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "git_commit": "abc"}


def rec(test: str, **fields) -> TestRecord:
    values = dict(busy_pct=80.0, mm_conv_pct=60.0, gpu_busy_ms=100.0, kernel_count=50,
                  categories={"gemm": {"time_us": 60000.0, "share_of_busy": 60.0, "pct_of_window": 48.0, "count": 40}})
    values.update(fields)
    return TestRecord(test=test, outcome="passed", **values)


def write_run(path: Path, records: list[TestRecord], **extra) -> Path:
    doc = {"format": "pytest-gpuutil", "version": 1, "machine_info": H100, "created": "2026-11-22T10:00:00+00:00",
           "tests": [r.to_dict() for r in records], **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def current(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run" / "gpu_util.json", [rec("t.py::test_a", busy_pct=60.0), rec("t.py::test_b")],
                     totals={"tests": 2, "busy_pct": 70.0, "gpu_busy_ms": 200.0}, thresholds={"t.py::test_b": "failed"})


def test_writes_beside_the_run_by_default(current: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cli.main([str(current)]) == 0
    out, err = capsys.readouterr()
    page = (current.parent / "report.html").read_text(encoding="utf-8")
    assert out == f"wrote {current.parent / 'report.html'} (2 tests)\n" and err == ""
    assert "t.py::test_a" in page and "t.py::test_b" in page and "<td>limits failed</td>" in page
    assert "70.0%" in page  # the document's own totals


def test_with_a_baseline_and_an_output_path(tmp_path: Path, current: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_run(tmp_path / "base.json", [rec("t.py::test_a"), rec("t.py::test_b")])
    out_path = tmp_path / "site" / "gpu.html"
    assert report_cli.main([str(current), "--baseline", str(base), "-o", str(out_path)]) == 0
    assert capsys.readouterr().out.endswith(f"(2 tests; 1 regression(s) against {base})\n")
    page = out_path.read_text(encoding="utf-8")
    assert '<tr class="reg"><td class="t">t.py::test_a</td><td>busy_pct' in page and "-20.0 pts" in page
    assert report_cli.main([str(current), "--baseline", str(base), "--fail", "busy_pct:30", "-o", str(out_path)]) == 0
    assert "no regressions" in out_path.read_text(encoding="utf-8")


def test_trace_links_from_the_runs_traces_folder(current: Path) -> None:
    (current.parent / "traces").mkdir()
    (current.parent / "traces" / "t.py_test_a.json.gz").write_bytes(b"")
    assert report_cli.main([str(current), "-o", str(current.parent / "sub" / "r.html")]) == 0
    assert '"tr":"../traces/t.py_test_a.json.gz"' in (current.parent / "sub" / "r.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("{not json", "not valid JSON"),
    ('{"format": "other", "version": 1, "tests": []}', "not a pytest-gpuutil run file"),
    ('{"format": "pytest-gpuutil", "version": 1, "tests": [{"test": "t", "busy_pct": "high"}]}', "busy_pct"),
])
def test_a_bad_or_missing_json_is_one_error_line(tmp_path: Path, current: Path, capsys: pytest.CaptureFixture[str],
                                                 content, problem) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for argv in ([str(bad)], [str(current), "--baseline", str(bad)]):
        assert report_cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1
        assert err.startswith(f"error: {bad}: ") and problem in err
    assert not (tmp_path / "report.html").exists()


def test_usage_errors(current: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cli.main([]) == 2
    assert capsys.readouterr().err.startswith("error: the following arguments are required: RUN.json")
    assert report_cli.main([str(current), "--fail", "busy:5"]) == 2
    assert capsys.readouterr().err.startswith("error: --fail: bad fail expression 'busy:5'")
    (tmp_path / "taken").mkdir()
    assert report_cli.main([str(current), "-o", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'taken'}: cannot write") and len(err.splitlines()) == 1


def test_machine_mismatch_is_a_warning(tmp_path: Path, current: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {"gpu_model": "NVIDIA H200", "gpu_count": 1}
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"format": "pytest-gpuutil", "version": 1, "machine_info": other,
                                "tests": [rec("t.py::test_a").to_dict()]}))
    assert report_cli.main([str(current), "--baseline", str(base)]) == 0
    assert "warning: machine ids differ" in capsys.readouterr().err


def test_the_gpuutil_command_dispatches(current: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(current), "-o", str(current.parent / "x.html")]) == 0
    assert (current.parent / "x.html").is_file()
    assert cli.main(["--help"]) == 0
    assert "report RUN.json" in capsys.readouterr().out


def test_as_a_command(pytester: pytest.Pytester, current: Path) -> None:
    """A real process: one line on stderr and exit 2 for a missing file; a page for a good one."""
    result = pytester.run(sys.executable, "-m", "pytest_gpuutil", "report", str(pytester.path / "missing.json"))
    assert result.ret == 2
    assert result.stderr.lines == [f"error: {pytester.path / 'missing.json'}: no such file"] and result.stdout.lines == []
    result = pytester.run(sys.executable, "-m", "pytest_gpuutil", "report", str(current), "-o", "page.html")
    assert result.ret == 0 and (pytester.path / "page.html").stat().st_size > 5000
