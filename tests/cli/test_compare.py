from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuutil.cli import compare as compare_cli
from pytest_gpuutil.records import TestRecord

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "host": "a", "git_commit": "abc"}


def write_run(path: Path, records: list[TestRecord], machine_info=None) -> Path:
    doc = {
        "format": "pytest-gpuutil",
        "version": 1,
        "machine_info": H100 if machine_info is None else machine_info,
        "created": "2026-11-21T23:05:01",
        "tests": [r.to_dict() for r in records],
    }
    path.write_text(json.dumps(doc))
    return path


def rec(test: str, **fields) -> TestRecord:
    values = dict(busy_pct=80.0, mm_conv_pct=60.0, gpu_busy_ms=100.0, kernel_count=50)
    values.update(fields)
    return TestRecord(test=test, outcome="passed", **values)


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return write_run(tmp_path / "base.json", [rec("t.py::test_a"), rec("t.py::test_b")])


def test_no_regressions(tmp_path, baseline, capsys):
    current = write_run(tmp_path / "cur.json", [rec("t.py::test_a", busy_pct=77.0),
                                                rec("t.py::test_b", gpu_busy_ms=109.0)])
    assert compare_cli.main([str(baseline), str(current)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("no regressions: 2 tests compared")
    assert "busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%" in out
    assert err == ""


def test_default_exprs_catch_regressions(tmp_path, baseline, capsys):
    current = write_run(tmp_path / "cur.json", [
        rec("t.py::test_a", busy_pct=72.0),
        rec("t.py::test_b", gpu_busy_ms=125.0, mm_conv_pct=50.0),
        rec("t.py::test_new", busy_pct=1.0),
    ])
    assert compare_cli.main([str(baseline), str(current)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["test", "metric", "baseline", "now", "change", "limit"]
    body = "\n".join(lines[2:])
    assert "t.py::test_a" in body and "-8.0 pts" in body
    assert "+25.0%" in body and "-10.0 pts" in body
    assert "t.py::test_new" not in body
    assert lines[-1].startswith("3 regressions in 2 of 2 tests compared (1 without baseline")
    assert err == ""


def test_explicit_fail_exprs(tmp_path, baseline, capsys):
    current = write_run(tmp_path / "cur.json", [rec("t.py::test_a", kernel_count=60),
                                                rec("t.py::test_b", busy_pct=50.0)])
    argv = [str(baseline), str(current), "--fail", "kernel_count:5"]
    assert compare_cli.main(argv) == 1
    out, _ = capsys.readouterr()
    assert "kernel_count" in out and "+10" in out
    assert "busy_pct" not in out.splitlines()[2]  # only the requested gate
    argv = [str(baseline), str(current), "--fail", "kernel_count:20", "--fail", "wall_ms:1"]
    assert compare_cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("no regressions: 2 tests compared")


def test_bad_fail_expr_is_one_line_error(tmp_path, baseline, capsys):
    assert compare_cli.main([str(baseline), str(baseline), "--fail", "busy:5"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: --fail: bad fail expression 'busy:5': unknown metric")
    assert "busy_pct" in err


def test_missing_file(tmp_path, baseline, capsys):
    missing = tmp_path / "nope.json"
    assert compare_cli.main([str(baseline), str(missing)]) == 2
    _, err = capsys.readouterr()
    assert err == f"error: {missing}: no such file\n"


def test_corrupt_file(tmp_path, baseline, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pytest-gpuutil", "version": 1, "tests": [{"test": 1}]}')
    assert compare_cli.main([str(bad), str(baseline)]) == 2
    _, err = capsys.readouterr()
    assert err.startswith(f"error: {bad}: tests[0].test")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_missing_argument_is_one_line(baseline, capsys):
    assert compare_cli.main([str(baseline)]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1
    assert err.startswith("error: ") and "CURRENT.json" in err


def test_help_exits_zero(capsys):
    assert compare_cli.main(["--help"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("usage: gpuutil compare")
    assert "busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%" in " ".join(out.split())


def test_machine_mismatch_warns_but_compares(tmp_path, baseline, capsys):
    current = write_run(tmp_path / "cur.json", [rec("t.py::test_a", busy_pct=10.0)],
                        machine_info={"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 1})
    assert compare_cli.main([str(baseline), str(current)]) == 1
    out, err = capsys.readouterr()
    assert err == ("warning: machine ids differ (baseline NVIDIA_H100_80GB_HBM3-x1, current "
                   "NVIDIA_A100-SXM4-80GB-x1); comparing anyway\n")
    assert "t.py::test_a" in out


def test_no_gpu_runs_compare_clean(tmp_path, capsys):
    cpu = [TestRecord(test="t.py::test_a", outcome="passed", wall_ms=3.0, note="no CUDA device")]
    base = write_run(tmp_path / "b.json", cpu, machine_info={"gpu_model": None})
    cur = write_run(tmp_path / "c.json", cpu, machine_info={"gpu_model": None})
    assert compare_cli.main([str(base), str(cur)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("no regressions: 1 tests compared")
    assert err == ""
