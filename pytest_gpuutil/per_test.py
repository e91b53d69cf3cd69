"""What one test's fixtures measured, collected while the test runs (no heavy imports here)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from pytest_gpuutil.report.metric_tables import MetricRow


@dataclass(init=False)
class TestResults:
    """What one test's fixtures measured; the plugin ships it with the test's report. Made for every
    test at its call: slots, and an __init__ of literals (the dataclass's, with a factory call per
    container and a ``__dict__``, cost ~6k instructions a test; this one about half)."""

    __test__ = False
    __slots__ = ("nodeid", "kernel_bench", "gpu_trace", "metric_rows", "tables", "measurement")

    nodeid: str
    kernel_bench: dict[str, dict[str, Any]]
    gpu_trace: dict[str, dict[str, Any]]
    metric_rows: list["MetricRow"]
    #: tables this test registered: name -> columns (so the controller knows them all)
    tables: dict[str, tuple[str, ...]]
    #: what measures this test's call phase while it runs: anything with ``step_aside(reason, warn)``
    measurement: Optional[Any]

    def __init__(self, nodeid: str, kernel_bench: Optional[dict[str, dict[str, Any]]] = None,
                 gpu_trace: Optional[dict[str, dict[str, Any]]] = None, metric_rows: Optional[list[MetricRow]] = None,
                 tables: Optional[dict[str, tuple[str, ...]]] = None, measurement: Optional[Any] = None):
        self.nodeid = nodeid
        self.kernel_bench = {} if kernel_bench is None else kernel_bench
        self.gpu_trace = {} if gpu_trace is None else gpu_trace
        self.metric_rows = [] if metric_rows is None else metric_rows
        self.tables = {} if tables is None else tables
        self.measurement = measurement

    def unique_label(self, wanted: str, taken: Mapping[str, Any]) -> str:
        label, n = wanted, 2
        while label in taken:
            label, n = f"{wanted}#{n}", n + 1
        return label

    def quiet_measurement(self, reason: str) -> None:
        """A fixture needs the profiler (or an unperturbed GPU): the per-test measurement steps aside."""
        if self.measurement is not None:
            self.measurement.step_aside(reason, warn=False)
