"""CPU tests of validation/examples_truth.py: the story's checks on a synthetic gpu_util.json, and the
script as a whole on this machine (no CUDA: the examples are skipped, so the story fails to show)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from validation.examples_truth import (
    BUSY_POINTS,
    check_story,
    example_rows,
    function_name,
    load_story,
    report,
)

ROOT = Path(__file__).resolve().parents[2]
FILE = "examples/test_gpu_workloads.py"
PAIRS, HEALTHY = load_story()


def record(name: str, busy: float | None = 90.0, gpu_ms: float | None = 10.0, rules: tuple[str, ...] = (),
           outcome: str = "passed", looked: bool = True) -> dict:
    findings = [{"rule": r, "severity": "high", "message": "m", "fix": "f", "impact_pct": 50.0, "evidence": {}}
                for r in rules]
    return {"test": f"{FILE}::{name}", "outcome": outcome, "busy_pct": busy, "gpu_busy_ms": gpu_ms, "wall_ms": 20.0,
            "findings": findings if looked else None, "note": "" if looked else "the fixture measured it"}


def story_run() -> dict:
    """A gpu_util.json where the story holds: each problem its rule, each fix none and its figure moved."""
    tests = []
    for pair in PAIRS:
        if pair.moves == "busy_pct":
            tests += [record(pair.problem, busy=30.0, rules=(pair.rule,)), record(pair.fix, busy=95.0)]
        else:
            tests += [record(pair.problem, busy=98.0, gpu_ms=40.0, rules=(pair.rule,)),
                      record(pair.fix, busy=97.0, gpu_ms=6.0)]
    tests += [record(name, looked=name == "test_matmul_bf16") for name in HEALTHY]
    return {"tests": tests}


def failed(doc: dict) -> dict[str, str]:
    return {c.name: c.detail for c in check_story(example_rows(doc), PAIRS, HEALTHY) if not c.holds}


def test_the_story_is_declared_once_in_the_examples_conftest():
    assert {p.rule for p in PAIRS} == {"pageable-memcpy", "fp32-matmul", "launch-bound", "host-sync"}
    assert all(p.moves in ("busy_pct", "gpu_busy_ms") for p in PAIRS)
    source = (ROOT / FILE).read_text(encoding="utf-8")
    for name in [n for p in PAIRS for n in (p.problem, p.fix)] + list(HEALTHY):
        assert f"def {name}(" in source, name  # every declared example exists


def test_rows_carry_the_figures_and_the_rule_ids():
    rows = example_rows({"tests": [record("test_a", rules=("host-sync", "gpu-idle")), record("test_b", looked=False)]})
    assert rows[0]["test"] == f"{FILE}::test_a" and rows[0]["findings"] == ["host-sync", "gpu-idle"]
    assert rows[0]["busy_pct"] == 90.0 and rows[0]["gpu_busy_ms"] == 10.0 and rows[0]["findings_looked_for"]
    assert rows[1]["findings"] == [] and not rows[1]["findings_looked_for"]
    assert function_name(f"{FILE}::test_x[1-y::z]") == "test_x" and function_name("test_x") == "test_x"
    assert example_rows({}) == []


def test_a_run_that_tells_the_story_passes_every_check():
    checks = check_story(example_rows(story_run()), PAIRS, HEALTHY)
    assert all(c.holds for c in checks), [c for c in checks if not c.holds]
    assert len(checks) == 2 + 3 * len(PAIRS) + len(HEALTHY)


def test_each_way_the_story_can_fail_is_named():
    pageable, fp32, launch, sync = PAIRS
    doc = story_run()
    by = {function_name(t["test"]): t for t in doc["tests"]}
    by[pageable.problem]["findings"].append(dict(by[pageable.problem]["findings"][0], rule="host-sync"))  # one too many
    by[fp32.problem]["findings"] = []  # the problem not found
    by[launch.fix]["findings"] = [{"rule": "gpu-idle"}]  # the fix flagged
    by[sync.fix]["busy_pct"] = by[sync.problem]["busy_pct"] + BUSY_POINTS - 1  # moved, but not visibly
    by[fp32.fix]["gpu_busy_ms"] = by[fp32.problem]["gpu_busy_ms"] * 0.9
    by["test_metric_table_matmul_sizes"]["findings"] = [{"rule": "gpu-idle"}]
    by["test_kernel_bench_matmul"]["outcome"] = "failed"
    doc["tests"].remove(by["test_gpu_trace_block"])
    doc["tests"].append(record("test_new_example"))
    got = failed(doc)
    assert got == {
        f"{pageable.problem}: exactly pageable-memcpy": "pageable-memcpy, host-sync",
        f"{fp32.problem}: exactly fp32-matmul": "none",
        f"{launch.fix}: no finding": "gpu-idle",
        f"{sync.fix}: busy % up against {sync.problem}": "30.0 % -> 39.0 % (+9.0 points; at least +10 wanted)",
        f"{fp32.fix}: GPU ms down against {fp32.problem}": "40.00 -> 36.00 ms (0.90x; at most 0.8x wanted)",
        "test_metric_table_matmul_sizes: no finding": "gpu-idle",
        "every declared example ran and passed": "missing: test_gpu_trace_block; not passed: test_kernel_bench_matmul",
        "every example is declared in examples/conftest.py": "undeclared: test_new_example",
    }


def test_a_figure_that_was_not_measured_fails_its_check():
    doc = story_run()
    launch = PAIRS[2]
    next(t for t in doc["tests"] if t["test"].endswith(launch.fix))["busy_pct"] = None
    assert failed(doc) == {f"{launch.fix}: busy % up against {launch.problem}": "busy_pct not measured (30.0 -> None)"}


def test_the_report_lists_the_tests_then_the_failed_checks_first():
    doc = story_run()
    doc["tests"][1]["findings"] = [{"rule": "gpu-idle"}]
    rows = example_rows(doc)
    text = report(rows, check_story(rows, PAIRS, HEALTHY)).splitlines()
    assert text[0].split() == ["test", "outcome", "busy", "%", "GPU", "ms", "wall", "ms", "findings"]
    assert text[1].split() == [PAIRS[0].problem, "passed", "98.0", "40.00", "20.00", PAIRS[0].rule]
    assert any(line.endswith("(window not measured: the fixture measured it)") for line in text)
    checks = text[text.index("") + 1:]
    assert checks[0] == f"FAIL  {PAIRS[0].fix}: no finding: gpu-idle" and checks[1].startswith("ok  ")
    assert checks[-1] == f"{len(checks) - 2} of {len(checks) - 1} checks hold"


@pytest.mark.skipif(sys.platform == "win32", reason="runs a pytest process on a copy of examples/")
def test_the_script_on_a_machine_without_cuda_runs_the_job_and_fails_the_story(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "validation" / "examples_truth.py"), str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # every example skipped: the story cannot hold
    doc = json.loads((tmp_path / "examples.json").read_text(encoding="utf-8"))
    names = {function_name(t["test"]) for t in doc["tests"]}
    assert names == {n for p in PAIRS for n in (p.problem, p.fix)} | set(HEALTHY)
    assert all(t["outcome"] == "skipped" for t in doc["tests"])
    checks = {c["check"]: c for c in doc["checks"]}
    assert checks["the main job ran and wrote gpu_util.json"]["holds"]
    assert not checks["every declared example ran and passed"]["holds"]
    assert (tmp_path / "examples_80.log").is_file() and (tmp_path / "gpu_util.json").is_file()
    assert "FAIL  every declared example ran and passed" in done.stdout
    assert not (ROOT / "examples" / ".gpu_util").exists()
