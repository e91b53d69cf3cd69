"""(GPU) Where the per-test analysis time goes: the cost of each torch profiler event accessor.

    python benchmarks/diagnostics/live_events_costs.py

Profiles 2,000 tiny kernels (CUDA activity only, as --gpu-util does), then times each accessor
of torch's in-memory Kineto events over all events, and the two steps of the plugin's analysis.
"""
from __future__ import annotations

import time

import torch

from pytest_gpuutil import KernelClassifier, analyze
from pytest_gpuutil.capture.live_events import trace_from_profiler
from pytest_gpuutil.capture.profiler import RegionProfiler


def ms(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


x = torch.zeros(1024, device="cuda")
for _ in range(100):
    x.add_(1)
profiler = RegionProfiler(KernelClassifier(), cuda=True, keep=True)
profiler.start()
for _ in range(2000):
    x.add_(1)
profile = profiler.stop()
results = profiler.prof.profiler.kineto_results
events = results.events()
print(f"{len(events)} events; torch {torch.__version__}")
print(f"events()                 {ms(results.events):8.3f} ms")
for name in ("device_type", "name", "device_index", "device_resource_id", "start_ns", "duration_ns",
             "is_user_annotation", "activity_type"):
    if hasattr(events[0], name):
        print(f"{name:24s} {ms(lambda: [getattr(ev, name)() for ev in events]):8.3f} ms for all events")
cuda = type(events[0].device_type()).CUDA
print(f"device_type() == CUDA    {ms(lambda: [ev.device_type() == cuda for ev in events]):8.3f} ms")
cuda_value = int(cuda)
print(f"device_type().value == int {ms(lambda: [ev.device_type().value == cuda_value for ev in events]):8.3f} ms")
print(f"trace_from_profiler      {ms(lambda: trace_from_profiler(profiler.prof)):8.3f} ms")
trace = trace_from_profiler(profiler.prof)
classifier = KernelClassifier()
print(f"analyze                  {ms(lambda: analyze(trace, classifier, window=profile.window)):8.3f} ms")
