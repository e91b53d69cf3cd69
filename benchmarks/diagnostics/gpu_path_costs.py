"""(GPU) What each piece of the per-test path costs on the GPU host, in one process.

    python benchmarks/diagnostics/gpu_path_costs.py --out DIR [--launches 20000]

Prints and writes DIR/gpu_path_costs.json:

- ``launch_us``: one tiny kernel's launch (``x.add_(1)`` on 256 floats, ``--launches`` in a row,
  then a synchronize), median of 5 loops: without CUPTI, with the plugin's CUPTI source (GPU work
  only; then with the host's waits too, from activity kind 38 and from the callbacks at the
  synchronizing calls), and after it stopped;
- ``small_test_us``: the small overhead suite's test body (ones, mul, add, sum, item), the same way;
- ``call_us``: the per-test calls of the plugin's path, each timed over 5,000 calls: both
  synchronizes (also with the callbacks subscribed), CUDA's initialised check, CUPTI's clock, the
  memory counters (read, reset, the meter's begin and end; the accelerator API's read where torch has it);
  ``in_test.call_us`` also has the memory reads as a suite meets them (``... after a test's body``: each
  right after a small test's body and 4 MiB of host memory written, median of 300), beside the loops;
- ``drain_us_per_record``: turning the collected records into columns;
- ``in_test``: issue 41's in-test path, new calls against the old ones on the default config's source
  (CUPTI with the host's waits from callbacks): CUPTI's clock through the C module (``CuptiSource.now``)
  against the ctypes read it replaced; the memory meter's begin (resets only, one shared start)
  against its general begin (the code every call ran before: a new start each call), and its end
  (one read, one pass); the window edges' synchronize recorded by the host-wait callbacks (before)
  against the quiet one; a window's begin+end
  (``ContinuousCapture``) and the whole ``Measurement.begin``+``end`` of the default configuration
  (memory on, findings' places on); CUPTI's cost per record as the cost line's calibration finds it
  (measurement/unseen_cost.py) beside the launch loops' difference;
- ``clock``: whether CUPTI's clock is the wall clock exactly: 20,000 reads of ``time.time_ns()``, CUPTI's
  clock, ``time.time_ns()`` in a row; the share of CUPTI's reads inside their pair, the largest step
  outside, and the share that are whole microseconds (a clock of µs would be).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]


def per_call_us(function: Callable[[], Any], calls: int = 5000) -> float:
    for _ in range(100):
        function()
    began = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - began) / calls * 1e6


def loop_us(body: Callable[[], Any], count: int, torch: Any, rounds: int = 5,
            after_round: Callable[[], Any] = lambda: None) -> float:
    """Median microseconds of one ``body()`` over ``rounds`` loops of ``count`` (GPU synchronized
    around each loop; ``after_round`` runs outside the timing, e.g. to drain a capture)."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(count):
            body()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - began) / count * 1e6)
        after_round()
    return statistics.median(times)


def after_a_test(torch: Any, reads: dict[str, Callable[[], Any]], tests: int = 300) -> dict[str, float]:
    """Each read's median µs as a suite meets it: right after a small test's body and 4 MiB of the host's
    memory touched (the protocol between two tests leaves the caches cold; the loops above keep them warm).
    Issue 41: MemoryMeter.end took 35-52 µs a test in the small suite against 11-17 in a loop."""
    churn = bytearray(4 << 20)
    times: dict[str, list[float]] = {name: [] for name in reads}
    for index in range(tests):
        for name, read in reads.items():
            t = torch.ones(1024, device="cuda")
            (t * 3 + 1).sum().item()
            churn[index % 64::64] = bytes(len(churn[index % 64::64]))  # every cache line of 4 MiB written
            began = time.perf_counter()
            read()
            times[name].append(time.perf_counter() - began)
    return {f"{name} after a test's body (median)": statistics.median(got) * 1e6 for name, got in times.items()}


