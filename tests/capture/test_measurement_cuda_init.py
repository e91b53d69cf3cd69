"""The measuring process never initialises CUDA itself: a test's forked child could then not use it.

CUPTI's activity capture already waits for torch to bring CUDA up (see test_continuous_capture);
the hardware counters must too: asking torch for the current device (as the counters need) would
initialise CUDA in the pytest process before any test did.
"""
from __future__ import annotations

from types import SimpleNamespace

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.measurement import Measurement
from tests.capture.test_continuous_capture import ScriptedSource


def stand_in_torch(asked: list[str]) -> SimpleNamespace:
    """Just enough torch: CUDA comes up when ``up`` is set; every device query is recorded."""
    state = {"up": False}

    def current_device() -> int:
        asked.append("current_device")
        state["up"] = True  # as torch does: asking initialises CUDA
        return 0

    cuda = SimpleNamespace(
        is_initialized=lambda: state["up"],
        current_device=current_device,
        get_device_properties=lambda index: SimpleNamespace(uuid="", name="stand-in GPU"),
        synchronize=lambda: None,
        device_count=lambda: 1,
    )
    C = SimpleNamespace(_cuda_memoryStats=lambda device: {}, _cuda_resetPeakMemoryStats=lambda device: None)
    torch = SimpleNamespace(cuda=cuda, _C=C, autograd=SimpleNamespace(profiler=SimpleNamespace()))
    torch.bring_cuda_up = lambda: state.update(up=True)
    return torch


def measurement() -> Measurement:
    return Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(),
                       counters="auto", children=False)


def test_counters_wait_for_cuda_and_open_between_tests() -> None:
    asked: list[str] = []
    torch = stand_in_torch(asked)
    m = measurement()
    m.prepare(torch, True, ScriptedSource())
    assert asked == [] and not torch.cuda.is_initialized()  # the session's start left CUDA alone
    results = SimpleNamespace(measurement=None)
    m.begin("test_cpu_only", results)  # a test before CUDA is up: still nothing asked
    m.end("test_cpu_only", results)
    assert asked == []
    torch.bring_cuda_up()  # a test used the GPU
    m.begin("test_next", results)  # the counters open now, before this window
    assert asked == ["current_device"]
    assert m.counters is not None or m.counters_fallback  # opened, or one line saying why not (no GPU here)
    m.end("test_next", results)
    m.begin("test_after", results)
    assert asked == ["current_device"]  # once
    m.end("test_after", results)
    m.close()


def test_counters_open_at_once_where_cuda_was_already_up() -> None:
    asked: list[str] = []
    torch = stand_in_torch(asked)
    torch.bring_cuda_up()  # e.g. a conftest that used the GPU at import
    m = measurement()
    m.prepare(torch, True, ScriptedSource())
    assert asked == ["current_device"]
    m.close()
