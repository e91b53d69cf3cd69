"""Which descendant processes use a GPU, and how much memory, sampled from NVML (ctypes, no pynvml).

NVML's per-process list is the fallback for what the spool cannot say: the memory of a child
that reports no allocator peak (the injection library's, or a killed one), and a child that used
the GPU but handed nothing over (no injection library, or a program started with its own
environment). A daemon thread samples every few hundred milliseconds while the session runs, and
only while the pytest process has a child process at all (read from ``/proc``, no driver call), so
a suite that starts no process makes no driver query. (It sampled all the time before; one device
call showed a launch-bound test slower with child processes measured, the next call did not.)
Short-lived processes can slip between samples.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from pytest_gpuutil.machine.processes import descends_from, has_children, proc_start, program_name

PERIOD_S = 0.25
SUCCESS, INSUFFICIENT_SIZE = 0, 7
NOT_AVAILABLE = (1 << 64) - 1


class NvmlError(Exception):
    """NVML is missing or refused a call."""


@dataclass(frozen=True)
class Sample:
    pid: int
    #: NVML's device index (the physical GPU)
    device: int
    used_bytes: int
    at_ns: int
    program: str


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2 and v3)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class NvmlSampler:
    """Samples the compute processes on every GPU that descend from ``own_pid``."""

    def __init__(self, own_pid: Optional[int] = None, period_s: float = PERIOD_S, library: str = "libnvidia-ml.so.1"):
        self.own_pid = own_pid or os.getpid()
        self.period_s = period_s
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise NvmlError(f"cannot load {library}: {exc}") from None
        self._check(self._lib.nvmlInit_v2(), "nvmlInit_v2")
        count = ctypes.c_uint()
        self._check(self._lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        self._handles = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            self._check(self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
            self._handles.append(handle)
        if not self._handles:
            raise NvmlError("no GPU")
        self._list, self._struct = self._processes_call()
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        #: (pid, start ticks) -> whether it descends from own_pid (and its name)
        self._family: dict[tuple[int, int], tuple[bool, str]] = {}

    def _check(self, result: int, call: str) -> None:
        if result != SUCCESS:
            raise NvmlError(f"{call} failed with NVML error {result}")

    def _processes_call(self) -> tuple[Any, Any]:
        for name, struct in (("nvmlDeviceGetComputeRunningProcesses_v3", _ProcessInfo),
                             ("nvmlDeviceGetComputeRunningProcesses_v2", _ProcessInfo),
                             ("nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1)):
            fn = getattr(self._lib, name, None)
            if fn is not None:
                return fn, struct
        raise NvmlError("this NVML lists no compute processes")

    def sample(self) -> list[Sample]:
        """One look at every GPU (descendants only; none, and no driver call, while there is no child process)."""
        if not has_children(self.own_pid):
            return []
        now = time.time_ns()
        found = []
        for device, handle in enumerate(self._handles):
            for pid, used in self._running(handle):
                if pid == self.own_pid:
                    continue
                key = (pid, proc_start(pid))
                family = self._family.get(key)
                if family is None:
                    family = self._family[key] = (descends_from(pid, self.own_pid), program_name(pid))
                if family[0]:
                    found.append(Sample(pid, device, used, now, family[1]))
        return found

    def _running(self, handle: Any) -> list[tuple[int, int]]:
        size = 16
        while True:
            count = ctypes.c_uint(size)
            infos = (self._struct * size)()
            result = self._list(handle, ctypes.byref(count), infos)
            if result == INSUFFICIENT_SIZE and size < 4096:
                size *= 4
                continue
            if result != SUCCESS:
                return []
            return [(int(i.pid), 0 if i.usedGpuMemory == NOT_AVAILABLE else int(i.usedGpuMemory))
                    for i in infos[:count.value]]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pytest-gpuutil NVML processes", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                found = self.sample()
            except Exception:  # noqa: BLE001 - a failing sample is skipped
                continue
            if found:
                with self._lock:
                    self._samples.extend(found)

    def take(self) -> list[Sample]:
        """Samples since the last take (one taken now too, so a flush sees the latest)."""
        try:
            now = self.sample()
        except Exception:  # noqa: BLE001
            now = []
        with self._lock:
            samples, self._samples = self._samples, []
        return samples + now

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.period_s + 1)
