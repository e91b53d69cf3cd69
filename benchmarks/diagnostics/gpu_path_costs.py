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
- ``drain_us_per_record``: turning the collected records into columns.
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
