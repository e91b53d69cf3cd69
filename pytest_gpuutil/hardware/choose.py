"""Which hardware-counter source a run uses, and the one line that says why when it is not the best.

``auto`` tries NVML GPM first on GPUs that have it (Hopper and later: a sample every 100 ms, a few
percent of a core; a test needs 0.2 s for figures of its own), then CUPTI PM sampling (fine-grained,
every 5 ms; needs profiling permission, not on MIG; CUPTI's decoding keeps about a third of a core
busy while the GPU works: docs/counters.md), then NVML alone (energy and the process check, no SM or tensor figures:
NVML's plain "GPU utilisation" is busy time, which the activity capture already measures exactly).
``cupti`` (short tests' own figures) and ``gpm`` ask for one source; ``off`` reads nothing.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pytest_gpuutil.hardware.capture import CounterCapture
from pytest_gpuutil.hardware.cuda_context import current_context, make_current
from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource
from pytest_gpuutil.hardware.deferred_start import DeferredStart
from pytest_gpuutil.hardware.nvml import GpmSource, NvmlDevice, NvmlError, open_device
from pytest_gpuutil.hardware.pm_structs import INSUFFICIENT_PRIVILEGES
from pytest_gpuutil.hardware.sampler import CounterSampler, CounterSource

MODES = ("auto", "cupti", "gpm", "off")
#: PM sampling's default interval (see the README's "Hardware counters" for the measured cost)
DEFAULT_INTERVAL_MS = 1.0

_FRIENDLY = {
    INSUFFICIENT_PRIVILEGES: "no permission to read GPU performance counters (run as root, or load the NVIDIA driver "
                             "with NVreg_RestrictProfilingToAdminUsers=0: https://developer.nvidia.com/ERR_NVGPUCTRPERM)",
    33: "a virtual GPU without profiling support",
    40: "a virtual GPU without profiling permission",
    43: "a MIG instance (PM sampling is not supported on MIG)",
    999: "CUPTI refused it: another profiling or sampling session on this GPU (another xdist worker, Nsight) does that",
}

FIELD_LABELS = {"sm_pct": "SM", "tensor_pct": "tensor", "dram_bw_pct": "DRAM", "occupancy_pct": "occupancy",
                "fp16_pct": "FP16", "fp32_pct": "FP32", "fp64_pct": "FP64"}


@dataclass(frozen=True)
class OpenedCounters:
    """The capture to use (None: no counters) and what to tell the user about it."""

    capture: Optional[CounterCapture]
    #: e.g. "CUPTI PM sampling every 1 ms on GH100 (SM, tensor, DRAM, occupancy, FP32, FP64)"
    description: str = ""
    #: ONE line for the summary when the counters fell back or are off for a reason, else ""
    fallback: str = ""
    #: seconds the source took to start (not charged to any test)
    startup_s: Optional[float] = None
    #: (description, fallback) as they stand now, for a source that starts on the sampler's thread
    #: (None: the two above are final)
    describe: Optional[Callable[[], tuple[str, str]]] = None


def _reason(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    friendly = _FRIENDLY.get(code) if isinstance(code, int) else None
    return f"{friendly} [{exc}]" if friendly else str(exc)


@dataclass(frozen=True)
class CudaDevice:
    """The CUDA device whose counters are read (the process's current device)."""

    index: int
    uuid: str
    name: str
    #: waits for the device (creates its context first: PM sampling needs one)
    synchronize: Callable[[], None] = lambda: None


def cuda_device(torch: Any) -> CudaDevice:
    """The current CUDA device of ``torch``."""
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return CudaDevice(index, str(getattr(props, "uuid", "") or ""), str(getattr(props, "name", "")), torch.cuda.synchronize)


def _describe(source: CounterSource, chip: str = "") -> str:
    shown = ", ".join(FIELD_LABELS[f] for f in source.fields if f in FIELD_LABELS)
    if source.name == "cupti_pm_sampling":
        period = source.period_ns
        every = f"every {period / 1e6:g} ms" if period else "on a clock-cycle interval"
        return f"CUPTI PM sampling {every}{' on ' + chip if chip else ''} ({shown})"
    return f"NVML GPM every {(source.period_ns or 0) / 1e6:g} ms ({shown}; tests under {2 * (source.period_ns or 0) / 1e9:g} s get none)"


def open_counters(
    mode: str,
    interval_ms: float,
    cuda: Optional[CudaDevice],
    own_pids: Optional[Callable[[], set[int]]] = None,
    source: Optional[CounterSource] = None,
    nvml_device: Callable[[str, int], Any] = open_device,
    cupti_library: Callable[[], Optional[str]] = lambda: _loaded_cupti(),
) -> OpenedCounters:
    """Start the best source ``mode`` allows on ``cuda`` (``source``: use that one, e.g. a synthetic
    source from the ``pytest_gpuutil_counter_source`` hook). Never raises.

    ``nvml_device(uuid, index)`` gives the NVML view of the device (anything with ``name``,
    ``mig_enabled()``, ``gpm_supported()``, ``energy_mj()``, ``process_pids()``) or raises
    NvmlError; ``cupti_library()`` the loaded libcupti's path or None.
    """
    if mode == "off":
        return OpenedCounters(None)
    pids = own_pids or (lambda: {os.getpid()})
    if source is not None:
        sampler = CounterSampler(source, getattr(source, "energy_mj", None), getattr(source, "process_pids", None), pids,
                                 clock=getattr(source, "now", time.time_ns))
        try:
            sampler.start()
        except Exception as exc:  # noqa: BLE001 - a source that cannot start must not fail tests
            return OpenedCounters(None, fallback=f"hardware counters off: {source.name} did not start: {exc}")
        return OpenedCounters(CounterCapture(sampler), source.name, startup_s=sampler.cost().startup_s)
    if cuda is None:
        return OpenedCounters(None)
    index, uuid, name = cuda.index, cuda.uuid, cuda.name
    try:
        cuda.synchronize()  # this process's context on the device: PM sampling needs it, NVML then lists us
    except Exception as exc:  # noqa: BLE001
        return OpenedCounters(None, fallback=f"hardware counters off: the CUDA device could not be used: {exc}")
    if uuid.startswith("MIG-"):
        return OpenedCounters(None, fallback="hardware counters off: this is a MIG instance (the counters, energy "
                                             "included, are the whole GPU's)")
    device: Optional[NvmlDevice] = None
    nvml_reason = ""
    try:
        device = nvml_device(uuid, index)
    except NvmlError as exc:
        nvml_reason = str(exc)
    if device is not None and device.mig_enabled():
        return OpenedCounters(None, fallback=f"hardware counters off: MIG is enabled on {device.name or name} (the counters, "
                                             "energy included, are the whole GPU's)")
    reasons: list[str] = []
    began = time.perf_counter()
    gpm_ok = device is not None and mode in ("auto", "gpm") and device.gpm_supported()
    if gpm_ok:  # auto's first choice where the GPU has it: a few % of a core against PM sampling's third
        opened = _try_gpm(device, pids, reasons, began)  # type: ignore[arg-type]
        if opened is not None:
            return opened
    no_gpm = (f"NVML GPM: not supported on {device.name or name} (Hopper or later needed)"
              if device is not None and not gpm_ok else "")
    if mode in ("auto", "cupti"):
        gpm_reason = (no_gpm,) if mode == "auto" and no_gpm else ()
        opened = _try_pm(cuda, cupti_library(), interval_ms, device, pids, reasons, gpm_reason)
        if opened is not None:
            if device is None:
                opened = dataclasses.replace(
                    opened, fallback=f"no energy figures and no check for other processes on the GPU: {nvml_reason}")
            return _with_energy_problem(opened)
    if mode in ("auto", "gpm"):
        if device is None:
            reasons.append(f"NVML GPM: {nvml_reason}")
        elif not gpm_ok:
            reasons.append(no_gpm)
    if device is None:
        return OpenedCounters(None, fallback=f"hardware counters off: {'; '.join(reasons or [nvml_reason])}")
    sampler = CounterSampler(None, device.energy_mj, device.process_pids, pids)
    sampler.start()
    why = "; ".join(reasons) or f"--gpu-util-counters {mode}"
    return _with_energy_problem(OpenedCounters(CounterCapture(sampler), "NVML energy only", f"no SM/tensor/DRAM "
                                               f"counters ({why}): energy from NVML only", time.perf_counter() - began))


def _try_gpm(device: NvmlDevice, pids: Callable[[], set[int]], reasons: list[str], began: float
             ) -> Optional[OpenedCounters]:
    """NVML GPM, started here (one NVML sample: milliseconds); None, with the reason, if it does not start."""
    sampler = CounterSampler(GpmSource(device), device.energy_mj, device.process_pids, pids)
    try:
        sampler.start()
    except Exception as exc:  # noqa: BLE001 - a fallback, never a crash
        reasons.append(f"NVML GPM: {exc}")
        return None
    shown = _describe(sampler.source)  # type: ignore[arg-type]
    return _with_energy_problem(OpenedCounters(CounterCapture(sampler), shown, "", time.perf_counter() - began))


def _with_energy_problem(opened: OpenedCounters) -> OpenedCounters:
    """The fallback line, plus why energy or the process check is off (one line in all)."""
    sampler = opened.capture.sampler if opened.capture is not None else None
    problems = [p for p in (sampler.energy_error, sampler.process_error) if p] if sampler is not None else []
    if problems:
        return dataclasses.replace(opened, fallback="; ".join([opened.fallback, *problems] if opened.fallback else problems))
    return opened


def _loaded_cupti() -> Optional[str]:
    from pytest_gpuutil.machine.loaded_libraries import find_loaded_library

    return find_loaded_library()


def _try_pm(cuda: CudaDevice, path: Optional[str], interval_ms: float, device: Optional[NvmlDevice],
            pids: Callable[[], set[int]], reasons: list[str], gpm_reason: tuple[str, ...] = ()
            ) -> Optional[OpenedCounters]:
    """PM sampling, started on the sampler's thread (~0.4 s of CUPTI calls that release the GIL: the
    tests go on meanwhile); if it does not start there, energy only (``gpm_reason``: why not GPM)."""
    if path is None:
        reasons.append("CUPTI PM sampling: libcupti is not loaded in this process")
        return None
    began = time.perf_counter()
    try:
        pm = PmSamplingSource(path, device_index=cuda.index, interval_ns=int(interval_ms * 1e6))
    except Exception as exc:  # noqa: BLE001 - any failure is a fallback, never a crash
        reasons.append(f"CUPTI PM sampling: {_reason(exc)}")
        return None
    context = current_context()  # torch's, on this thread: made current on the sampler's before CUPTI's set-up

    def in_context() -> PmSamplingSource:
        make_current(context)
        return pm

    sources: list[tuple[str, Callable[[], Any]]] = [("CUPTI PM sampling", in_context)]
    deferred = DeferredStart(sources, reason=_reason)
    sampler = CounterSampler(deferred, device.energy_mj if device else None, device.process_pids if device else None, pids)
    sampler.start()
    before = list(reasons)

    def describe() -> tuple[str, str]:
        source = deferred.source
        if source is None and deferred.starting:
            return "CUPTI PM sampling (still starting)", ""
        why = "; ".join([*before, *deferred.reasons])
        if source is None:
            if device is None:
                return "", f"hardware counters off: {why}"
            return "NVML energy only", f"no SM/tensor/DRAM counters ({'; '.join([why, *gpm_reason])}): energy from NVML only"
        shown = _describe(source, getattr(source, "chip", ""))
        return shown, (f"hardware counters from {shown}: {why}" if why else "")

    return OpenedCounters(CounterCapture(sampler), "CUPTI PM sampling (starting)", "", time.perf_counter() - began,
                          describe=describe)
