"""The CUDA libraries this process has already loaded, from ``/proc/self/maps`` (Linux; None elsewhere).

Both sources of GPU figures use the libcupti torch loaded rather than a copy of their own: the
activity capture (``capture/cupti.py``) and PM sampling (``hardware/cupti_pm.py``).
"""
from __future__ import annotations

import os
from typing import Optional


def find_loaded_library(maps_path: str = "/proc/self/maps") -> Optional[str]:
    """The path of the libcupti this process has already loaded (torch loads it), or None."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                path = line.rstrip("\n").split(None, 5)[-1] if line.count(" ") >= 5 else ""
                if "libcupti.so" in os.path.basename(path):
                    return path
    except OSError:
        return None
    return None
