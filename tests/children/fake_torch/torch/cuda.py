_initialized = False
_queued_calls = []
_peaks = {}


def is_initialized():
    return _initialized


def _lazy_call(fn):
    if _initialized:
        fn()
    else:
        _queued_calls.append(fn)


def init():
    global _initialized
    if not _initialized:
        for fn in _queued_calls:
            fn()
        _initialized = True


def device_count():
    return 2


def max_memory_allocated(device):
    return _peaks.get(device, 0)


def max_memory_reserved(device):
    return 2 * _peaks.get(device, 0)


def synchronize(device=None):
    """The fake GPU's work ran on the caller's thread: it has always finished."""
    init()


def work(name, dur_ns, kind=0, device=0, stream=7, memory=1 << 20):
    import torch

    init()
    _peaks[device] = max(_peaks.get(device, 0), memory)
    if torch._work is not None:
        torch._work(kind, name.encode(), int(dur_ns), device, stream)
