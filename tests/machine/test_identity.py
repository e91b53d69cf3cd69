"""Machine information read without subprocesses where it can be."""
from __future__ import annotations

import pytest

from pytest_gpuutil.machine.identity import nvidia_driver_version, visible_gpu_ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Oct 16 2025\n"
         "GCC version:  gcc version 12.3.0\n", "580.159.04"),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n", "535.104.05"),
        ("something else entirely\n", None),
    ],
)
def test_the_driver_version_comes_from_the_kernel_modules_file(tmp_path, text, expected) -> None:
    path = tmp_path / "version"
    path.write_text(text)
    assert nvidia_driver_version(str(path)) == expected


def test_no_driver_file_is_no_version(tmp_path) -> None:
    assert nvidia_driver_version(str(tmp_path / "missing")) is None


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpu_ids({}, physical_count=2) == ["0", "1"]
