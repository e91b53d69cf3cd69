"""CUPTI records the host's waits (activity kind 38) only for the rule that reads them."""
from __future__ import annotations

import pytest

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.measurement import Measurement


@pytest.mark.parametrize(
    ("findings", "ignore", "recorded"),
    [(True, frozenset(), True), (True, frozenset({"gpu-idle"}), True), (True, frozenset({"host-sync"}), False),
     (False, frozenset(), False)],
)
def test_the_hosts_waits_are_recorded_only_for_the_host_sync_rule(findings: bool, ignore: frozenset,
                                                                   recorded: bool) -> None:
    m = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(),
                    findings=findings, findings_ignore=ignore)
    assert m.records_host_waits is recorded
