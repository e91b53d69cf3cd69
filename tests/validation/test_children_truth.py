"""CPU tests of validation/children_truth.py's bookkeeping: truth files, case rows, the report."""
from __future__ import annotations

import json
from pathlib import Path

from validation.children_truth import case_row, main, table, truth_ms


def run_of(**records: dict) -> dict:
    return {"records": records}


def test_a_case_is_within_five_percent_of_the_summed_truth(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"truth_ms": 60.0}))
    (tmp_path / "b.json").write_text(json.dumps({"truth_ms": 40.0}))
    assert truth_ms(tmp_path, "a", "b") == 100.0 and truth_ms(tmp_path, "a", "missing") is None
    kid = {"pid": 7, "program": "python work.py", "gpu_ms": 104.0, "parent": False, "note": ""}
    row = case_row("spawn", run_of(test_x={"gpu_busy_ms": 104.0, "processes": [kid]}), "test_x", 100.0)
    assert row["ok"] and row["error_pct"] == 4.0 and row["processes"] == [kid]
    assert not case_row("spawn", run_of(test_x={"gpu_busy_ms": 106.0}), "test_x", 100.0)["ok"]
    assert not case_row("spawn", run_of(), "test_x", 100.0)["ok"]  # no record: not a pass
    assert case_row("nested", run_of(test_n={"gpu_busy_ms": 0.0}), "test_n", 0.0, expect_zero=True)["ok"]
    assert not case_row("nested", run_of(test_n={"gpu_busy_ms": 50.0}), "test_n", 0.0, expect_zero=True)["ok"]


def test_the_report_prints_the_table_and_copies_the_results(tmp_path: Path, capsys) -> None:
    rows = [case_row("subprocess", run_of(test_s={"gpu_busy_ms": 99.0, "processes": [
        {"program": "python work.py", "gpu_ms": 99.0, "note": ""}]}), "test_s", 100.0)]
    doc = {"cases": rows, "checks": [{"check": "order", "ok": True}], "runs": {"main": {"rc": 0, "s": 30.0, "tail": "x"}}}
    (tmp_path / "children.json").write_text(json.dumps(doc))
    assert main(["--report", str(tmp_path / "children.json"), "--results-dir", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    assert "| subprocess | 99.00 | 100.00 | -1.00 % | yes | python work.py 99.0 |" in out
    assert "| check: order | | | | yes | |" in out and out.count("\n") == len(table(doc).splitlines()) + 1
    copied = json.loads((tmp_path / "res" / "children.json").read_text())
    assert copied["runs"] == {"main": {"rc": 0, "s": 30.0}} and copied["cases"] == rows
