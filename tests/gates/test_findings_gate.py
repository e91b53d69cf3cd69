"""The findings gate: ``findings:N`` and ``findings.RULE:N`` against a baseline's records."""
from __future__ import annotations

import pytest

from pytest_gpuutil.gates.regression import compare_records, parse_fail_exprs, regression_rows
from pytest_gpuutil.records import TestRecord


def rec(test: str, *rules: str, looked: bool = True) -> TestRecord:
    return TestRecord(test, "passed", busy_pct=50.0,
                      findings=tuple({"rule": r, "severity": "low", "message": "", "fix": ""} for r in rules) if looked else None)


BASE = [rec("a", "gpu-idle"), rec("b"), rec("c", "host-sync"), rec("d", looked=False)]
NOW = [rec("a", "gpu-idle"), rec("b", "launch-bound", "fp32-matmul"), rec("c"), rec("d", "host-sync")]


def test_new_findings_are_regressions_and_old_or_gone_ones_are_not() -> None:
    found = compare_records(BASE, NOW, parse_fail_exprs("findings:0")).regressions
    assert [(r.test, r.metric, r.baseline, r.current) for r in found] == [
        ("b", "findings: new launch-bound, fp32-matmul", 0.0, 2.0)]  # d: its baseline did not look for findings
    assert regression_rows(found) == [["b", "findings: new launch-bound, fp32-matmul", "0", "2", "+2", "+0"]]
    assert compare_records(BASE, NOW, parse_fail_exprs("findings:1")).regressions[0].test == "b"
    assert compare_records(BASE, NOW, parse_fail_exprs("findings:2")).regressions == ()


def test_one_rules_gate_counts_that_rule_only() -> None:
    found = compare_records(BASE, NOW, parse_fail_exprs("findings.fp32-matmul:0")).regressions
    assert [(r.test, r.metric) for r in found] == [("b", "findings: new fp32-matmul")]
    assert compare_records(BASE, NOW, parse_fail_exprs("findings.gpu-idle:0")).regressions == ()
    assert parse_fail_exprs("busy_pct:5, findings.host-sync:0")[1].text == "findings.host-sync:0"


def test_findings_off_on_either_side_compares_nothing() -> None:
    off = [rec(t.test, looked=False) for t in NOW]
    assert compare_records(BASE, off, parse_fail_exprs("findings:0")).regressions == ()


@pytest.mark.parametrize("text,message", [
    ("findings:10%", "findings takes a number of new findings, not a percentage"),
    ("findings.gpu_idle:0", "unknown findings rule 'gpu_idle'; rules: pageable-memcpy, host-sync"),
    ("finding:0", "unknown metric 'finding'; metrics: busy_pct"),
])
def test_bad_findings_expressions_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_fail_exprs(text)
