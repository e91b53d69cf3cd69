"""The host's waits for the GPU from CUPTI's callback API, only at the synchronizing calls.

CUPTI's synchronization activity records (kind 38) tax every kernel launch: on an H100 a tiny
launch took 12.4 µs with them against 8.7 µs with the kernel records alone
(benchmarks/RESULTS.md, "2026-11-23 late evening"). The callback API costs nothing at a call whose
callback is not enabled, so here only the runtime's synchronizing calls are enabled:
``cudaStreamSynchronize`` (and its per-thread-stream form), ``cudaEventSynchronize``,
``cudaDeviceSynchronize`` and ``cudaThreadSynchronize`` — the calls torch makes for ``.item()``,
``.cpu()``, ``torch.cuda.synchronize()`` and ``event.synchronize()``. The callback is C
(``_waits.c``): it stamps CUPTI's clock on entry and exit and never takes Python's lock.

Unlike kind 38 this does not see a wait made through the driver API directly (``cuStreamSynchronize``
from a library that bypasses the runtime). A process has one CUPTI subscriber: when another holds
it (Kineto, after a torch.profiler session) :meth:`SyncCallbacks.start` raises and the source
falls back to kind 38 (see ``CuptiSource``).
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional

import numpy as np

#: CUpti_CallbackDomain of the runtime API
DOMAIN_RUNTIME = 2
#: the runtime's synchronizing calls (CUpti_runtime_api_trace_cbid) and the
#: CUpti_ActivitySynchronizationType each is recorded as (1 event, 3 stream, 4 context)
SYNC_CALLS = {
    131: 3,  # cudaStreamSynchronize_v3020
    239: 3,  # cudaStreamSynchronize_ptsz_v7000
    137: 1,  # cudaEventSynchronize_v3020
    165: 4,  # cudaDeviceSynchronize_v3020
    126: 4,  # cudaThreadSynchronize_v3020
}
#: the runtime's copies, enabled too: with the findings' places on, the callback records where each
#: copy was made and how long it held the host (capture/places/calls.py); without, it returns at once
COPY_CALLS = (31, 41)  # cudaMemcpy_v3020, cudaMemcpyAsync_v3020
#: one wait as _waits.c hands it over
WAIT_DTYPE = np.dtype([("type", "<u4"), ("cbid", "<u4"), ("start", "<u8"), ("end", "<u8")])


def load_module() -> Any:
    """The C callback's module, or None where the package was installed without it."""
    try:
        from pytest_gpuutil.capture import _waits  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _waits


def unpack(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(types, starts, ends) of the waits in ``raw`` (the bytes ``_waits.take()`` returns)."""
    waits = np.frombuffer(raw, dtype=WAIT_DTYPE)
    return waits["type"].copy(), waits["start"].copy(), waits["end"].copy()


class SyncCallbacks:
    """A CUPTI subscription with only the synchronizing runtime calls enabled (see the module)."""

    def __init__(self, lib: Any, module: Any):
        self._lib = lib
        self._module = module
        self._handle = ctypes.c_void_p()
        self.subscribed = False
        self.dropped = 0
        subscribe, enable, unsubscribe = lib.cuptiSubscribe, lib.cuptiEnableCallback, lib.cuptiUnsubscribe
        subscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        enable.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        unsubscribe.argtypes = [ctypes.c_void_p]
        for fn in (subscribe, enable, unsubscribe):
            fn.restype = ctypes.c_int
        timestamp = ctypes.cast(lib.cuptiGetTimestamp, ctypes.c_void_p).value or 0
        module.set_clock(timestamp)

    @classmethod
    def open(cls, lib: Any) -> Optional["SyncCallbacks"]:
        """The subscription's object (not yet subscribed), or None without the C module or the API."""
        module = load_module()
        if module is None:
            return None
        try:
            return cls(lib, module)
        except AttributeError:  # a libcupti without the callback API
            return None

    def start(self) -> Optional[str]:
        """Subscribe and enable the synchronizing calls; None, or why not (then nothing is enabled)."""
        if self.subscribed:
            return None
        result = self._lib.cuptiSubscribe(ctypes.byref(self._handle), self._module.callback_address(), None)
        if result != 0:
            return f"cuptiSubscribe returned {result} (another CUPTI subscriber, e.g. Kineto's, holds the process)"
        for cbid in (*SYNC_CALLS, *COPY_CALLS):
            result = self._lib.cuptiEnableCallback(1, self._handle, DOMAIN_RUNTIME, cbid)
            if result != 0:
                self._lib.cuptiUnsubscribe(self._handle)
                return f"cuptiEnableCallback({cbid}) returned {result}"
        self.subscribed = True
        return None

    def stop(self) -> None:
        """Unsubscribe (another profiler may then subscribe); the waits recorded stay until taken."""
        if self.subscribed:
            self.subscribed = False
            self._lib.cuptiUnsubscribe(self._handle)

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(types, starts, ends) of the waits since the last take, on CUPTI's raw clock."""
        raw, dropped = self._module.take()
        self.dropped += dropped
        return unpack(raw)