def in_test_calls(torch: Any, source: Any) -> dict[str, Any]:
    """Issue 41's in-test calls, new against old, on a running source (see the module docstring)."""
    import ctypes

    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture, synchronize_if_used
    from pytest_gpuutil.capture.flush_policy import FlushPolicy
    from pytest_gpuutil.capture.memory import MemoryMeter
    from pytest_gpuutil.measurement import Measurement
    from pytest_gpuutil.measurement.unseen_cost import calibrate_records
    from pytest_gpuutil.per_test import TestResults

    lib = source._lib

    def ctypes_read() -> int:  # what CuptiSource.now did before (issue 41)
        stamp = ctypes.c_uint64()
        lib.cuptiGetTimestamp(ctypes.byref(stamp))
        return stamp.value

    meter = MemoryMeter(torch)
    start = meter.begin()
    calls = {
        "CuptiSource.now (C module)": per_call_us(source.now),
        "cuptiGetTimestamp by ctypes (before)": per_call_us(ctypes_read),
        "time.time_ns": per_call_us(time.time_ns),
        "MemoryMeter.begin (resets, shared start)": per_call_us(meter.begin),
        "MemoryMeter._begin (before: a new start each call)": per_call_us(meter._begin),
        "MemoryMeter.end (one read)": per_call_us(lambda: meter.end(start)),
        "MemoryMeter.read (one read, its figures later)": per_call_us(meter.read),
        "_cuda_memoryStats": per_call_us(lambda: torch._C._cuda_memoryStats(0)),
        **after_a_test(torch, {"_cuda_memoryStats": lambda: torch._C._cuda_memoryStats(0),
                               "MemoryMeter.end": lambda: meter.end(start), "MemoryMeter.read": meter.read,
                               "_cuda_resetPeakMemoryStats": lambda: torch._C._cuda_resetPeakMemoryStats(0)}),
        "window-edge synchronize, recorded by the callbacks (before)": per_call_us(synchronize_if_used(torch)),
        "window-edge synchronize, quiet": per_call_us(synchronize_if_used(torch, source.quiet_waits)),
    }
    capture = ContinuousCapture(source, KernelClassifier(), synchronize=synchronize_if_used(torch, source.quiet_waits),
                                profiler_active=torch.autograd._profiler_enabled)
    capture.started = True

    def window() -> None:
        capture.begin("t")
        capture.end()

    calls["ContinuousCapture.begin+end"] = per_call_us(window, calls=2000)
    capture._closed.clear()
    measurement = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(),
                              findings=True, children=False)  # children: nothing per test, side effects at start
    measurement.prepare(torch, True, source)  # the default configuration on this source (memory, places)
    results = TestResults("t")

    def test_path() -> None:
        measurement.begin("t", results)
        measurement.end("t", results)

    calls["Measurement.begin+end (default)"] = per_call_us(test_path, calls=2000)
    measurement.windows.capture._closed.clear()
    measurement.memory.clear()
    places = measurement.windows.capture.places
    if places is not None:
        places.close()
    cost = calibrate_records(lambda: torch._C._cuda_sleep(0), torch._C._cuda_synchronize, source.records_off,
                             source.records_on)
    return {"call_us": calls, "record_cost": {"us_per_record": cost.us_per_record, "on_us": cost.on_us,
                                              "off_us": cost.off_us, "calibration_s": cost.calibration_s}}


