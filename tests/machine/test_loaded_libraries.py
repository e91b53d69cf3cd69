"""The libcupti this process loaded, found in its memory maps (a real file laid out as /proc/PID/maps)."""
from __future__ import annotations

from pytest_gpuutil.machine.loaded_libraries import find_loaded_library


def test_the_loaded_library_is_found_in_the_process_maps(tmp_path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 456 /venv/site-packages/nvidia/cu13/lib/libcupti.so.13\n"
        "7f04-7f05 rw-p 00000000 00:00 0 \n"
    )
    assert find_loaded_library(str(maps)) == "/venv/site-packages/nvidia/cu13/lib/libcupti.so.13"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/libc.so.6\n")
    assert find_loaded_library(str(maps)) is None
    assert find_loaded_library(str(tmp_path / "missing")) is None
