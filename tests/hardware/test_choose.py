"""Choosing the counter source and the one line that says why it fell back (no GPU needed).

The opener's seams are real ones: the CUDA device it is told about, the NVML view of that device
(anything with ``name``, ``mig_enabled``, ``gpm_supported``, ``energy_mj``, ``process_pids``) and
where libcupti is loaded. On this machine NVML itself is missing or has no driver, and that
path runs for real too.
"""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from pytest_gpuutil.hardware.choose import CudaDevice, open_counters
from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource
from pytest_gpuutil.hardware.pm_structs import PmSamplingError
from pytest_gpuutil.hardware.nvml import NvmlError, open_device
from tests.helpers import HAS_CUDA
from tests.helpers.counters import SyntheticCounters

H100 = CudaDevice(0, "GPU-3b7f0c8e-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3")
A100 = CudaDevice(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB")


@dataclass
class NvmlView:
    """The NVML facts the opener asks about one GPU."""

    name: str
    gpm: bool = False
    mig: bool = False
    energy: list[int] = field(default_factory=lambda: [1_000_000])

    def mig_enabled(self) -> bool:
        return self.mig

    def gpm_supported(self) -> bool:
        return self.gpm

    def energy_mj(self) -> int:
        self.energy[0] += 1000
        return self.energy[0]

    def process_pids(self) -> set[int]:
        return {os.getpid()}


def no_nvml(uuid: str, index: int):
    raise NvmlError("nvidia-ml-py is not installed (pip install nvidia-ml-py)")


def close(opened) -> None:
    if opened.capture is not None:
        opened.capture.close()


def test_off_reads_nothing() -> None:
    assert open_counters("off", 1.0, H100).capture is None
    assert open_counters("auto", 1.0, None).capture is None  # no CUDA device and no source: nothing to say


def test_a_source_from_the_hook_is_used_as_it_is() -> None:
    source = SyntheticCounters()
    opened = open_counters("auto", 1.0, None, source=source)
    try:
        assert opened.capture is not None and opened.capture.sampler.source is source
        assert opened.description == "synthetic_counters" and opened.fallback == "" and opened.startup_s is not None
    finally:
        close(opened)


def test_a_hook_source_that_cannot_start_turns_the_counters_off_with_the_reason() -> None:
    class Broken(SyntheticCounters):
        def start(self) -> None:
            raise RuntimeError("no device")

    opened = open_counters("auto", 1.0, None, source=Broken())
    assert opened.capture is None
    assert opened.fallback == "hardware counters off: synthetic_counters did not start: no device"


def test_pre_hopper_without_pm_sampling_gives_energy_only_and_says_why() -> None:
    view = NvmlView("NVIDIA A100-SXM4-80GB")
    opened = open_counters("auto", 1.0, A100, nvml_device=lambda uuid, index: view, cupti_library=lambda: None)
    try:
        assert opened.capture is not None and opened.capture.sampler.source is None
        assert opened.description == "NVML energy only"
        assert opened.fallback == (
            "no SM/tensor/DRAM counters (CUPTI PM sampling: libcupti is not loaded in this process; NVML GPM: not "
            "supported on NVIDIA A100-SXM4-80GB (Hopper or later needed)): energy from NVML only")
        capture = opened.capture
        capture.begin("t")
        capture.end()
        got = capture.flush()["t"]
        assert got.source == "nvml_utilization" and got.values["sm_pct"] is None and got.note == ""
    finally:
        close(opened)


def test_without_nvidia_ml_py_and_without_cupti_the_counters_are_off() -> None:
    opened = open_counters("auto", 1.0, H100, nvml_device=no_nvml, cupti_library=lambda: None)
    assert opened.capture is None
    assert opened.fallback == ("hardware counters off: CUPTI PM sampling: libcupti is not loaded in this process; "
                               "NVML GPM: nvidia-ml-py is not installed (pip install nvidia-ml-py)")


def test_asking_for_gpm_skips_pm_sampling() -> None:
    opened = open_counters("gpm", 1.0, A100, nvml_device=lambda u, i: NvmlView("NVIDIA A100"),
                           cupti_library=lambda: pytest.fail("PM sampling must not be tried"))
    try:
        assert "NVML GPM: not supported on NVIDIA A100" in opened.fallback
    finally:
        close(opened)


@pytest.mark.parametrize("device, view", [
    (CudaDevice(0, "MIG-1234", "NVIDIA H100 MIG 1g.10gb"), NvmlView("H100")),
    (H100, NvmlView("NVIDIA H100 80GB HBM3", gpm=True, mig=True)),
])
def test_mig_turns_the_counters_off(device: CudaDevice, view: NvmlView) -> None:
    opened = open_counters("auto", 1.0, device, nvml_device=lambda u, i: view, cupti_library=lambda: None)
    assert opened.capture is None and "MIG" in opened.fallback and opened.fallback.startswith("hardware counters off")


def test_a_libcupti_without_pm_sampling_falls_back_with_the_reason() -> None:
    libc = ctypes.util.find_library("c")  # loaded in every process, and has no CUPTI in it
    path = next((line.split()[-1] for line in open("/proc/self/maps") if "libc.so" in line or "libc-" in line), libc)
    view = NvmlView("NVIDIA A100")
    opened = open_counters("cupti", 1.0, A100, nvml_device=lambda u, i: view, cupti_library=lambda: path)
    try:
        assert opened.description == "NVML energy only"
        assert "CUPTI PM sampling: libc" in opened.fallback and "has no PM sampling API" in opened.fallback
    finally:
        close(opened)


def test_pm_sampling_errors_name_the_library() -> None:
    with pytest.raises(PmSamplingError, match="cannot use /nonexistent/libcupti.so"):
        PmSamplingSource("/nonexistent/libcupti.so")


def test_no_permission_reads_as_such() -> None:
    from pytest_gpuutil.hardware.choose import _reason

    text = _reason(PmSamplingError("cuptiPmSamplingGetCounterAvailability failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", 35))
    assert text.startswith("no permission to read GPU performance counters (run as root")
    assert text.endswith("[cuptiPmSamplingGetCounterAvailability failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES]")


def test_without_nvidia_ml_py_open_device_says_so() -> None:
    code = ("import sys; sys.modules['pynvml'] = None\n"
            "from pytest_gpuutil.hardware.nvml import open_device, NvmlError\n"
            "try:\n    open_device()\nexcept NvmlError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "nvidia-ml-py is not installed (pip install nvidia-ml-py)"


@pytest.mark.skipif(HAS_CUDA, reason="checks NVML without a GPU driver")
def test_without_a_driver_nvml_fails_in_one_line() -> None:
    pytest.importorskip("pynvml")
    with pytest.raises(NvmlError, match="^nvmlInit failed: ") as info:
        open_device()
    assert "\n" not in str(info.value)


def test_loading_the_plugin_does_not_import_nvml_or_the_hardware_package() -> None:
    code = ("import sys, pytest_gpuutil.plugin, pytest_gpuutil.session; "
            "print(sorted(m for m in sys.modules if m == 'pynvml' or m.startswith('pytest_gpuutil.hardware')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_opening_the_counters_module_does_not_import_nvml_either() -> None:
    code = "import sys, pytest_gpuutil.hardware.choose; print('pynvml' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


class FakeGpm:
    """NVML's GPM calls as pynvml names them, each sample's metrics at 50 (or failing to sample)."""

    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, fail: bool = False):
        self.fail = fail

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.metrics = [type("Metric", (), {"metricId": 0, "value": 0.0, "nvmlReturn": 0})() for _ in range(16)]

    def nvmlGpmSampleAlloc(self) -> object:
        return object()

    def nvmlGpmSampleGet(self, handle: object, sample: object) -> None:
        if self.fail:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlGpmSampleFree(self, sample: object) -> None:
        pass

    def nvmlGpmMetricsGet(self, request) -> None:
        for metric in request.metrics[:request.numMetrics]:
            metric.value = 50.0


@dataclass
class GpmView(NvmlView):
    gpm: bool = True
    nvml: FakeGpm = field(default_factory=FakeGpm)
    handle: object = None


def test_auto_on_a_gpu_with_gpm_takes_gpm_and_leaves_pm_sampling_alone() -> None:
    # GPM's sampling costs a few % of a core; PM sampling's decoding about a third while the GPU works
    opened = open_counters("auto", 1.0, H100, nvml_device=lambda u, i: GpmView("NVIDIA H100 80GB HBM3"),
                           cupti_library=lambda: pytest.fail("PM sampling must not be tried"))
    try:
        assert opened.capture is not None and opened.capture.sampler.source.name == "nvml_gpm"
        assert opened.description.startswith("NVML GPM every 100 ms (SM, ")
        assert opened.description.endswith("; tests under 0.2 s get none)")
        assert opened.fallback == "" and opened.describe is None
    finally:
        close(opened)


def test_auto_goes_on_to_pm_sampling_when_gpm_does_not_start_and_says_why() -> None:
    view = GpmView("NVIDIA H100 80GB HBM3", nvml=FakeGpm(fail=True))
    opened = open_counters("auto", 1.0, H100, nvml_device=lambda u, i: view, cupti_library=lambda: None)
    try:
        assert opened.description == "NVML energy only"
        assert opened.fallback == ("no SM/tensor/DRAM counters (NVML GPM: nvmlGpmSampleGet failed: NVML_ERROR_NOT_SUPPORTED; "
                                   "CUPTI PM sampling: libcupti is not loaded in this process): energy from NVML only")
    finally:
        close(opened)


def test_asking_for_cupti_on_a_gpu_with_gpm_tries_pm_sampling() -> None:
    tried = []
    opened = open_counters("cupti", 1.0, H100, nvml_device=lambda u, i: GpmView("NVIDIA H100 80GB HBM3"),
                           cupti_library=lambda: tried.append(True))
    try:
        assert tried == [True] and opened.description == "NVML energy only"
        assert "CUPTI PM sampling: libcupti is not loaded" in opened.fallback and "GPM" not in opened.fallback
    finally:
        close(opened)
