"""The source places of the host's synchronizing calls and copies, from the CUPTI callback (C).

With places on, ``_waits.c``'s callback also runs at the runtime's copies (``cudaMemcpy``,
``cudaMemcpyAsync``) and, on entry to each synchronizing call or copy, asks ``_frames.c`` for the
calling thread's innermost places outside torch, the plugin, pytest, pluggy and the standard
library (``_frames.c`` says how it reads them without the GIL). The records come back as
(call id, start, end, place ids) with a table of places by id; :meth:`CallPlaces.take` turns them into
:class:`~pytest_gpuutil.analysis.places.HostCalls`.

Cost: a copy now calls the callback (entry and exit: two clock reads, one frame walk), and a
synchronizing call walks its frames once; both well under the 5 µs a call the design allows (the
``where`` device step measures them, see docs/findings.md).
"""
from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any, Callable, Optional

import numpy as np

from pytest_gpuutil.analysis.places import COPY, SYNC, HostCalls, Site
from pytest_gpuutil.capture.host_waits import COPY_CALLS

#: one call as _waits.c hands it over
CALL_DTYPE = np.dtype([("cbid", "<u4"), ("n", "<u4"), ("start", "<u8"), ("end", "<u8"), ("places", "<u4", (3,)),
                       ("pad", "<u4")])


def skipped_prefixes() -> list[tuple[str, bool]]:
    """(folder, skipped) in the order they are tried, the first a file lies in deciding: torch (when
    loaded), this plugin, pytest and pluggy are skipped; the installed packages' folders kept (the
    user's own packages, timm's); the standard library skipped (site-packages may lie inside it)."""
    import site

    found: list[tuple[str, bool]] = []
    for name in ("torch", "pytest_gpuutil", "_pytest", "pytest", "pluggy", "triton", "numpy"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            found.append((os.path.dirname(path) + os.sep if os.path.basename(path) == "__init__.py" else path, True))
    kept = {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")}
    try:
        kept.update(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    found += [(os.path.join(path, ""), False) for path in sorted(p for p in kept if p)]
    found += [(os.path.join(path, ""), True) for key in ("stdlib", "platstdlib")
              if (path := sysconfig.get_paths().get(key))]
    return found


def is_users(path: str, prefixes: list[tuple[str, bool]]) -> bool:
    """Whether a frame's file is the user's code (what ``_frames.c`` decides in C)."""
    if path.startswith("<"):
        return False
    return not next((skipped for prefix, skipped in prefixes if path.startswith(prefix)), False)


def frames_module() -> Any:
    """_frames.c's module, or None where it was not built or cannot walk this Python's frames."""
    try:
        from pytest_gpuutil.capture.places import _frames  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _frames if _frames.walk_address() is not None else None


class CallPlaces:
    """Places at the synchronizing calls and copies: turns the C callback's frame reading on, takes its records."""

    def __init__(self, waits_module: Any, frames: Any, to_ns: Callable[[np.ndarray], np.ndarray]):
        self._waits = waits_module
        self._frames = frames
        self._to_ns = to_ns
        self._sites: dict[int, Site] = {}
        self._known = 0
        self.dropped = 0

    @classmethod
    def open(cls, to_ns: Callable[[np.ndarray], np.ndarray]) -> Optional["CallPlaces"]:
        """Frame reading at the callback, or None without the C parts (then places come from samples)."""
        from pytest_gpuutil.capture.host_waits import load_module

        waits, frames = load_module(), frames_module()
        if waits is None or frames is None or not hasattr(waits, "set_frame_reader"):
            return None
        return cls(waits, frames, to_ns)

    def start(self) -> None:
        self._frames.set_skips(skipped_prefixes())
        self._waits.set_frame_reader(self._frames.walk_address())

    def stop(self) -> None:
        self._waits.set_frame_reader(0)

    def take(self) -> HostCalls:
        """The calls recorded since the last take, with their places."""
        raw, dropped = self._waits.take_calls()
        self.dropped += dropped
        calls = np.frombuffer(raw, dtype=CALL_DTYPE)
        if not calls.size:
            return HostCalls()
        for pid, path, line, function in self._frames.places_after(self._known):
            self._sites[pid] = (path, line, function)
            self._known = max(self._known, pid)
        calls = calls[np.argsort(calls["start"], kind="stable")]  # in order of their starts (HostCalls.within)
        starts, ends = self._to_ns(calls["start"]).tolist(), self._to_ns(calls["end"]).tolist()
        kinds = [COPY if cbid in COPY_CALLS else SYNC for cbid in calls["cbid"].tolist()]
        sites = [tuple(self._sites[p] for p in row[:n] if p in self._sites)
                 for row, n in zip(calls["places"].tolist(), calls["n"].tolist())]
        return HostCalls(kinds, starts, ends, sites)
