"""What PM sampling is asked for: each field's candidates are percentages of peak, four fields are required."""
from __future__ import annotations

from pytest_gpuutil.hardware.pm_metrics import METRICS


def test_every_metric_choice_is_a_percentage_of_peak() -> None:
    for choice in METRICS:
        assert all(name.endswith(".pct_of_peak_sustained_elapsed") for name in choice.candidates), choice
    assert [c.field for c in METRICS if not c.optional] == ["sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct"]
