"""GPU work straight from NVIDIA's CUPTI activity API: kernels, memcpy and memset, read in bulk.

torch.profiler (Kineto) records CUDA runtime calls too and turns every record into a Python
object when it stops; for a test of 2,000 tiny kernels that is ~13 µs per kernel on an H100.
Here CUPTI delivers its activity buffers to two ctypes callbacks that only keep them; a flush
walks each buffer once and pulls the fields out with numpy, so a record costs well under a
microsecond and nothing else is recorded.

- The library is the ``libcupti`` that torch already loaded (found in ``/proc/self/maps`` and
  opened with ``RTLD_NOLOAD``): a second copy would compete with Kineto for the driver.
- Kineto shares that one CUPTI (before driver r610 a process has one activity-tracing client).
  When a torch.profiler session starts, this source must already have flushed and disabled its
  kinds (``stop()``); Kineto then replaces the callbacks, turns the kinds off when it stops and
  leaves its own timestamp callback (raw TSC ticks) registered for good. ``start()`` therefore
  registers the callbacks and enables the kinds every time, and the clock is checked each time.
- Record layouts: every CUPTI version keeps the same offsets for the fields read here and only
  appends fields, so the size of each kind's record is learned from the library itself
  (``cuptiActivityGetNextRecord``) the first time that kind is seen; the buffers are read into
  columns by :mod:`pytest_gpuutil.capture.cupti_records`.
- With ``host_syncs`` (the default), the host's waits (a stream, event or context synchronize, with
  the host's start and end) come too, kept apart from the GPU work (``drain_syncs()``): what the
  findings' ``host-sync`` rule reads. With ``waits_from_callbacks`` they come from CUPTI's callback
  API at the synchronizing calls only (``host_waits.py``: no cost at a launch); else, or when
  another CUPTI subscriber holds the process, from CUPTI's synchronization records (activity kind
  38), which make every launch dearer (12.4 against 8.7 µs a tiny launch on an H100).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

from pytest_gpuutil.capture.cupti_records import (
    KIND_CONCURRENT_KERNEL,
    KIND_MEMCPY,
    KIND_MEMCPY2,
    KIND_MEMSET,
    KIND_SYNCHRONIZATION,
    CuptiError,
    ParsedRecords,
    SyncRecords,
    parse_all,
    sync_columns,
    to_columns,
)
from pytest_gpuutil.machine.loaded_libraries import find_loaded_library
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns

#: the activity kinds this source turns on (CONCURRENT_KERNEL does not serialise kernels)
ENABLED_KINDS = (KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMCPY2, KIND_MEMSET)

SUCCESS = 0
MAX_LIMIT_REACHED = 12
#: cuptiActivityFlushAll's flags: forced returns every buffer, records of running work included
#: (without their times); the default returns only buffers whose records are all complete
FLUSH_FORCED = 1
FLUSH_COMPLETED = 0
BUFFER_BYTES = 8 << 20
#: buffers kept for reuse; more are allocated (and later dropped) when CUPTI asks for them
SPARE_BUFFERS = 4


_REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                            ctypes.POINTER(ctypes.c_size_t))
_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)


def _bind(path: str) -> Any:
    """The loaded libcupti with the prototypes used here (never loads a second copy)."""
    lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)  # CDLL calls release the GIL
    protos = {
        "cuptiGetVersion": [ctypes.POINTER(ctypes.c_uint32)],
        "cuptiGetResultString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "cuptiGetTimestamp": [ctypes.POINTER(ctypes.c_uint64)],
        "cuptiActivityEnable": [ctypes.c_int],
        "cuptiActivityDisable": [ctypes.c_int],
        "cuptiActivityFlushAll": [ctypes.c_uint32],
        "cuptiActivityGetNextRecord": [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)],
        "cuptiActivityGetNumDroppedRecords": [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t)],
        "cuptiActivityRegisterCallbacks": [_REQUEST, _COMPLETE],
    }
    for name, argtypes in protos.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return lib


def _c_clock(lib: Any) -> Optional[Callable[[], int]]:
    """cuptiGetTimestamp read by the C module (``_waits.now``: the same call and value as the ctypes
    read, without ctypes' conversions), or None where the package was installed without it."""
    try:
        from pytest_gpuutil.capture import _waits  # type: ignore[attr-defined]
    except ImportError:
        return None
    set_now, now = getattr(_waits, "set_now", None), getattr(_waits, "now", None)
    address = ctypes.cast(lib.cuptiGetTimestamp, ctypes.c_void_p).value
    if set_now is None or now is None or not address:
        return None
    set_now(address)
    return now


class CuptiSource:
    """Kernels, memcpy and memset (and the host's waits) from CUPTI, collected until ``drain()`` (one
    process, one instance).

    ``start()`` (re)registers the buffer callbacks and enables the kinds; ``stop()`` flushes and
    disables them (before another profiler takes CUPTI over). ``now()`` reads CUPTI's clock in
    nanoseconds and records are converted the same way when they are flushed, so windows and
    events always share one time line; ``drain()`` returns what was collected.
    """

    name = "CUPTI"

    def __init__(self, library_path: Optional[str] = None, demangle: Optional[Callable[[str], str]] = None,
                 buffer_bytes: int = BUFFER_BYTES, host_syncs: bool = True, waits_from_callbacks: bool = False):
        path = library_path or find_loaded_library()
        if path is None:
            raise CuptiError("libcupti is not loaded in this process (a CPU build of torch, or torch not imported)")
        try:
            self._lib = _bind(path)
        except (OSError, AttributeError) as exc:
            raise CuptiError(f"cannot use {path}: {exc}") from None
        self.library_path = path
        self._demangle = demangle or (lambda name: name)
        self._buffer_bytes = buffer_bytes
        from pytest_gpuutil.capture.host_waits import SyncCallbacks

        #: the host's waits from CUPTI's callback API (None: from kind 38, or not recorded)
        self._callbacks = SyncCallbacks.open(self._lib) if host_syncs and waits_from_callbacks else None
        #: the activity kinds turned on: GPU work, and the host's waits with ``host_syncs`` (kind 38
        #: unless the callbacks record them)
        self.kinds = ENABLED_KINDS + ((KIND_SYNCHRONIZATION,) if host_syncs and self._callbacks is None else ())
        #: where the host's waits come from ("" when not recorded), and why not the callbacks
        self.host_waits = "" if not host_syncs else ("callbacks" if self._callbacks is not None else "kind 38")
        self.host_waits_note = ""
        #: set_quiet(flag) of the callbacks' C module: nothing recorded on this thread while set (the
        #: capture's own synchronizes at a window's edges); None without the callbacks
        self.quiet_waits: Optional[Callable[[bool], None]] = (
            getattr(self._callbacks._module, "set_quiet", None) if self._callbacks is not None else None)
        self._given: dict[int, np.ndarray] = {}  # address -> buffer CUPTI holds
        self._spare: list[np.ndarray] = []
        self._completed: list[tuple[np.ndarray, int]] = []
        #: the valid bytes of ``_completed``: what pending_bytes() answers, kept as an attribute so that the
        #: measurement's flush_due reads it at every teardown without a call (and without the lock)
        self.completed_bytes = 0
        self._lock = threading.Lock()  # the callbacks run on CUPTI's threads
        self._parsed: list[ParsedRecords] = []
        self._sync_parsed: list[SyncRecords] = []
        self._syncs_drained = SyncColumns()
        self._names: dict[int, str] = {}
        self._sizes: dict[int, int] = {}
        self._dropped = 0
        self._active = False
        #: None while CUPTI's clock is wall-clock ns; else (ticks, ns, ns per tick) mapping Kineto's TSC ticks
        self._tsc: Optional[tuple[int, int, float]] = None
        # ctypes callbacks must outlive every call CUPTI may make to them: kept for the process
        self._request_cb = _REQUEST(self._on_request)
        self._complete_cb = _COMPLETE(self._on_complete)
        #: whether start() ever ran; before it no CUPTI function has been called in this process
        self.ever_started = False
        #: cuptiGetTimestamp through the C module (capture/_waits.c: no ctypes conversion), else None
        self._c_ticks = _c_clock(self._lib)
        #: what now() returns once started while CUPTI's clock is wall-clock ns: the raw read itself
        self._now_fast: Optional[Callable[[], int]] = None

    @property
    def version(self) -> int:
        """CUPTI's API version (asked of the library; call it only where CUPTI may be used)."""
        version = ctypes.c_uint32()
        self._check(self._lib.cuptiGetVersion(ctypes.byref(version)), "cuptiGetVersion")
        return version.value

    # -- CUPTI's callbacks (run on CUPTI's threads; keep them short) ---------------------------
    def _on_request(self, buffer_ptr: Any, size_ptr: Any, max_records_ptr: Any) -> None:
        with self._lock:
            buffer = self._spare.pop() if self._spare else np.empty(self._buffer_bytes, dtype=np.uint8)
            address = buffer.ctypes.data
            self._given[address] = buffer
        buffer_ptr[0] = address
        size_ptr[0] = buffer.size
        max_records_ptr[0] = 0

    def _on_complete(self, context: Any, stream: int, address: Optional[int], size: int, valid: int) -> None:
        with self._lock:
            buffer = self._given.pop(address or 0, None)
            if buffer is not None:  # a buffer of ours (never touch another client's)
                self._completed.append((buffer, valid))
                self.completed_bytes += valid

    # -- control --------------------------------------------------------------------------------
    def _check(self, result: int, call: str) -> None:
        if result != SUCCESS:
            text = ctypes.c_char_p()
            self._lib.cuptiGetResultString(result, ctypes.byref(text))
            raise CuptiError(f"{call} failed: {text.value.decode() if text.value else 'error ' + str(result)}")

    def start(self) -> None:
        self.ever_started = True
        self._check(self._lib.cuptiActivityRegisterCallbacks(self._request_cb, self._complete_cb),
                    "cuptiActivityRegisterCallbacks")
        if self._callbacks is not None:
            why = self._callbacks.start()
            if why:  # for good: a subscriber that took over (Kineto's) keeps the process
                self._callbacks, self.host_waits, self.host_waits_note = None, "kind 38", why
                self.kinds = (*self.kinds, KIND_SYNCHRONIZATION)
        for kind in self.kinds:
            self._check(self._lib.cuptiActivityEnable(kind), f"cuptiActivityEnable({kind})")
        self._active = True
        self._tsc = self._clock_map()
        self._now_fast = (self._c_ticks or self._ticks) if self._tsc is None else None

    def stop(self) -> None:
        """Flush everything collected so far into this source, then turn the kinds off."""
        if not self._active:
            return
        self._active = False
        try:
            self._flush()
        finally:
            for kind in self.kinds:
                self._lib.cuptiActivityDisable(kind)
            if self._callbacks is not None:
                self._callbacks.stop()  # before another profiler subscribes
                self._take_waits()

    @property
    def running(self) -> bool:
        """Whether the activity kinds are on (between start() and stop())."""
        return self._active

    def records_off(self) -> None:
        """Turn the kernels' records off for a moment, keeping what was collected (a calibration's
        stretch of launches without records: measurement/unseen_cost.py); ``records_on()`` turns them
        on again (one kind each way: the other kinds stay on)."""
        self._lib.cuptiActivityDisable(KIND_CONCURRENT_KERNEL)

    def records_on(self) -> None:
        self._check(self._lib.cuptiActivityEnable(KIND_CONCURRENT_KERNEL),
                    f"cuptiActivityEnable({KIND_CONCURRENT_KERNEL})")

    def _ticks(self) -> int:
        if self._c_ticks is not None:
            return self._c_ticks()
        stamp = ctypes.c_uint64()
        self._lib.cuptiGetTimestamp(ctypes.byref(stamp))
        return stamp.value

    def now(self) -> int:
        """CUPTI's clock now, in the nanoseconds the records are converted to.

        Before the first start() this is the wall clock (``time.time_ns``), which is CUPTI's own
        default clock: no CUPTI function is called until the capture starts, because a process
        that has touched CUPTI before fork() leaves its forked children a CUPTI that records
        nothing and hangs at their exit (measured on an H100, CUPTI 13.0).
        """
        fast = self._now_fast
        if fast is not None:  # started, on CUPTI's own clock: the read is the answer (the per-test path)
            return fast()
        if not self.ever_started:
            return time.time_ns()
        ticks = self._ticks()
        if self._tsc is None:
            return ticks
        # what _to_ns does to a column, for one value: the same float64 product and round-half-even
        ref_ticks, ref_ns, ns_per_tick = self._tsc
        return ref_ns + round(float(ticks - ref_ticks) * ns_per_tick)

    def _to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Clock values as wall-clock ns: as they are, or TSC ticks mapped onto the wall clock."""
        if self._tsc is None:  # the same int64s as astype gives (uint64's bits), without a copy where they are 8 bytes
            return ticks.view(np.int64) if ticks.dtype.itemsize == 8 and ticks.dtype.kind in "iu" else ticks.astype(np.int64)
        ref_ticks, ref_ns, ns_per_tick = self._tsc
        offsets = ticks.astype(np.int64) - ref_ticks  # small enough for float64 to scale exactly to the ns
        return ref_ns + np.rint(offsets.astype(np.float64) * ns_per_tick).astype(np.int64)

    def pending_bytes(self) -> int:
        return self.completed_bytes  # one int: no lock and no sum per test (asked at every teardown)

    def drain(self) -> tuple[GpuColumns, int]:
        """Everything collected since the last drain (flushed first) and how many records CUPTI dropped.

        The flush is CUPTI's forced one: it also returns records of work still running, which come
        back without their times and are lost. Call it where the work it covers has finished."""
        return self._drain(FLUSH_FORCED)

    def drain_completed(self) -> tuple[GpuColumns, int]:
        """Like ``drain`` with CUPTI's default flush: a buffer that holds a record of work still
        running stays with CUPTI until that work ends (a child hands over this way while it runs)."""
        return self._drain(FLUSH_COMPLETED)

    def _drain(self, flag: int) -> tuple[GpuColumns, int]:
        if self._active:
            self._flush(flag)
        records = ParsedRecords.concat(self._parsed)
        self._parsed = []
        self._syncs_drained = sync_columns(SyncRecords.concat(self._sync_parsed))
        self._sync_parsed = []
        dropped, self._dropped = self._dropped, 0
        return to_columns(records, self._kernel_name), dropped

    def drain_syncs(self) -> SyncColumns:
        """The host's waits collected up to the last ``drain()`` (empty without ``host_syncs``)."""
        syncs, self._syncs_drained = self._syncs_drained, SyncColumns()
        return syncs

    # -- internals ------------------------------------------------------------------------------
    def _flush(self, flag: int = FLUSH_FORCED) -> None:
        self._check(self._lib.cuptiActivityFlushAll(flag), "cuptiActivityFlushAll")
        dropped = ctypes.c_size_t()
        if self._lib.cuptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(dropped)) == SUCCESS:
            self._dropped += dropped.value
        with self._lock:
            completed, self._completed = self._completed, []
            self.completed_bytes = 0
        for buffer, valid in completed:
            records, syncs = parse_all(buffer, valid, self._record_size(buffer, valid))
            # in ns now, while the clock they were stamped with is still the one in place
            self._parsed.append(dataclasses.replace(records, starts=self._to_ns(records.starts), ends=self._to_ns(records.ends)))
            if len(syncs):
                self._sync_parsed.append(dataclasses.replace(syncs, starts=self._to_ns(syncs.starts),
                                                             ends=self._to_ns(syncs.ends)))
            with self._lock:
                if len(self._spare) < SPARE_BUFFERS:
                    self._spare.append(buffer)
        self._take_waits()

    def _take_waits(self) -> None:
        """The waits the callbacks recorded since the last take, in ns (see host_waits.py)."""
        if self._callbacks is None:
            return
        types, starts, ends = self._callbacks.take()
        if types.size:
            self._sync_parsed.append(SyncRecords(types, self._to_ns(starts), self._to_ns(ends)))

    def _record_size(self, buffer: np.ndarray, valid: int) -> Callable[[int, int], int]:
        """size_of(kind, offset) for parse_buffer: known sizes, else asked of CUPTI once per kind."""
        base = buffer.ctypes.data

        def size_of(kind: int, offset: int) -> int:
            size = self._sizes.get(kind)
            if size is None:
                record = ctypes.c_void_p(base + offset)
                result = self._lib.cuptiActivityGetNextRecord(ctypes.c_void_p(base), ctypes.c_size_t(valid), ctypes.byref(record))
                if result == MAX_LIMIT_REACHED:  # the buffer's last record: it runs to the end
                    return valid - offset
                if result != SUCCESS or not record.value:
                    raise CuptiError(f"cannot size activity records of kind {kind} (cuptiActivityGetNextRecord: {result})")
                size = self._sizes[kind] = record.value - (base + offset)
            return size

        return size_of

    def _kernel_name(self, pointer: int) -> str:
        name = self._names.get(pointer)
        if name is None:
            raw = ctypes.string_at(pointer).decode("utf-8", errors="replace") if pointer else "<unnamed kernel>"
            name = self._names[pointer] = self._demangle(raw)
        return name

    def _clock_map(self) -> Optional[tuple[int, int, float]]:
        """None when CUPTI's clock is wall-clock nanoseconds (its default); else the TSC mapping.

        After a torch.profiler session, Kineto's timestamp callback (raw TSC ticks) stays in place
        for good. The ticks are mapped onto the wall clock (20 ms of calibration, once per process),
        so windows and records before and after the switch stay on one time line, in order.
        """
        if abs(self._ticks() - time.time_ns()) < 60_000_000_000:
            return None
        if self._tsc is not None:
            return self._tsc
        t0, c0 = time.time_ns(), self._ticks()
        while time.time_ns() - t0 < 20_000_000:
            pass
        t1, c1 = time.time_ns(), self._ticks()
        return c1, t1, ((t1 - t0) / (c1 - c0) if c1 > c0 else 1.0)
