"""Fixtures for the child-process tests: a fake libcupti and a fake torch, so that the Python
bootstrap, the injection library and the spool run for real on a machine without a GPU.

- ``fake_cupti.c`` is compiled into ``libcupti.so.13`` (skipped without a C compiler): CUPTI's
  activity API, fed by ``fake_work()`` instead of a GPU, records at CUPTI's byte offsets;
- ``fake_torch/torch`` loads it and offers what the bootstrap uses (``cuda._lazy_call``,
  ``cuda.is_initialized``, ``max_memory_allocated``, ``_C._demangle``, the autograd profiler
  hook) plus ``torch.cuda.work(name, ns)``, which "runs" a kernel that takes that long.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from pytest_gpuutil.children.spool import CUPTI_ENV, INJECTION_ENV, PERIOD_ENV, SELF_ENV, SPOOL_ENV, Spool

HERE = Path(__file__).resolve().parent
FAKE_TORCH = HERE / "fake_torch"
ROOT = HERE.parents[1]


@pytest.fixture(scope="session")
def fake_cupti(tmp_path_factory: pytest.TempPathFactory) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the fake libcupti")
    target = tmp_path_factory.mktemp("fake_cupti") / "libcupti.so.13"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(HERE / "fake_cupti.c"), "-lpthread"],
                   check=True, capture_output=True)
    return str(target)


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    made = Spool.create(str(tmp_path))
    yield made
    made.remove()


def child_env(spool: Spool, fake_cupti: Optional[str] = None, period: float = 0.2, inject: Optional[str] = None,
              **extra: str) -> dict[str, str]:
    """The environment a measured test's children inherit, plus the fake torch on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_GPUUTIL_") and k != INJECTION_ENV}
    env[SPOOL_ENV] = str(spool.directory)
    env[PERIOD_ENV] = str(period)
    env[SELF_ENV] = str(os.getpid())
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_TORCH), str(ROOT)])
    if fake_cupti:
        env["FAKE_CUPTI"] = env[CUPTI_ENV] = fake_cupti
    if inject:
        env[INJECTION_ENV] = inject
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result
