"""The parent's reading of its children: each child's state from the spool, and NVML's samples of
which processes use a GPU.

At each flush :meth:`SpoolReader.read` takes the new chunks of every child file (new files found
too) into one :class:`Child` per process: its header, the events it has handed over and not yet
merged, its memory, notes and end. :meth:`SpoolReader.wait_for` asks children that still run to
hand over first (bounded). :meth:`SpoolReader.columns_of` gives a child's pending events on this
process's clock and device numbering, ready to merge with the parent's own.

**NVML.** NVML's per-process list is the fallback for what the spool cannot say: the memory of a child
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
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from pytest_gpuutil.children.columns import concat_columns
from pytest_gpuutil.children.spool import SPOOL_ENV, Spool
from pytest_gpuutil.children.spool_format import (
    INJECTION,
    MONOTONIC,
    ChunkReader,
    End,
    Events,
    Header,
    Memory,
    Note,
)
from pytest_gpuutil.machine.processes import (
    descends_from,
    environment_value,
    has_children,
    is_running,
    proc_start,
    program_name,
)
from pytest_gpuutil.traces.model import CodedColumn, GpuColumns

#: how long a flush waits for running children to hand over what they have
WAIT_S = 1.0


@dataclass
class Child:
    """One child process as the spool (and NVML) tell of it."""

    path: str
    reader: Optional[ChunkReader]
    header: Optional[Header] = None
    pending: list[Events] = field(default_factory=list)
    covered_ns: int = 0
    end: Optional[End] = None
    memory: Optional[Memory] = None
    notes: list[Note] = field(default_factory=list)
    #: notes already placed in a window
    said: set = field(default_factory=set)
    lost_noted: bool = False
    gone: bool = False
    #: when this process (its source clock) found it gone (0: not yet)
    gone_ns: int = 0
    #: did not answer a poke in time once: poked again, but not waited for (a stopped or hung child
    #: must not cost every flush a second)
    slow: bool = False
    #: NVML: (device, max used bytes) and when it was seen
    nvml_peak: dict[int, int] = field(default_factory=dict)
    nvml_seen_ns: int = 0
    nvml_program: str = ""

    @property
    def pid(self) -> int:
        return self.header.pid if self.header is not None else int(self.path.rsplit(":", 1)[-1])

    @property
    def program(self) -> str:
        return self.header.program if self.header is not None else (self.nvml_program or "?")

    def label(self) -> str:
        return f"pid {self.pid} ({self.program})"

    def lane_label(self) -> str:
        """How a timeline names the child's lanes: pid, program (shortened) and rank."""
        program = self.program if len(self.program) <= 48 else self.program[:47] + "…"
        rank = self.header.rank if self.header is not None and self.header.rank else ""
        return f"pid {self.pid} {program}" + (f" rank {rank}" if rank else "")

    def last_known_ns(self) -> int:
        times = [self.covered_ns, self.header.created_ns if self.header else 0, self.nvml_seen_ns]
        times += [n.at_ns for n in self.notes]
        return max(times)


