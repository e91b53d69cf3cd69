"""Machine information for gpu_util.json and baselines: GPU model and count, driver, versions, host."""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional


def _run(cmd: list[str], cwd: Optional[str] = None) -> Optional[str]:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def nvidia_smi_gpus() -> list[dict[str, str]]:
    """GPUs as nvidia-smi lists them (index, name, uuid, driver), without initialising CUDA."""
    out = _run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version", "--format=csv,noheader"])
    gpus = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append(dict(zip(("index", "name", "uuid", "driver"), parts)))
    return gpus


def nvidia_driver_version(path: str = "/proc/driver/nvidia/version") -> Optional[str]:
    """The NVIDIA driver's version from the kernel module's own file (Linux; no subprocess)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def torch_gpus(torch_module: Any) -> list[dict[str, str]]:
    """The GPUs this process sees, as nvidia_smi_gpus() lists them, asked of CUDA through torch.

    Only once torch has initialised CUDA here: asking would initialise it, and a test's forked
    child could then not use CUDA (callers fall back to nvidia-smi).
    """
    if not torch_module.cuda.is_initialized():
        return []
    count = torch_module.cuda.device_count()
    physical = visible_gpu_ids(physical_count=count)
    driver = nvidia_driver_version() or ""
    return [{"index": physical[i] if i < len(physical) else str(i), "name": torch_module.cuda.get_device_name(i),
             "uuid": "", "driver": driver} for i in range(count)]


def visible_gpu_ids(environ: Optional[dict[str, str]] = None, physical_count: Optional[int] = None) -> list[str]:
    """Physical GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else 0..count-1."""
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    count = len(nvidia_smi_gpus()) if physical_count is None else physical_count
    return [str(i) for i in range(count)]


def torch_versions_without_import() -> tuple[Optional[str], Optional[str]]:
    """(torch version, CUDA version) read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return None, None
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']+)'", text, re.M)
    return (version.group(1) if version else None), (cuda.group(1) if cuda else None)


#: CI systems' variables for the commit under test (GitHub, GitLab, Buildkite, Jenkins): where one is set it
#: names the commit, also where the checkout's own git history is missing or stale (a copied work tree)
CI_COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT")


def git_commit(cwd: Optional[str] = None) -> Optional[str]:
    """The commit under test: the CI's variable where one is set, else ``git rev-parse HEAD``."""
    from_ci = next((os.environ[v] for v in CI_COMMIT_VARIABLES if os.environ.get(v)), None)
    return from_ci or _run(["git", "rev-parse", "HEAD"], cwd=cwd)


def machine_info(cwd: Optional[str] = None, torch_module: Any = None) -> dict[str, Any]:
    """What ran the tests. ``torch_module`` is passed in when the caller has imported torch.

    With torch, the GPUs come from CUDA and the driver from /proc (no subprocess, while tests run
    on the GPU); without it, from nvidia-smi, which never initialises CUDA in this process.
    """
    gpus = torch_gpus(torch_module) if torch_module is not None else []
    if gpus and gpus[0]["driver"]:
        visible = [g["index"] for g in gpus]
    else:
        gpus = nvidia_smi_gpus()
        visible = visible_gpu_ids(physical_count=len(gpus))
    by_index = {g["index"]: g for g in gpus}
    by_uuid = {g["uuid"]: g for g in gpus}
    visible_gpus = [by_index.get(v) or by_uuid.get(v) for v in visible]
    visible_gpus = [g for g in visible_gpus if g]
    names = sorted({g["name"] for g in visible_gpus})
    info: dict[str, Any] = {
        "gpu_model": names[0] if len(names) == 1 else (" + ".join(names) or None),
        "gpu_count": len(visible_gpus),
        "gpus": [{"index": g["index"], "name": g["name"]} for g in visible_gpus],
        "driver": visible_gpus[0]["driver"] if visible_gpus else None,
        "cuda": None,
        "torch": None,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(cwd),
    }
    if torch_module is None:
        info["torch"], info["cuda"] = torch_versions_without_import()
    else:
        info["torch"] = str(torch_module.__version__)
        info["cuda"] = torch_module.version.cuda
        if not visible_gpus and torch_module.cuda.is_initialized():
            count = torch_module.cuda.device_count()
            info["gpu_count"] = count
            info["gpu_model"] = torch_module.cuda.get_device_name(0) if count else None
    info["cuda_available"] = bool(info["gpu_count"])
    info["argv"] = " ".join(sys.argv[1:])[:500]
    return info
