"""Fixtures for every test module; shared helpers are in tests/helpers/."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs must not write into a real CI job summary or pick up the caller's options.

    They see an 80-column terminal whatever the caller's (a test sets COLUMNS for another width).
    """
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture(scope="module")
def warm_torch(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import what profiling imports lazily before pytester snapshots ``sys.modules``.

    In-process runs (pytester.runpytest) drop modules first imported inside them; torch's lazily
    imported parts register operator libraries that cannot be registered twice, so they must stay
    loaded. Modules with in-process runs use it: ``pytestmark = pytest.mark.usefixtures("warm_torch")``.
    """
    import torch
    import torch.autograd.profiler  # noqa: F401

    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.profiler import RegionProfiler
    from pytest_gpuutil.capture.timing import bench, bench_fwd_bwd
    from pytest_gpuutil.traces.reader import read_trace
    from tests.helpers import HAS_CUDA

    profiler = RegionProfiler(KernelClassifier(), cuda=HAS_CUDA, cpu_activity=True, keep=True)
    profiler.start()
    torch.ones(4, 4) @ torch.ones(4, 4)
    profiler.stop()
    path = tmp_path_factory.mktemp("warm") / "warm.json.gz"
    profiler.export(str(path))
    read_trace(str(path))
    bench(lambda: None, warmup_ms=0.1, rep_ms=0.1)
    bench_fwd_bwd(lambda: 1, lambda out: out, warmup=0, runs=1)
