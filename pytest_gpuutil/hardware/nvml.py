"""NVML through nvidia-ml-py (``import pynvml``): GPM samples, the energy counter, the GPU's processes.

``pynvml`` is imported by :func:`open_device` only, never at plugin load. Measured on an H100:
``nvmlGpmSampleGet`` 0.06 ms, ``nvmlDeviceGetTotalEnergyConsumption`` 4.4 ms (it steps every
~100 ms), GPM's counters move every ~33-100 ms (so GPM samples are 100 ms apart: windows of 10 ms
read stale values). GPM needs Hopper or later and is not read on MIG instances here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from pytest_gpuutil.analysis.counters import CounterSamples

#: NVML GPM metric ids (nvml.h ``NVML_GPM_METRIC_*``) behind each field
GPM_METRICS = {
    "gr_active_pct": 1,  # GRAPHICS_UTIL
    "sm_pct": 2,  # SM_UTIL
    "occupancy_pct": 3,  # SM_OCCUPANCY
    "tensor_pct": 5,  # ANY_TENSOR_UTIL
    "dram_bw_pct": 10,  # DRAM_BW_UTIL
    "fp64_pct": 11,  # FP64_UTIL
    "fp32_pct": 12,  # FP32_UTIL
    "fp16_pct": 13,  # FP16_UTIL
}
#: GPM samples this far apart by default (its counters move every ~33-100 ms)
GPM_PERIOD_NS = 100_000_000


class NvmlError(Exception):
    """NVML is missing or refused a call; the message says which and why."""


@dataclass
class NvmlDevice:
    """One GPU as NVML sees it."""

    nvml: Any
    handle: Any
    name: str

    def mig_enabled(self) -> bool:
        try:
            current = self.nvml.nvmlDeviceGetMigMode(self.handle)[0]
        except Exception:  # noqa: BLE001 - not supported: no MIG
            return False
        return bool(current)

    def gpm_supported(self) -> bool:
        try:
            return bool(self.nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception:  # noqa: BLE001 - an old driver or binding: no GPM
            return False

    def energy_mj(self) -> int:
        """The GPU's energy counter in millijoules (since the driver loaded)."""
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def process_pids(self) -> set[int]:
        """Processes with a context on this GPU (compute and graphics)."""
        pids: set[int] = set()
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                pids.update(int(p.pid) for p in getattr(self.nvml, call)(self.handle))
            except Exception:  # noqa: BLE001 - one list unsupported: the other still counts
                continue
        return pids


def open_device(uuid: Optional[str] = None, index: int = 0) -> NvmlDevice:
    """The NVML handle of a CUDA device: by its UUID when known (CUDA and NVML may order GPUs
    differently), else by index."""
    try:
        import pynvml
    except ImportError:
        raise NvmlError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml raises its own NVMLError subclasses
        raise NvmlError(f"nvmlInit failed: {exc}") from None
    handle = None
    if uuid:
        text = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(text)
        except Exception:  # noqa: BLE001 - fall back to the index
            handle = None
    if handle is None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001
            raise NvmlError(f"nvmlDeviceGetHandleByIndex({index}) failed: {exc}") from None
    try:
        name = pynvml.nvmlDeviceGetName(handle)
    except Exception:  # noqa: BLE001
        name = ""
    return NvmlDevice(pynvml, handle, name.decode() if isinstance(name, bytes) else str(name))


class GpmSource:
    """Hardware-counter samples from NVML GPM: one sample per poll, metrics between consecutive ones."""

    name = "nvml_gpm"

    def __init__(self, device: NvmlDevice, period_ns: int = GPM_PERIOD_NS, clock: Any = time.time_ns):
        self.device = device
        self.period_ns: Optional[int] = int(period_ns)
        self.fields = tuple(GPM_METRICS)
        self._clock = clock
        self._previous: Any = None
        self._previous_ns = 0
        self.samples = 0
        self.poll_s = 0.0
        self.startup_steps: dict[str, float] = {}

    def _take(self) -> tuple[Any, int]:
        nvml = self.device.nvml
        sample = nvml.nvmlGpmSampleAlloc()
        before = self._clock()
        try:
            nvml.nvmlGpmSampleGet(self.device.handle, sample)
        except Exception:
            nvml.nvmlGpmSampleFree(sample)
            raise
        return sample, (before + self._clock()) // 2

    def start(self) -> None:
        began = time.perf_counter()
        try:
            self._previous, self._previous_ns = self._take()
        except Exception as exc:  # noqa: BLE001
            raise NvmlError(f"nvmlGpmSampleGet failed: {exc}") from None
        self.startup_steps["first sample"] = time.perf_counter() - began

    def poll(self) -> CounterSamples:
        """A sample now, and the metrics since the previous one as one row."""
        if self._previous is None:
            return CounterSamples()
        began = time.perf_counter()
        nvml = self.device.nvml
        sample, now_ns = self._take()
        try:
            values = self._metrics(self._previous, sample)
        finally:
            nvml.nvmlGpmSampleFree(self._previous)
            start_ns, self._previous, self._previous_ns = self._previous_ns, sample, now_ns
            self.poll_s += time.perf_counter() - began
        self.samples += 1
        return CounterSamples(np.asarray([start_ns], dtype=np.int64), np.asarray([now_ns], dtype=np.int64),
                              {k: np.asarray([v], dtype=np.float64) for k, v in values.items()}).tidy()

    def _metrics(self, first: Any, second: Any) -> dict[str, float]:
        nvml = self.device.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for i, metric in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = metric
        nvml.nvmlGpmMetricsGet(request)
        return {field: (float(request.metrics[i].value) if request.metrics[i].nvmlReturn == 0 else np.nan)
                for i, field in enumerate(GPM_METRICS)}

    def stop(self) -> CounterSamples:
        try:
            return self.poll()
        finally:
            if self._previous is not None:
                self.device.nvml.nvmlGpmSampleFree(self._previous)
                self._previous = None
