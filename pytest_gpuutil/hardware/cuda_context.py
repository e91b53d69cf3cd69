"""The calling thread's CUDA context, taken on one thread and made current on another (driver API, ctypes).

PM sampling's set-up runs on the counters' thread (:mod:`pytest_gpuutil.hardware.deferred_start`),
where CUDA has made no context current; the thread that opened the counters had torch's. Making
that one current there too keeps CUPTI's calls in the state they had on the opening thread. Both
calls never raise: without libcuda loaded or a current context there is nothing to do.
"""
from __future__ import annotations

import ctypes as C
import os
from typing import Any, Optional

_LIBCUDA = "libcuda.so.1"


def _driver() -> Optional[Any]:
    try:
        return C.CDLL(_LIBCUDA, mode=os.RTLD_NOLOAD)  # only the one torch loaded
    except (OSError, AttributeError):
        return None


def current_context() -> Optional[int]:
    """The CUcontext current on this thread (None: none, or no CUDA driver loaded)."""
    lib = _driver()
    if lib is None:
        return None
    ctx = C.c_void_p()
    try:
        if lib.cuCtxGetCurrent(C.byref(ctx)) != 0:
            return None
    except AttributeError:
        return None
    return ctx.value or None


def make_current(ctx: Optional[int]) -> bool:
    """Make ``ctx`` current on this thread; False if it could not be (or there was none to make)."""
    lib = _driver() if ctx else None
    if lib is None:
        return False
    try:
        lib.cuCtxSetCurrent.argtypes = [C.c_void_p]
        return lib.cuCtxSetCurrent(C.c_void_p(ctx)) == 0
    except (AttributeError, C.ArgumentError):
        return False
