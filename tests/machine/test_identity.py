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


def test_the_ci_commit_variable_names_the_commit_over_a_stale_checkout(tmp_path, monkeypatch) -> None:
    """A copied work tree whose .git is stale (a CI cache, a device copy) still names the commit under test."""
    import subprocess

    from pytest_gpuutil.machine.identity import CI_COMMIT_VARIABLES, git_commit

    for name in CI_COMMIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "stale"], check=True)
    stale = git_commit(str(tmp_path))
    assert stale and len(stale) == 40
    monkeypatch.setenv("GITHUB_SHA", "c75b690")
    assert git_commit(str(tmp_path)) == "c75b690"
