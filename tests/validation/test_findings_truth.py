"""CPU tests of validation/findings_truth.py: its expectations and the suite it writes for the plugin run."""
from __future__ import annotations

import textwrap

from pytest_gpuutil.analysis.rules import RULE_IDS
from validation import findings_truth


def test_each_required_rule_has_a_problem_and_a_control() -> None:
    for rule in findings_truth.FIVE:
        assert any(rule in (w.partition(":")[0] for w in must) for _, must, _ in findings_truth.WORKLOADS.values()), rule
        assert any(rule in must_not for _, _, must_not in findings_truth.WORKLOADS.values()), rule
    named = {w.partition(":")[0] for _, must, must_not in findings_truth.WORKLOADS.values() for w in must + must_not}
    assert named <= set(RULE_IDS)


def test_check_says_what_is_missing_or_false() -> None:
    check = findings_truth.check
    assert check("bf16_matmul_loop", []) == []
    assert check("bf16_matmul_loop", [{"rule": "gpu-idle"}]) == ["false gpu-idle"]
    assert check("idle_before", [{"rule": "gpu-idle", "evidence": {"mostly": "after"}}]) == [
        "gpu-idle mostly after, not before"]
    assert check("item_in_loop_sync_events", []) == ["no host-sync"]  # the cuda_sync recording expects the same


def test_the_plugin_suite_is_a_valid_test_module(pytester) -> None:
    pytester.makepyfile(test_suite=textwrap.dedent(findings_truth.SUITE).format(
        repo=str(findings_truth.REPO), names=list(findings_truth.WORKLOADS)))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"*test_workload?{name}?" for name in list(findings_truth.WORKLOADS)[:3]])
    assert f"{len(findings_truth.WORKLOADS)} tests collected" in result.stdout.str()