@dataclass
class SpoolReader:
    """Every child of this process's tests, as its spool file and NVML tell of it (see the module docstring)."""

    spool: Spool
    #: this process's event-source clock, to put children's times on it
    parent_now: Callable[[], int]
    demangle: Callable[[str], str] = lambda name: name
    #: CUDA_VISIBLE_DEVICES of this process (None: every GPU, in order)
    visible_devices: Optional[str] = None
    #: NVML per-process samples, when NVML is there (see the NVML part of child_state.py)
    sampler: Any = None
    wait_s: float = WAIT_S
    #: the children by spool file (or ``nvml:PID`` for one only NVML saw)
    children: dict[str, Child] = field(default_factory=dict)
    _demangled: dict[str, str] = field(default_factory=dict)
    #: pids NVML saw, and whether they report to another run's spool
    _elsewhere: dict[int, bool] = field(default_factory=dict)

    # -- reading --------------------------------------------------------------------------------
    def read(self) -> None:
        """New chunks from every child file (new files found too)."""
        for path in self.spool.files():
            child = self.children.get(path)
            if child is None:
                child = self.children[path] = Child(path, ChunkReader(path))
            if child.reader is None or child.end is not None:
                continue  # an END chunk is the last
            for chunk in child.reader.read_new():
                self._take(child, chunk)
            if child.reader.error and "damaged" not in child.said:
                child.said.add("damaged")
                child.notes.append(Note(child.last_known_ns(), f"its spool file is damaged ({child.reader.error})"))
        if self.sampler is not None:
            self._take_samples()

    def _take(self, child: Child, chunk: Any) -> None:
        if isinstance(chunk, Header):
            child.header = chunk
            child.covered_ns = max(child.covered_ns, self._to_parent(chunk, chunk.created_ns))
        elif isinstance(chunk, Events):
            child.pending.append(chunk)
            if child.header is not None:
                child.covered_ns = max(child.covered_ns, self._to_parent(child.header, chunk.covered_ns))
        elif isinstance(chunk, Memory):
            child.memory = chunk
        elif isinstance(chunk, Note):
            child.notes.append(Note(self._to_parent(child.header, chunk.at_ns), chunk.text))
        elif isinstance(chunk, End):
            child.end = End(self._to_parent(child.header, chunk.at_ns), chunk.reason, chunk.note)

    def _take_samples(self) -> None:
        by_pid = {c.header.pid: c for c in self.children.values() if c.header is not None}
        for sample in self.sampler.take():
            child = by_pid.get(sample.pid)
            if child is None and self._reports_elsewhere(sample.pid):
                continue  # a nested pytest --gpu-util run measures it, in its own spool and report
            if child is None:
                key = f"nvml:{sample.pid}"
                child = self.children.get(key)
                if child is None:
                    child = self.children[key] = Child(key, None, nvml_program=sample.program)
                by_pid[sample.pid] = child
            child.nvml_peak[sample.device] = max(child.nvml_peak.get(sample.device, 0), sample.used_bytes)
            child.nvml_seen_ns = max(child.nvml_seen_ns, self.realtime_to_parent(sample.at_ns))

    def _reports_elsewhere(self, pid: int) -> bool:
        """Whether ``pid`` started with another run's spool in its environment: the children of a
        nested pytest --gpu-util run (pytester's runpytest_subprocess) report to that run, which
        measures them; the nested pytest process itself may never use CUDA, and so never say so
        here. Decided once per pid (on an H100, NVML named such a child "not measured" before)."""
        known = self._elsewhere.get(pid)
        if known is None:
            spool = environment_value(pid, SPOOL_ENV)
            ours = os.path.realpath(self.spool.directory)
            known = self._elsewhere[pid] = bool(spool) and os.path.realpath(spool) != ours
        return known

    def running(self, child: Child) -> bool:
        """Whether the child still runs and has not ended its records (once gone, it stays gone)."""
        if child.end is not None or child.header is None or child.gone:
            return False
        if is_running(child.header.pid, child.header.proc_start):
            return True
        child.gone = True
        try:
            child.gone_ns = int(self.parent_now())
        except Exception:  # noqa: BLE001 - only the note's bound needs it
            child.gone_ns = 0
        return False

    def wait_for(self, until_ns: int) -> list[Child]:
        """Ask running children to hand over up to ``until_ns`` and wait (bounded); the ones that did not."""
        lagging = [c for c in self.children.values() if self.running(c) and c.covered_ns < until_ns]
        if not lagging:
            return []
        self.spool.poke()
        lagging = [c for c in lagging if not c.slow]
        deadline = time.monotonic() + self.wait_s
        while lagging and time.monotonic() < deadline:
            time.sleep(0.01)
            self.read()
            lagging = [c for c in lagging if self.running(c) and c.covered_ns < until_ns]
        for child in lagging:
            child.slow = True
        return lagging

    # -- clocks and devices ---------------------------------------------------------------------
    def _offset(self, clock: int) -> int:
        """Add this to a child's time on ``clock`` to get this process's source clock."""
        parent = self.parent_now()
        real = time.time_ns()
        to_parent = 0 if abs(parent - real) < 1_000_000_000 else parent - real
        if clock == MONOTONIC:
            return to_parent + (time.time_ns() - time.monotonic_ns())
        return to_parent

    def _to_parent(self, header: Optional[Header], ns: int) -> int:
        return ns + self._offset(header.clock if header is not None else 0)

    def realtime_to_parent(self, ns: int) -> int:
        """A wall-clock time (ns) on this process's source clock."""
        return ns + self._offset(0)

    def _device_map(self, header: Header) -> Callable[[int], str]:
        mine, theirs = _visible(self.visible_devices), _visible(header.visible_devices)
        if mine == theirs:
            return str

        def to_parent(device: int) -> str:
            physical = theirs[device] if theirs is not None and device < len(theirs) else str(device)
            if mine is None:
                return physical if physical.isdigit() else f"GPU {physical}"
            return str(mine.index(physical)) if physical in mine else f"GPU {physical} (not visible to pytest)"

        return to_parent

    def columns_of(self, child: Child) -> GpuColumns:
        """The child's pending events on this process's clock and device numbering (names demangled)."""
        header = child.header
        parts = [e.columns() for e in child.pending if len(e)]
        if header is None or not parts:
            return GpuColumns()
        columns = concat_columns(parts)
        offset = self._offset(header.clock)
        device_of = self._device_map(header)
        names = columns.names
        if header.capture == INJECTION:
            names = CodedColumn(names.codes, [self._demangle_once(n) for n in names.values])
        devices = CodedColumn(columns.devices.codes, [device_of(int(d)) for d in columns.devices.values])
        return GpuColumns(names, CodedColumn(columns.kinds.codes, columns.kinds.values), devices, columns.streams,
                          np.asarray(columns.starts_ns, dtype=np.int64) + offset, columns.durs_ns)

    def _demangle_once(self, name: str) -> str:
        done = self._demangled.get(name)
        if done is None:
            try:
                done = self.demangle(name)
            except Exception:  # noqa: BLE001
                done = name
            self._demangled[name] = done
        return done


def _visible(text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    return [d.strip() for d in text.split(",") if d.strip()]


# -- NVML: which processes use a GPU ----------------------------------------------------------------

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