def clock_identity(source: Any, reads: int = 20000) -> dict[str, Any]:
    """Whether CUPTI's clock is time.time_ns exactly (see the module docstring)."""
    inside = outside = whole_us = 0
    worst = 0
    for _ in range(reads):
        before = time.time_ns()
        got = source.now()
        after = time.time_ns()
        if before <= got <= after:
            inside += 1
        else:
            outside += 1
            worst = max(worst, before - got if got < before else got - after)
        whole_us += got % 1000 == 0
    return {"reads": reads, "inside_share": inside / reads, "outside": outside, "largest_step_outside_ns": worst,
            "whole_us_share": whole_us / reads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--launches", type=int, default=20000)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.memory import MemoryMeter

    torch.ones(1, device="cuda").sum().item()
    x = torch.zeros(256, device="cuda")

    def tiny() -> None:
        x.add_(1)

    def small_test() -> None:
        t = torch.ones(1024, device="cuda")
        (t * 3 + 1).sum().item()

    def loops() -> dict[str, float]:
        return {"tiny_launch": loop_us(tiny, args.launches, torch), "small_test": loop_us(small_test, 1000, torch)}

    result: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    plain = loops()
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=False)
    source.start()
    with_cupti = loops()
    began = time.perf_counter()
    columns, _ = source.drain()
    drain_s = time.perf_counter() - began
    records = len(columns)
    source.stop()
    source_syncs = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    source_syncs.start()
    with_syncs = loops()
    calls = {
        "cuda.synchronize": per_call_us(torch.cuda.synchronize),
        "_C._cuda_synchronize": per_call_us(torch._C._cuda_synchronize),
        "cuda.is_initialized": per_call_us(torch.cuda.is_initialized),
        "cupti.now": per_call_us(source_syncs.now),
        "_cuda_memoryStats": per_call_us(lambda: torch._C._cuda_memoryStats(0)),
        "_cuda_resetPeakMemoryStats": per_call_us(lambda: torch._C._cuda_resetPeakMemoryStats(0)),
        "cuda.memory_allocated": per_call_us(lambda: torch.cuda.memory_allocated(0)),
    }
    # the allocator's other reads, to find the cheapest (torch 2.9+: the accelerator API's)
    device_stats = getattr(torch._C, "_accelerator_getDeviceStats", None)
    if device_stats is not None:
        calls["_accelerator_getDeviceStats"] = per_call_us(lambda: device_stats(0))
    reset_accumulated = getattr(torch._C, "_cuda_resetAccumulatedMemoryStats", None)
    if reset_accumulated is not None:
        calls["_cuda_resetAccumulatedMemoryStats"] = per_call_us(lambda: reset_accumulated(0))
    meter = MemoryMeter(torch)
    calls["MemoryMeter.begin+end"] = per_call_us(lambda: meter.end(meter.begin()))
    source_syncs.drain()
    source_syncs.stop()
    source_callbacks = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True,
                                   waits_from_callbacks=True)
    source_callbacks.start()
    with_callbacks = loops()
    calls["_C._cuda_synchronize (callbacks on)"] = per_call_us(torch._C._cuda_synchronize)
    result["host_waits"] = source_callbacks.host_waits + (f" ({source_callbacks.host_waits_note})"
                                                          if source_callbacks.host_waits_note else "")
    for key, measure in (("in_test", in_test_calls), ("clock", lambda torch, source: clock_identity(source))):
        try:  # a failure here leaves the other figures
            result[key] = measure(torch, source_callbacks)
        except Exception as exc:  # noqa: BLE001
            result[key] = {"error": f"{type(exc).__name__}: {exc}"}
    source_callbacks.drain()
    source_callbacks.stop()
    after = loops()
    result.update({
        "launch_us": {name: got["tiny_launch"] for name, got in
                      (("plain", plain), ("cupti", with_cupti), ("cupti_host_syncs", with_syncs),
                       ("cupti_host_waits_callbacks", with_callbacks), ("after_stop", after))},
        "small_test_us": {name: got["small_test"] for name, got in
                          (("plain", plain), ("cupti", with_cupti), ("cupti_host_syncs", with_syncs),
                           ("cupti_host_waits_callbacks", with_callbacks), ("after_stop", after))},
        "call_us": calls,
        "drain": {"records": records, "s": drain_s, "us_per_record": drain_s / max(records, 1) * 1e6},
    })
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_path_costs.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print("issue 41, the in-test path (µs a call; new against before):")
    in_test, clock = result["in_test"], result["clock"]
    for name, us in in_test.get("call_us", {}).items():
        print(f"  {us:9.2f}  {name}")
    cost = in_test.get("record_cost")
    if cost:
        print(f"  CUPTI per record, the cost line's calibration: {cost['us_per_record']:.2f} µs (launch loops: "
              f"{result['launch_us']['cupti_host_waits_callbacks'] - result['launch_us']['plain']:.2f})")
    if "reads" in clock:
        print(f"  CUPTI's clock inside time.time_ns pairs: {clock['inside_share']:.4f} of {clock['reads']} reads "
              f"(largest step outside {clock['largest_step_outside_ns']} ns; whole µs {clock['whole_us_share']:.3f})")
    for key in ("in_test", "clock"):
        if "error" in result[key]:
            print(f"  {key}: {result[key]['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
