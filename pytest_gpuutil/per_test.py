"""What one test's fixtures measured, collected while the test runs (no heavy imports here)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from pytest_gpuutil.report.metric_tables import MetricRow


@dataclass
class TestResults:
    """What one test's fixtures measured; the plugin ships it with the test's report."""

    __test__ = False

    nodeid: str
    kernel_bench: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_trace: dict[str, dict[str, Any]] = field(default_factory=dict)
    metric_rows: list["MetricRow"] = field(default_factory=list)
    #: tables this test registered: name -> columns (so the controller knows them all)
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: what measures this test's call phase while it runs: anything with ``step_aside(reason, warn)``
    measurement: Optional[Any] = None

    def unique_label(self, wanted: str, taken: Mapping[str, Any]) -> str:
        label, n = wanted, 2
        while label in taken:
            label, n = f"{wanted}#{n}", n + 1
        return label

    def quiet_measurement(self, reason: str) -> None:
        """A fixture needs the profiler (or an unperturbed GPU): the per-test measurement steps aside."""
        if self.measurement is not None:
            self.measurement.step_aside(reason, warn=False)
