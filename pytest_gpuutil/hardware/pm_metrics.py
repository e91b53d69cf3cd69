"""What PM sampling is asked to measure, and the set of it that one chip can give in one pass.

Each record field has CUPTI metrics that can give it, best first (names differ by chip). A
:class:`MetricChooser` asks the Profiler Host API, on the chip at hand, which candidate of each
field is valid, then drops optional fields (the last first) until the set fits one pass.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pytest_gpuutil.hardware.pm_structs import (
    PROFILER_TYPE_PM_SAMPLING,
    ConfigAddMetrics,
    ConfigImage,
    ConfigImageSize,
    HostDeinitialize,
    HostInitialize,
    NumOfPasses,
    PmSamplingError,
    c_strings,
    u8_pointer,
)


@dataclass(frozen=True)
class MetricChoice:
    """A record field and the CUPTI metrics that can give it, best first (names differ by chip)."""

    field: str
    candidates: tuple[str, ...]
    #: dropped first when the whole set does not fit in one pass
    optional: bool = False


_PCT = ".avg.pct_of_peak_sustained_elapsed"
#: What is asked of PM sampling. On GH100 the first five (and ``gr_active_pct``) fit one pass.
METRICS: tuple[MetricChoice, ...] = (
    MetricChoice("sm_pct", ("sm__cycles_active" + _PCT,)),
    MetricChoice("tensor_pct", ("sm__pipe_tensor_cycles_active" + _PCT, "sm__pipe_tensor_op_hmma_cycles_active" + _PCT)),
    MetricChoice("dram_bw_pct", ("dram__throughput" + _PCT, "gpu__dram_throughput" + _PCT)),
    MetricChoice("occupancy_pct", ("sm__warps_active" + _PCT,)),
    MetricChoice("fp32_pct", ("sm__pipe_fma_cycles_active" + _PCT,), optional=True),
    MetricChoice("fp64_pct", ("sm__pipe_fp64_cycles_active" + _PCT,), optional=True),
    MetricChoice("gr_active_pct", ("gr__cycles_active" + _PCT,), optional=True),  # dropped first
)


class MetricChooser:
    """The one-pass metric set and its config image for one chip (see the module docstring).

    ``call(name, params)`` makes a CUPTI call and raises :class:`PmSamplingError` when it fails;
    the time spent is added to ``steps["metrics"]``. The chosen set's host object stays
    initialised (:attr:`host`): evaluating samples needs it, and its owner deinitialises it.
    """

    def __init__(self, call: Callable[[str, Any], Any], chip: bytes, availability: np.ndarray,
                 steps: dict[str, float]):
        self._call = call
        self._chip = chip
        self._availability = availability
        self._steps = steps
        #: the Profiler Host object of the chosen set (None until :meth:`choose` found one)
        self.host: Optional[int] = None

    def choose(self, wanted: Sequence[MetricChoice], chip_name: str) -> tuple[list[tuple[str, str]], np.ndarray]:
        """The wanted fields whose metrics this chip has, dropping optional ones until one pass."""
        usable: list[tuple[str, str, bool]] = []
        for choice in wanted:
            for candidate in choice.candidates:
                if self._config([candidate], keep=False) is not None:
                    usable.append((choice.field, candidate, choice.optional))
                    break
        if not any(field == "sm_pct" for field, _, _ in usable):
            raise PmSamplingError(f"PM sampling on {chip_name or 'this GPU'} has none of the SM metrics asked for")
        while usable:
            config = self._config([name for _, name, _ in usable], keep=True)
            if config is not None:
                return [(field, name) for field, name, _ in usable], config
            optional = [i for i, (_, _, opt) in enumerate(usable) if opt]
            usable.pop(optional[-1] if optional else -1)
        raise PmSamplingError(f"PM sampling on {chip_name}: no set of the metrics asked for fits in one pass")

    def _config(self, names: list[str], keep: bool) -> Optional[np.ndarray]:
        """A one-pass config image for ``names`` (None if not one pass or not valid on this chip)."""
        began = time.perf_counter()
        host = self._call("cuptiProfilerHostInitialize", HostInitialize(
            profilerType=PROFILER_TYPE_PM_SAMPLING, pChipName=self._chip,
            pCounterAvailabilityImage=u8_pointer(self._availability))).pHostObject
        try:
            try:
                array = c_strings(names)
                self._call("cuptiProfilerHostConfigAddMetrics",
                           ConfigAddMetrics(pHostObject=host, ppMetricNames=array, numMetrics=len(names)))
            except PmSamplingError:
                return None
            size = self._call("cuptiProfilerHostGetConfigImageSize", ConfigImageSize(pHostObject=host)).configImageSize
            image = np.zeros(size, dtype=np.uint8)
            self._call("cuptiProfilerHostGetConfigImage",
                       ConfigImage(pHostObject=host, configImageSize=size, pConfigImage=u8_pointer(image)))
            passes = self._call("cuptiProfilerHostGetNumOfPasses",
                                NumOfPasses(configImageSize=size, pConfigImage=u8_pointer(image))).numOfPasses
            if passes != 1:
                return None
            if keep:
                self.host, host = host, None
            return image
        finally:
            if host is not None:
                self._call("cuptiProfilerHostDeinitialize", HostDeinitialize(pHostObject=host))
            self._steps["metrics"] = self._steps.get("metrics", 0.0) + time.perf_counter() - began
