"""Development run for issue 21 (hardware counters): how the sampler behaves on a real GPU.

Run from the root of a checkout of branch issue21:  python3 gpucheck/dev_counters.py OUTDIR
Writes OUTDIR/dev_counters.json (and prints a short summary last). Every part runs in its own
try/except and the JSON is rewritten after each part, so a failing part loses only itself.
About 2 minutes on an H100.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "dev_counters_out")
OUT.mkdir(parents=True, exist_ok=True)
REPORT: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S")}


def save() -> None:
    (OUT / "dev_counters.json").write_text(json.dumps(REPORT, indent=1, default=str))


def part(name):
    def wrap(fn):
        began = time.perf_counter()
        try:
            REPORT[name] = fn()
        except Exception:  # noqa: BLE001
            REPORT[name] = {"error": traceback.format_exc()[-3000:]}
        REPORT.setdefault("part_seconds", {})[name] = round(time.perf_counter() - began, 2)
        save()
        print(f"[{name}] {REPORT['part_seconds'][name]} s", flush=True)
        return fn
    return wrap


import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.zeros(1, device="cuda")
torch.cuda.synchronize()

from pytest_gpuutil.analysis.counters import COUNTER_FIELDS  # noqa: E402
from pytest_gpuutil.capture.cupti import CuptiSource, find_loaded_library  # noqa: E402
from pytest_gpuutil.hardware.capture import CounterCapture  # noqa: E402
from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource  # noqa: E402
from pytest_gpuutil.hardware.nvml import GpmSource, open_device  # noqa: E402
from pytest_gpuutil.hardware.sampler import CounterSampler  # noqa: E402

LIB = find_loaded_library()
DEVICE = open_device(str(getattr(torch.cuda.get_device_properties(0), "uuid", "")), 0)
REPORT["env"] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "libcupti": LIB,
                 "uuid": str(getattr(torch.cuda.get_device_properties(0), "uuid", "")), "nvml_name": DEVICE.name}

A = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
B = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
BIG = torch.zeros(64 << 20, device="cuda")  # 256 MiB fp32
TINY = torch.zeros(1024, device="cuda")
WORK = {"matmul_bf16": lambda: A @ B, "elementwise_big": lambda: BIG.add_(1.0), "tiny_kernels": lambda: TINY.add_(1.0)}


def loop(fn, seconds):
    torch.cuda.synchronize()
    began, n = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        fn()
        n += 1
    torch.cuda.synchronize()
    return n, time.perf_counter() - began


def launches(n=20000):
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(n):
        TINY.add_(1.0)
    for _ in range(100):
        TINY.sum().item()
    torch.cuda.synchronize()
    return time.perf_counter() - began


def pm_sampler(interval_ms=1.0, max_samples=2000, hw=64 << 20, energy=True):
    pm = PmSamplingSource(LIB, 0, int(interval_ms * 1e6), max_samples=max_samples, hardware_buffer_bytes=hw)
    return CounterSampler(pm, DEVICE.energy_mj if energy else None, DEVICE.process_pids), pm


def gpm_sampler():
    return CounterSampler(GpmSource(DEVICE), DEVICE.energy_mj, DEVICE.process_pids)


def cost_dict(sampler):
    c = sampler.cost()
    d = dict(c.__dict__)
    src = sampler.source
    for k in ("decode_s", "evaluate_s", "overflows", "samples", "startup_steps", "chip", "fields", "metric_names",
              "period_ns", "max_samples", "hardware_buffer_bytes"):
        if hasattr(src, k):
            d[f"source_{k}"] = getattr(src, k)
    if getattr(src, "_image", None) is not None:
        d["image_bytes"] = int(src._image.size)
    d["error"] = sampler.error
    d["energy_error"] = sampler.energy_error
    d["process_error"] = sampler.process_error
    return d


@part("pm_startup_and_metrics")
def _():
    sampler, pm = pm_sampler()
    began = time.perf_counter()
    sampler.start()
    startup = time.perf_counter() - began
    extra = {}
    chip = pm.chip.encode()
    for name in ("sm__inst_executed_pipe_fma_type_fp16.avg.pct_of_peak_sustained_active",
                 "sm__inst_executed_pipe_fma_type_fp16.avg.pct_of_peak_sustained_elapsed",
                 "sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "smsp__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "pcie__read_bytes.sum.per_second"):
        try:
            extra[name] = "one pass" if pm._config([name], chip, keep=False) is not None else "not one pass / invalid"
        except Exception as exc:  # noqa: BLE001
            extra[name] = f"error {exc}"
    try:
        extra["chosen+fp16inst"] = "one pass" if pm._config(list(pm.metric_names) + [
            "sm__inst_executed_pipe_fma_type_fp16.avg.pct_of_peak_sustained_elapsed"], chip, keep=False) is not None else "no"
    except Exception as exc:  # noqa: BLE001
        extra["chosen+fp16inst"] = f"error {exc}"
    time.sleep(0.3)
    sampler.stop()
    samples, _, _ = sampler.collected()
    return {"startup_s": startup, "cost": cost_dict(sampler), "extra_metrics": extra, "samples": len(samples),
            "first_sample": [int(samples.start_ns[0]), int(samples.end_ns[0])] if len(samples) else None,
            "time_ns_now": time.time_ns()}


@part("variants")
def _():
    rows = []
    for interval_ms, max_samples, hw in ((0.25, 4000, 64 << 20), (0.5, 2000, 64 << 20), (1.0, 1000, 64 << 20),
                                         (1.0, 2000, 16 << 20), (1.0, 500, 64 << 20), (2.0, 1000, 64 << 20),
                                         (5.0, 500, 64 << 20), (10.0, 500, 64 << 20)):
        row = {"interval_ms": interval_ms, "max_samples": max_samples, "hw_mib": hw >> 20}
        try:
            row["baseline_tiny_launches_per_s"] = (lambda r: r[0] / r[1])(loop(WORK["tiny_kernels"], 0.8))
            sampler, pm = pm_sampler(interval_ms, max_samples, hw)
            began = time.perf_counter()
            sampler.start()
            row["startup_s"] = time.perf_counter() - began
            n, s = loop(WORK["tiny_kernels"], 0.8)
            row["tiny_launches_per_s"] = n / s
            loop(WORK["matmul_bf16"], 0.4)
            end = sampler.now()
            t = time.perf_counter()
            row["sync_ok"] = sampler.sync(end, timeout_s=1.0)
            row["sync_ms"] = (time.perf_counter() - t) * 1000
            loop(WORK["tiny_kernels"], 0.3)
            end = sampler.now()
            t = time.perf_counter()
            sampler.sync(end, timeout_s=1.0)
            row["sync2_ms"] = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            sampler.stop()
            row["stop_s"] = time.perf_counter() - t
            row.update(cost_dict(sampler))
            samples, _, _ = sampler.collected()
            row["samples_kept"] = len(samples)
            if len(samples):
                d = samples.end_ns - samples.start_ns
                row["sample_ns_median"] = int(np.median(d))
                gaps = samples.start_ns[1:] - samples.end_ns[:-1]
                row["gap_ns_max"] = int(gaps.max()) if gaps.size else 0
                row["gaps_over_1ms"] = int((gaps > 1_000_000).sum())
        except Exception:  # noqa: BLE001
            row["error"] = traceback.format_exc()[-1500:]
        rows.append(row)
        save()
    return rows


def busy_pct(columns, start, end):
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    keep = (ends > start) & (starts < end)
    s, e = np.clip(starts[keep], start, end), np.clip(ends[keep], start, end)
    order = np.argsort(s)
    s, e = s[order], e[order]
    busy, cur_s, cur_e = 0, None, None
    for a, b in zip(s.tolist(), e.tolist()):
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        busy += cur_e - cur_s
    return 100.0 * busy / (end - start)


def run_cases(sampler, with_activity=True, seconds=1.2):
    capture = CounterCapture(sampler)
    act = CuptiSource(demangle=torch._C._demangle) if with_activity else None
    if act:
        act.start()
    spans = {}
    for case, fn in WORK.items():
        torch.cuda.synchronize()
        a0 = act.now() if act else 0
        capture.begin(case)
        n, s = loop(fn, seconds)
        capture.end()
        spans[case] = (a0, act.now() if act else 0, n)
        time.sleep(0.15)
    figures = capture.flush()
    out = {}
    cols = None
    if act:
        act.stop()
        cols, dropped = act.drain()
    for case, (a0, a1, n) in spans.items():
        f = figures[case]
        out[case] = {"launches": n, **{k: f.values.get(k) for k in (*COUNTER_FIELDS, "gr_active_pct")},
                     "energy_j": f.energy_j, "avg_power_w": f.avg_power_w, "note": f.note,
                     "sums": f.sums.to_dict()}
        if cols is not None:
            out[case]["busy_pct"] = busy_pct(cols, a0, a1)
    return out


@part("cases_pm")
def _():
    sampler, pm = pm_sampler(1.0)
    sampler.start()
    res = run_cases(sampler)
    sampler.stop()
    return {"cases": res, "cost": cost_dict(sampler)}


@part("cases_gpm")
def _():
    sampler = gpm_sampler()
    sampler.start()
    res = run_cases(sampler, with_activity=False)
    sampler.stop()
    return {"cases": res, "cost": cost_dict(sampler)}


@part("pm_and_gpm_together")
def _():
    s1, _ = pm_sampler(1.0, energy=False)
    s2 = gpm_sampler()
    s1.start()
    s2.start()
    c1, c2 = CounterCapture(s1), CounterCapture(s2)
    out = {}
    for case in ("matmul_bf16", "elementwise_big"):
        c1.begin(case), c2.begin(case)
        loop(WORK[case], 1.0)
        c1.end(), c2.end()
    f1, f2 = c1.flush(), c2.flush()
    for case in f1:
        out[case] = {"pm": {k: f1[case].values.get(k) for k in COUNTER_FIELDS},
                     "gpm": {k: f2[case].values.get(k) for k in COUNTER_FIELDS}}
    s1.stop(), s2.stop()
    return {"cases": out, "pm_error": s1.error, "gpm_error": s2.error}


@part("energy_5s")
def _():
    sampler, _ = pm_sampler(1.0)
    sampler.start()
    capture = CounterCapture(sampler)
    time.sleep(0.3)
    e0, t0 = DEVICE.energy_mj(), time.time_ns()
    capture.begin("matmul5")
    loop(WORK["matmul_bf16"], 5.0)
    capture.end()
    e1, t1 = DEVICE.energy_mj(), time.time_ns()
    f = capture.flush()["matmul5"]
    sampler.stop()
    # a second, 2 s mixed run, short tests energy sums
    return {"spread_energy_j": f.energy_j, "direct_counter_j": (e1 - e0) / 1000, "seconds": (t1 - t0) / 1e9,
            "avg_power_w": f.avg_power_w, "sm_pct": f.values.get("sm_pct"), "note": f.note,
            "cost": cost_dict(sampler)}


@part("clock_after_torch_profiler")
def _():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        loop(WORK["tiny_kernels"], 0.1)
    import ctypes

    lib = ctypes.CDLL(LIB, mode=os.RTLD_NOLOAD)
    stamp = ctypes.c_uint64()
    lib.cuptiGetTimestamp(ctypes.byref(stamp))
    now = time.time_ns()
    sampler, _ = pm_sampler(1.0)
    sampler.start()
    loop(WORK["matmul_bf16"], 0.3)
    sampler.sync(sampler.now(), timeout_s=1.0)
    samples, _, _ = sampler.collected()
    sampler.stop()
    return {"cupti_ts_minus_time_ns": int(stamp.value) - now, "samples": len(samples), "error": sampler.error,
            "last_sample_end_minus_now_ns": int(samples.end_ns[-1]) - time.time_ns() if len(samples) else None}


@part("processes")
def _():
    t = time.perf_counter()
    for _ in range(50):
        DEVICE.process_pids()
    cost_ms = (time.perf_counter() - t) * 1000 / 50
    child = subprocess.Popen([sys.executable, "-c", "import torch,time; x=torch.ones(1<<20,device='cuda'); "
                              "torch.cuda.synchronize(); time.sleep(5)"])
    seen = []
    began = time.perf_counter()
    while time.perf_counter() - began < 5.5 and child.poll() is None:
        seen.append([round(time.perf_counter() - began, 2), sorted(DEVICE.process_pids())])
        time.sleep(0.5)
    child.wait(timeout=20)
    return {"process_pids_ms": cost_ms, "me": os.getpid(), "child": child.pid, "seen": seen}


def rounds(configs, rounds_n=5, work=launches):
    times = {name: [] for name in configs}
    for _ in range(rounds_n):
        for name, (enter, leave) in configs.items():
            state = enter()
            try:
                times[name].append(work())
            finally:
                leave(state)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"median_s": med, "all_s": times}


@part("launch_overhead")
def _():
    def plain():
        return None

    def with_pm():
        s, _ = pm_sampler(1.0)
        s.start()
        return s

    def with_pm5():
        s, _ = pm_sampler(5.0)
        s.start()
        return s

    def with_gpm():
        s = gpm_sampler()
        s.start()
        return s

    def act_only():
        a = CuptiSource(demangle=torch._C._demangle)
        a.start()
        return (a, None)

    def act_pm():
        a = CuptiSource(demangle=torch._C._demangle)
        a.start()
        s, _ = pm_sampler(1.0)
        s.start()
        return (a, s)

    def stop(state):
        if state is None:
            return
        if isinstance(state, tuple):
            a, s = state
            a.stop()
            a.drain()
            if s is not None:
                s.stop()
            return
        state.stop()

    launches(2000)
    res = rounds({"plain": (plain, stop), "pm_1ms": (with_pm, stop), "pm_5ms": (with_pm5, stop), "gpm": (with_gpm, stop),
                  "activity": (act_only, stop), "activity+pm_1ms": (act_pm, stop)})
    base = res["median_s"]["plain"]
    res["ratio_to_plain"] = {k: v / base for k, v in res["median_s"].items()}
    res["activity+pm_over_activity"] = res["median_s"]["activity+pm_1ms"] / res["median_s"]["activity"]
    return res


def summary():
    lines = []
    s = REPORT.get("pm_startup_and_metrics", {})
    lines.append(f"PM start-up {s.get('startup_s')} s, fields {s.get('cost', {}).get('source_fields')}")
    for case, r in (REPORT.get("cases_pm", {}).get("cases") or {}).items():
        lines.append(f"PM  {case}: busy {r.get('busy_pct')} sm {r.get('sm_pct')} tensor {r.get('tensor_pct')} "
                     f"dram {r.get('dram_bw_pct')} energy {r.get('energy_j')} note {r.get('note')!r}")
    for case, r in (REPORT.get("cases_gpm", {}).get("cases") or {}).items():
        lines.append(f"GPM {case}: sm {r.get('sm_pct')} tensor {r.get('tensor_pct')} dram {r.get('dram_bw_pct')} "
                     f"energy {r.get('energy_j')}")
    for row in REPORT.get("variants", []) if isinstance(REPORT.get("variants"), list) else []:
        lines.append(f"variant {row.get('interval_ms')} ms/{row.get('max_samples')}/{row.get('hw_mib')}MiB: "
                     f"tiny {row.get('tiny_launches_per_s')} vs {row.get('baseline_tiny_launches_per_s')}/s, "
                     f"cpu {row.get('thread_cpu_s')} s, decode {row.get('source_decode_s')} s, "
                     f"eval {row.get('source_evaluate_s')} s, samples {row.get('samples')}, sync {row.get('sync_ms')} ms, "
                     f"err {row.get('error', '')[:80]!r}")
    e = REPORT.get("energy_5s", {})
    lines.append(f"energy 5 s: spread {e.get('spread_energy_j')} J vs counter {e.get('direct_counter_j')} J")
    lo = REPORT.get("launch_overhead", {})
    lines.append(f"launch overhead ratios: {lo.get('ratio_to_plain')}")
    return lines


if __name__ == "__main__":
    REPORT["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save()
    print("\n".join(summary()))
