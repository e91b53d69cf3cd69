"""(GPU) How much each part of the hardware-counter sampler slows the thread that runs the tests.

    python benchmarks/diagnostics/counter_interference.py --out DIR [--rounds 3]

In one process, with the CUPTI activity capture on (as under --gpu-util), the main thread runs
three workloads with the sampler in each configuration, configurations interleaved round after
round: ``small`` (300 of the overhead suite's small tests' bodies), ``launch`` (2,000 tiny
``add_`` and a synchronize, three times) and ``python`` (a pure-Python loop: what holding the GIL
costs). Configurations: no sampler; PM sampling with energy and the process check (what
``--gpu-util-counters auto`` runs: 5 ms), at 1 and 10 ms, and with energy and the process check
every 0.5 s instead of 0.1 s; PM sampling alone; the energy reads alone; the process check alone;
GPM with both. Each gets the sampler's own cost (thread CPU, polls, decode and evaluation time).
Then the session's end: the python loop while the sampler is released in the background. Writes
DIR/interference.json and a table: per workload the median ms and the median over rounds of the
ratio to the same round's run without a sampler.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path


def workloads(torch):
    def small():
        for i in range(300):
            x = torch.ones(1024, device="cuda")
            y = (x * i + 1).sum()
            assert y.item() == 1024 * (i + 1)
            torch.cuda.synchronize()

    x = torch.ones(1024, device="cuda")

    def launch():
        for _ in range(3):
            for _ in range(2000):
                x.add_(1.0)
            torch.cuda.synchronize()

    def python():
        total = 0
        for i in range(400_000):
            total += i * i
        return total

    return {"small": small, "launch": launch, "python": python}


def make_sampler(name, torch, library, device):
    from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource
    from pytest_gpuutil.hardware.nvml import GpmSource
    from pytest_gpuutil.hardware.sampler import CounterSampler

    def pm(interval_ms, **kw):
        return PmSamplingSource(library, device_index=torch.cuda.current_device(), interval_ns=int(interval_ms * 1e6), **kw)

    full = {"energy_mj": device.energy_mj, "process_pids": device.process_pids}
    if name == "pm5_full":  # what --gpu-util-counters auto runs
        return CounterSampler(pm(5), **full)
    if name == "pm1_full":
        return CounterSampler(pm(1), **full)
    if name == "pm10_full":
        return CounterSampler(pm(10), **full)
    if name == "pm5_slow_ticks":  # energy and the process check every 0.5 s instead of 0.1 s
        return CounterSampler(pm(5), **full, tick_s=0.5)
    if name == "pm5_source":
        return CounterSampler(pm(5))
    if name == "energy":
        return CounterSampler(None, device.energy_mj)
    if name == "processes":
        return CounterSampler(None, None, device.process_pids)
    if name == "gpm_full":
        return CounterSampler(GpmSource(device), **full)
    raise ValueError(name)


CONFIGS = ("none", "pm5_full", "pm1_full", "pm10_full", "pm5_slow_ticks", "pm5_source", "energy", "processes", "gpm_full")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", action="append", choices=CONFIGS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.hardware.nvml import open_device
    from pytest_gpuutil.machine.loaded_libraries import find_loaded_library

    torch.ones(1, device="cuda").sum().item()
    activity = CuptiSource(demangle=torch._C._demangle)
    activity.start()
    library = find_loaded_library()
    props = torch.cuda.get_device_properties(0)
    device = open_device(str(getattr(props, "uuid", "") or ""), 0)
    work = workloads(torch)
    for fn in work.values():  # warm-up
        fn()
    activity.drain()
    configs = args.config or list(CONFIGS)
    times: dict = {c: {w: [] for w in work} for c in configs}
    costs: dict = {c: [] for c in configs}
    for _ in range(args.rounds):
        for config in configs:
            sampler = None
            if config != "none":
                sampler = make_sampler(config, torch, library, device)
                sampler.start()
                time.sleep(0.15)
            began_all = time.perf_counter()
            for name, fn in work.items():
                t = time.perf_counter()
                fn()
                times[config][name].append((time.perf_counter() - t) * 1000)
                activity.drain()  # as the plugin's flushes do
            wall = time.perf_counter() - began_all
            if sampler is not None:
                sampler.stop()
                cost = dataclasses.asdict(sampler.cost())
                src = sampler.source
                cost.update({k: getattr(src, k) for k in ("decode_s", "evaluate_s", "samples", "overflows", "image_resets")
                             if src is not None and hasattr(src, k)})
                cost["workloads_wall_s"] = wall
                costs[config].append(cost)
    # the session's end: a background release while the main thread works
    release = {}
    sampler = make_sampler("pm1_full", torch, library, device)
    sampler.start()
    time.sleep(0.5)
    work["python"]()
    t = time.perf_counter(); work["python"](); alone = time.perf_counter() - t
    t = time.perf_counter()
    sampler.stop(background=True)
    returned = time.perf_counter() - t
    work["python"]()
    during = time.perf_counter() - t - returned
    release = {"stop_returned_ms": returned * 1000, "python_alone_ms": alone * 1000, "python_during_release_ms": during * 1000}
    activity.stop()
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": args.rounds,
           "times_ms": times, "costs": costs, "release": release}
    (args.out / "interference.json").write_text(json.dumps(doc, indent=1))
    paired = {c: {w: statistics.median(t / b for t, b in zip(times[c][w], times["none"][w])) for w in work}
              for c in configs} if "none" in times else {}
    doc["paired_ratio"] = paired
    (args.out / "interference.json").write_text(json.dumps(doc, indent=1))
    print(f"{doc['gpu']}, torch {doc['torch']}: median ms per workload (median of the rounds' ratios to no sampler)")
    for config in configs:
        cells = []
        for w in work:
            med = statistics.median(times[config][w])
            cells.append(f"{w} {med:8.2f}" + (f" ({paired[config][w]:.3f})" if paired else ""))
        extra = ""
        if costs[config]:
            c = costs[config][-1]
            extra = (f"  thread {c['thread_cpu_s'] / max(c['wall_s'], 1e-9) * 100:.1f}% cpu, polls {c['polls']} "
                     f"({c['poll_s'] * 1000:.0f} ms), decode {c.get('decode_s', 0) * 1000:.0f} ms, evaluate "
                     f"{c.get('evaluate_s', 0) * 1000:.0f} ms, samples {c['samples']}, energy {c['energy_reads']} "
                     f"({c['energy_s'] * 1000:.0f} ms), checks {c['process_checks']} ({c['process_s'] * 1000:.0f} ms)")
        print(f"  {config:11} " + "  ".join(cells) + extra)
    print("release:", json.dumps({k: round(v, 1) for k, v in release.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
