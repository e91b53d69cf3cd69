"""(GPU) The hardware counters against workloads whose use of the GPU is known.

    python validation/hardware_truth.py OUTDIR [--budget-s 85] [--overhead-json PATH] [--overhead]

Runs ``pytest --gpu-util`` (fresh processes) on workloads of known character and checks what the
records say: a bf16 matmul loop keeps the tensor pipes busy (tensor >= 70 %), a 256 MiB elementwise
loop the DRAM (>= 60 %), a loop of 1k-element kernels is busy but barely uses the SMs (busy % >= 10x
SM %); the energy of a 5 s run is within 10 % of NVML's energy counter read around it; CUPTI PM
sampling and NVML GPM agree (within 10 points); the counters still come after a test's own
torch.profiler session; kernel_bench gives the share of the device's peak and the counters of its
reps; the first test of a process, which brings CUDA up in its call, says in its counters_note what
its figures cover, and those are within 5 points of a later identical test's. Then the sampler's
cost beside the activity capture (start-up, decode and evaluation per second, its thread's CPU). About 55 s on an H100; every part has a hard timeout and the whole run
stops starting parts after ``--budget-s``.

The overhead suites are not run here by default: ``scripts/device.sh``'s ``overhead`` step runs
them for every feature (``OVERHEAD_ARGS="--variant counters_on=--gpu-util-counters=auto"`` adds a
run with the counters on; they are off by default), and its ``overhead.json`` (``--overhead-json``; by default
OUTDIR/overhead.json when present) gives ``overhead_ratio``: the worst suite's --gpu-util time
with the counters on over its plain time (without the one-time start-ups), as the issue asks,
and ``counters_own_ratio``: the worst suite's time with the counters on over the time with them
off (the counters' own share; ``overhead_ratio_of`` says which figure is which).
``--overhead`` runs the suites here instead (plain / counters off / counters on, interleaved).

Writes OUTDIR/hardware.json (``{"cases": [...], "overhead_ratio": ..., "checks": [...], ...}``: the
shape of ``benchmarks/results/<date>_<gpu>/hardware.json``), OUTDIR/hardware.md (the README's
figures from this run, ready to paste), OUTDIR/hardware_truth.log (the pytest outputs), and prints
a short summary last; exits 1 when a check fails. hardware.json is rewritten after each part, so a
failing or timed-out part loses only itself.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_overhead import HERE as BENCH_DIR  # noqa: E402
from benchmarks.bench_overhead import SUITES, first_float, reported_seconds  # noqa: E402

CASES = ("matmul_bf16", "elementwise_big", "tiny_kernels")
STARTUP = re.compile(r"profiler start-up ([0-9.]+) s")
COUNTERS_STARTUP = re.compile(r"hardware counters start-up ([0-9.]+) s")

#: The workloads, as a test file (fixtures build the tensors outside the measured calls)
WORKLOADS = r'''
import json, os, time

import pytest
import torch


def loop(fn, seconds):
    torch.cuda.synchronize()
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        fn()
    torch.cuda.synchronize()


@pytest.fixture(scope="module")
def mm():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ b).sum().item()
    return lambda: a @ b


@pytest.fixture(scope="module")
def big():
    x = torch.zeros(64 << 20, device="cuda")  # 256 MiB of fp32
    return lambda: x.add_(1.0)


@pytest.fixture(scope="module")
def tiny():
    x = torch.zeros(1024, device="cuda")
    return lambda: x.add_(1.0)


def test_matmul_bf16(mm):
    loop(mm, 1.0)


def test_elementwise_big(big):
    loop(big, 1.0)


def test_tiny_kernels(tiny):
    loop(tiny, 1.0)


def test_energy_5s(mm):
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("HW_TRUTH_NVML_INDEX", "0")))
    torch.cuda.synchronize()
    e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.time_ns()
    loop(mm, 5.0)
    e1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.time_ns()
    with open(os.environ["HW_TRUTH_ENERGY"], "w") as out:
        json.dump({"counter_j": (e1 - e0) / 1000, "seconds": (t1 - t0) / 1e9}, out)


def test_own_profiler_session(mm):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        loop(mm, 0.2)


def test_zz_after_a_profiler_session(mm):
    loop(mm, 0.5)


def test_kernel_bench_matmul(kernel_bench, mm):
    result = kernel_bench(mm, flops=2 * 8192 ** 3, rep_ms=300, flush_l2=False, label="matmul_bf16")
    assert result.tflops is not None
'''


#: The first test of a process brings CUDA up in its call; the second does the same work with CUDA up
FIRST_CUDA = r'''
import time

import torch


def work():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)  # the first test's CUDA comes up here
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    began = time.perf_counter()
    while time.perf_counter() - began < 1.5:
        a @ b
    torch.cuda.synchronize()


def test_first_brings_cuda_up():
    assert not torch.cuda.is_initialized()
    work()


def test_later_identical():
    work()
'''


def first_cuda_run(run: "Run", work: Path, timeout: float) -> dict[str, Any]:
    """first_test_brings_cuda_up: its counters_note is not empty, and where it has figures they are
    within 5 points of the later identical test's."""
    folder = work / "first_cuda"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_first_cuda.py").write_text(FIRST_CUDA)
    (folder / "conftest.py").write_text("")
    run_pytest(run, ["test_first_cuda.py", "-q", "--gpu-util", "--gpu-util-counters=auto", f"--gpu-util-dir={folder / 'out'}",
                     "--rootdir", str(folder)], folder, timeout=timeout, env={"COLUMNS": "400"})
    records = {t["test"].split("::")[-1]: t for t in json.loads((folder / "out" / "gpu_util.json").read_text())["tests"]}
    first, later = records["test_first_brings_cuda_up"], records["test_later_identical"]
    metrics = ("sm_pct", "tensor_pct", "dram_bw_pct")
    differences = {m: None if first.get(m) is None or later.get(m) is None else round(first[m] - later[m], 2) for m in metrics}
    return {"case": "first_test_brings_cuda_up", **{k: first.get(k) for k in FIELDS}, "note": first.get("note"),
            "later": {k: later.get(k) for k in FIELDS}, "differences": differences,
            "ok": bool(first.get("counters_note")) and all(abs(d) <= 5 for d in differences.values() if d is not None)}


class Run:
    """The results so far, written after every part."""

    def __init__(self, out: Path):
        self.out = out
        self.doc: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "parts_s": {}, "errors": {}}
        self.log = open(out / "hardware_truth.log", "w", encoding="utf-8")

    def save(self) -> None:
        (self.out / "hardware.json").write_text(json.dumps(self.doc, indent=1, default=str) + "\n")

    def part(self, name: str, fn: Any, *args: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - one part failing leaves the others' results
            self.doc["errors"][name] = traceback.format_exc()[-3000:]
            return None
        finally:
            self.doc["parts_s"][name] = round(time.perf_counter() - began, 2)
            self.save()
            print(f"[{name}] {self.doc['parts_s'][name]} s", flush=True)


def _plugin_args() -> tuple[list[str], dict[str, str]]:
    """``-p pytest_gpuutil.plugin`` and this checkout on PYTHONPATH when the package is not installed."""
    from importlib.metadata import entry_points

    installed = any(e.name == "gpuutil" for e in entry_points(group="pytest11"))
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return ([] if installed else ["-p", "pytest_gpuutil.plugin"]), {"PYTHONPATH": path}


def run_pytest(run: Run, args: list[str], cwd: Path, timeout: float, env: Optional[dict] = None) -> str:
    plugin, path = _plugin_args()
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin, *args]
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **path, **(env or {})})
    output = res.stdout + res.stderr
    run.log.write(f"$ {' '.join(cmd)}  (rc {res.returncode})\n{output}\n")
    run.log.flush()
    return output


def workload_run(run: Run, mode: str, work: Path, timeout: float, select: str = "") -> dict[str, Any]:
    """The workloads under --gpu-util with the counters from ``mode`` (cupti, gpm); ``select``: a -k expression."""
    folder = work / f"cases_{mode}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_hw_truth.py").write_text(WORKLOADS)
    (folder / "conftest.py").write_text("")
    energy = folder / "energy.json"
    output = run_pytest(run, ["test_hw_truth.py", "-q", "--gpu-util", f"--gpu-util-counters={mode}",
                              f"--gpu-util-dir={folder / 'out'}", "--rootdir", str(folder),
                              *(["-k", select] if select else [])], folder, timeout=timeout,
                        env={"HW_TRUTH_ENERGY": str(energy), "COLUMNS": "400"})  # summary lines whole
    doc = json.loads((folder / "out" / "gpu_util.json").read_text())
    records = {t["test"].split("::")[-1]: t for t in doc["tests"]}
    return {"records": records, "totals": doc.get("totals", {}), "counters": doc.get("counters", {}),
            "machine": doc.get("machine_info", {}),
            "energy": json.loads(energy.read_text()) if energy.exists() else None,
            "summary": [line for line in output.splitlines() if "hardware counters" in line or "profiler start-up" in line]}


FIELDS = ("busy_pct", "sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct", "fp32_pct", "energy_j", "avg_power_w",
          "counters_source", "counters_note")


def cases_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"case": case, **{k: result["records"][f"test_{case}"].get(k) for k in FIELDS}} for case in CASES]


def sampler_cost(seconds: float = 3.0) -> dict[str, Any]:
    """The sampler beside the activity capture, in this process: start-up, decode/evaluate per second."""
    import torch

    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.hardware.choose import cuda_device, open_counters

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    activity = CuptiSource(demangle=torch._C._demangle)
    began = time.perf_counter()
    activity.start()
    activity_startup = time.perf_counter() - began
    opened = open_counters("auto", 1.0, cuda_device(torch))
    if opened.capture is not None:
        opened.capture.wait_started()  # PM sampling starts on the sampler's thread: these figures are of it running
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.zeros(1024, device="cuda")
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:  # half matmuls, half tiny kernels
        for _ in range(20):
            a @ a
        for _ in range(2000):
            x.add_(1.0)
    torch.cuda.synchronize()
    wall = time.perf_counter() - began
    activity.stop()
    events, _ = activity.drain()
    out: dict[str, Any] = {"activity_startup_s": activity_startup, "activity_events": len(events),
                           "counters": opened.describe()[0] if opened.describe else opened.description,
                           "fallback": opened.fallback or (opened.describe()[1] if opened.describe else ""),
                           "counters_startup_s": opened.startup_s, "wall_s": wall}
    if opened.capture is not None:
        sampler = opened.capture.sampler
        source = sampler.source
        began = time.perf_counter()
        sampler.sync(sampler.now(), timeout_s=2.0)
        out["sync_s"] = time.perf_counter() - began
        sampler.stop()
        cost = sampler.cost()
        out.update({k: v for k, v in cost.__dict__.items()})
        for key in ("decode_s", "evaluate_s", "samples", "overflows", "image_resets", "startup_steps", "fields",
                    "metric_names", "chip", "period_ns"):
            if hasattr(source, key):
                out[f"source_{key}"] = getattr(source, key)
        per_s = max(cost.wall_s, 1e-9)
        out["thread_cpu_per_s"] = cost.thread_cpu_s / per_s
        out["decode_s_per_s"] = getattr(source, "decode_s", 0.0) / per_s
        out["evaluate_s_per_s"] = getattr(source, "evaluate_s", 0.0) / per_s
        out["evaluate_ms_per_sample"] = 1000 * getattr(source, "evaluate_s", 0.0) / max(1, getattr(source, "samples", 0))
    return out


def overhead(run: Run, work: Path, rounds: int, deadline: float) -> dict[str, Any]:
    """The three suites plain, --gpu-util with the counters off, and on: interleaved rounds."""
    configs = {"plain": None, "counters_off": ["--gpu-util-counters=off"], "counters_on": ["--gpu-util-counters=auto"]}
    runs: dict[str, dict[str, dict[str, list]]] = {s: {c: {"s": [], "startup_s": [], "counters_startup_s": []}
                                                       for c in configs} for s in SUITES}
    done = 0
    per_round = None
    while done < rounds or (done < 2 and time.monotonic() < deadline):
        if done >= 2 and per_round is not None and time.monotonic() + per_round > deadline:
            break
        began = time.monotonic()
        for suite, file in SUITES.items():
            for config, extra in configs.items():
                out_dir = work / f"overhead_{suite}_{config}"
                args = [str(BENCH_DIR / "overhead_suites" / file), "-q", "--rootdir", str(BENCH_DIR / "overhead_suites")]
                if extra is not None:
                    args += ["--gpu-util", f"--gpu-util-dir={out_dir}", *extra]
                output = run_pytest(run, args, work, timeout=120)
                runs[suite][config]["s"].append(reported_seconds(output))
                runs[suite][config]["startup_s"].append(first_float(STARTUP, output) or 0.0)
                runs[suite][config]["counters_startup_s"].append(first_float(COUNTERS_STARTUP, output) or 0.0)
        done += 1
        per_round = time.monotonic() - began
        run.doc["overhead"] = summarise_overhead(runs)
        run.save()
        if done >= 2 and time.monotonic() >= deadline:
            break
    return summarise_overhead(runs)


def summarise_overhead(runs: dict[str, dict[str, dict[str, list]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for suite, by in runs.items():
        plain, off, on = by["plain"], by["counters_off"], by["counters_on"]
        n = min(len(plain["s"]), len(off["s"]), len(on["s"]))
        if not n:
            continue
        net_off = [off["s"][i] - off["startup_s"][i] for i in range(n)]
        net_on = [on["s"][i] - on["startup_s"][i] - on["counters_startup_s"][i] for i in range(n)]
        out[suite] = {
            "plain_s": plain["s"], "counters_off_s": off["s"], "counters_on_s": on["s"],
            "startup_s": on["startup_s"], "counters_startup_s": on["counters_startup_s"],
            "ratio_on_vs_off": statistics.median(a / b for a, b in zip(net_on, net_off)),
            "ratio_on_vs_plain": statistics.median(a / b for a, b in zip(net_on, plain["s"])),
            "ratio_off_vs_plain": statistics.median(a / b for a, b in zip(net_off, plain["s"])),
            "rounds": n,
        }
    return out


def check(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []

    def add(name: str, seen: Any, holds: Any) -> None:
        rows.append({"check": name, "seen": seen, "holds": bool(holds)})

    cases = {c["case"]: c for c in doc.get("cases") or ()}
    first = cases.get("first_test_brings_cuda_up")
    if first:
        add("first_test_brings_cuda_up: counters_note said, figures within 5 points of a later identical test's",
            [first.get("counters_note"), first.get("differences")], first.get("ok"))
    if {"matmul_bf16", "elementwise_big", "tiny_kernels"} & set(cases):
        mm, big, tiny = cases.get("matmul_bf16", {}), cases.get("elementwise_big", {}), cases.get("tiny_kernels", {})
        add("bf16 matmul: tensor_pct >= 70", mm.get("tensor_pct"), (mm.get("tensor_pct") or 0) >= 70)
        add("256 MiB elementwise: dram_bw_pct >= 60", big.get("dram_bw_pct"), (big.get("dram_bw_pct") or 0) >= 60)
        busy, sm = tiny.get("busy_pct"), tiny.get("sm_pct")
        add("tiny kernels: busy_pct >= 10 x sm_pct", [busy, sm], busy is not None and sm is not None and busy >= 10 * sm)
    energy = doc.get("energy") or {}
    if energy:
        add("5 s run: energy_j within 10 % of NVML's counter", [energy.get("record_j"), energy.get("counter_j")],
            energy.get("record_j") and energy.get("counter_j")
            and abs(energy["record_j"] / energy["counter_j"] - 1) <= 0.10)
    for case, metrics in (doc.get("agreement") or {}).items():
        worst = max((abs(v["difference"]) for v in metrics.values() if v.get("difference") is not None), default=None)
        add(f"{case}: PM sampling and GPM within 10 points", worst, worst is not None and worst <= 10)
    after = doc.get("after_profiler_session")
    if after is not None:
        add("counters after a test's own torch.profiler session", after, after.get("sm_pct") is not None)
    bench = doc.get("kernel_bench")
    if bench:
        add("kernel_bench: share of the peak and counters of the reps",
            [bench.get("tflops_pct_of_peak"), bench.get("tensor_pct")],
            bench.get("tflops_pct_of_peak") is not None and bench.get("tensor_pct") is not None)
    if doc.get("overhead_ratio") is not None and "plain" in (doc.get("overhead_ratio_of") or ""):
        add("overhead suites with the counters on: <= 1.05x a plain run (worst suite)", doc["overhead_ratio"],
            doc["overhead_ratio"] <= 1.05)
    return rows


def overhead_from(path: Path) -> Optional[dict[str, Any]]:
    """``overhead_ratio`` and its suites from benchmarks/bench_overhead.py's overhead.json."""
    if not path.exists():
        return None
    bench = json.loads(path.read_text())
    suites = bench.get("suites") or {}
    out: dict[str, Any] = {"source": str(path), "suites": {}}
    for name, suite in suites.items():
        variants = suite.get("variants") or {}
        if variants.get("counters_on"):  # the counters off by default: --variant counters_on=--gpu-util-counters=auto
            on, off = variants["counters_on"], {"ratio": suite.get("ratio")}
        else:  # runs from when they were on by default: --variant counters_off=--gpu-util-counters=off
            on, off = {"ratio": suite.get("ratio"), "counters_startup_s": suite.get("counters_startup_s")}, variants.get("counters_off")
        row = {"on_vs_plain": on.get("ratio"), "counters_startup_s": on.get("counters_startup_s")}
        if off and off.get("ratio") and on.get("ratio"):
            row["off_vs_plain"] = off["ratio"]
            row["on_vs_off"] = on["ratio"] / off["ratio"]
        out["suites"][name] = row
    rows = out["suites"].values()
    # the issue's figure: the suites with the counters on against a plain run; the counters' own
    # share (on / off) beside it
    if rows and all(r.get("on_vs_plain") for r in rows):
        out["overhead_ratio"], out["of"] = max(r["on_vs_plain"] for r in rows), "--gpu-util with the counters on / plain (bench_overhead)"
    if rows and all("on_vs_off" in r for r in rows):
        out["counters_own_ratio"] = max(r["on_vs_off"] for r in rows)
    return out


def _f(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _per_suite(suites: dict[str, Any], key: str) -> str:
    """``small 1.074; launch_bound 1.618; ...``: one figure of each suite."""
    return "; ".join(f"{name} {_f(row.get(key), 3)}" for name, row in suites.items())


def markdown(doc: dict[str, Any]) -> str:
    """The README's figures from this run (hardware.md), ready to paste where it says."""
    env = doc.get("env") or {}
    when = f"{env.get('gpu_model')}, torch {env.get('torch')}, {doc.get('started', '')[:10]}"
    lines = [f"# Hardware counters on {when}", "",
             "docs/trust.md, section \"Hardware counters\":", "",
             "| workload | busy % | SM % | tensor % | DRAM % | power |", "|---|---|---|---|---|---|"]
    names = {"matmul_bf16": "bf16 8192³ matmul", "elementwise_big": "256 MiB fp32 `add_`",
             "tiny_kernels": "1k-element `add_` loop",
             "first_test_brings_cuda_up": "bf16 matmul, in the test that brings CUDA up"}
    for c in doc.get("cases") or ():
        lines.append(f"| {names.get(c['case'], c['case'])} | {_f(c['busy_pct'])} | {_f(c['sm_pct'], 2 if (c['sm_pct'] or 0) < 1 else 1)} | "
                     f"{_f(c['tensor_pct'])} | {_f(c['dram_bw_pct'])} | {_f(c['avg_power_w'], 0)} W |")
    if doc.get("cases_gpm"):
        gpm = {c["case"]: c for c in doc["cases_gpm"]}
        lines += ["", "NVML GPM on the same loops: " + "; ".join(
            f"{names[k]}: SM {_f(v['sm_pct'])}, tensor {_f(v['tensor_pct'])}, DRAM {_f(v['dram_bw_pct'])}"
            for k, v in gpm.items())]
    energy = doc.get("energy") or {}
    if energy:
        lines += ["", f"Energy of the 5 s matmul: {_f(energy.get('record_j'))} J in the record against "
                      f"{_f(energy.get('counter_j'))} J from NVML's counter read around the loop."]
    cost = doc.get("sampler_cost") or {}
    if cost:
        lines += ["", f"Cost: start-up {_f(cost.get('counters_startup_s'), 3)} s ({cost.get('counters')}); the thread used "
                      f"{_f(100 * (cost.get('thread_cpu_per_s') or 0))} % of one core (decode {_f(1000 * (cost.get('decode_s_per_s') or 0))}"
                      f" ms/s, evaluation {_f(cost.get('evaluate_ms_per_sample'), 3)} ms a sample); a flush's wait "
                      f"{_f(1000 * (cost.get('sync_s') or 0), 0)} ms; the activity capture's start-up "
                      f"{_f(cost.get('activity_startup_s'), 3)} s."]
    if doc.get("counters_summary"):
        lines += ["", "README, the example summary lines (replace the synthetic ones):", "", "```text",
                  *doc["counters_summary"], "```"]
    over = doc.get("overhead_from_bench") or {}
    if over.get("suites"):
        lines += ["", "Overhead (bench_overhead), with the counters on / plain: "
                  + _per_suite(over["suites"], "on_vs_plain") + "; with them off / plain: "
                  + _per_suite(over["suites"], "off_vs_plain") + "; on / off: " + _per_suite(over["suites"], "on_vs_off")]
    if doc.get("overhead"):
        lines += ["", "Overhead (this script's rounds), with the counters on / plain: "
                  + _per_suite(doc["overhead"], "ratio_on_vs_plain") + "; on / off: "
                  + _per_suite(doc["overhead"], "ratio_on_vs_off")]
    lines += ["", "Checks:", *(f"- {'ok' if r['holds'] else 'FAIL'}: {r['check']} ({r['seen']})" for r in doc.get("checks") or ())]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", type=Path)
    parser.add_argument("--out", type=Path, help="the same as OUTDIR")
    parser.add_argument("--budget-s", type=float, default=85.0, help="start no part after this many seconds")
    parser.add_argument("--overhead-json", type=Path, help="bench_overhead.py's overhead.json (default OUTDIR/overhead.json)")
    parser.add_argument("--overhead", action="store_true", help="run the overhead suites here (plain / counters off / on)")
    parser.add_argument("--rounds", type=int, default=3, help="with --overhead: rounds (at least 2)")
    parser.add_argument("--sampler-cost", type=Path, help=argparse.SUPPRESS)  # the child that measures it
    args = parser.parse_args(argv)
    if args.sampler_cost:
        args.sampler_cost.write_text(json.dumps(sampler_cost(), default=str))
        return 0
    out = args.outdir or args.out
    if out is None:
        parser.error("give OUTDIR")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.budget_s

    def left(cap: float) -> float:
        return max(5.0, min(cap, deadline - time.monotonic()))

    run = Run(out)
    work = Path(tempfile.mkdtemp(prefix="hw_truth_"))
    doc = run.doc  # this process never touches CUDA: its context would be "another process" to the runs
    pm = run.part("cases_cupti", workload_run, run, "cupti", work, left(60))
    if pm:
        info = pm["machine"]
        doc["env"] = {k: info.get(k) for k in ("gpu_model", "gpu_count", "driver", "cuda", "torch", "python")}
        doc["cases"] = cases_of(pm)
        doc["counters_summary"] = pm["summary"]
        doc["session_counters"] = pm["counters"].get("session")
        doc["totals"] = {k: v for k, v in pm["totals"].items() if k.startswith("counters") or k == "startup_s"}
        record = pm["records"].get("test_energy_5s", {})
        if pm.get("energy"):
            doc["energy"] = {"record_j": record.get("energy_j"), "record_w": record.get("avg_power_w"),
                             "call_s": (record.get("wall_ms") or 0) / 1000, **pm["energy"]}
        after = pm["records"].get("test_zz_after_a_profiler_session", {})
        doc["after_profiler_session"] = {k: after.get(k) for k in ("sm_pct", "tensor_pct", "counters_note", "note")}
        own = pm["records"].get("test_own_profiler_session", {})
        doc["own_profiler_session"] = {k: own.get(k) for k in ("sm_pct", "tensor_pct", "counters_note", "note")}
        bench = pm["records"].get("test_kernel_bench_matmul", {}).get("kernel_bench", {}).get("matmul_bf16", {})
        doc["kernel_bench"] = {k: bench.get(k) for k in ("median", "tflops", "peak_tflops", "tflops_pct_of_peak",
                                                           "peak_source", "sm_pct", "tensor_pct", "dram_bw_pct",
                                                           "counters_note")}
        run.save()
    if time.monotonic() < deadline:
        first = run.part("first_test_brings_cuda_up", first_cuda_run, run, work, left(40))
        if first:
            doc["cases"] = [*(doc.get("cases") or []), first]
            run.save()
    if time.monotonic() < deadline:
        gpm = run.part("cases_gpm", workload_run, run, "gpm", work, left(40), "test_matmul_bf16 or elementwise or tiny")
        if gpm:
            doc["cases_gpm"] = [c for c in cases_of(gpm)]
            doc["gpm_summary"] = gpm["summary"]
        if pm and gpm:
            doc["agreement"] = {
                case: {m: {"pm": p.get(m), "gpm": g.get(m),
                           "difference": (p[m] - g[m]) if p.get(m) is not None and g.get(m) is not None else None}
                       for m in ("sm_pct", "tensor_pct", "dram_bw_pct")}
                for case, p, g in zip(CASES, doc["cases"], doc["cases_gpm"])}

    def cost_in_a_child() -> dict[str, Any]:
        target = work / "sampler_cost.json"
        plugin, path = _plugin_args()
        res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--sampler-cost", str(target)],
                             capture_output=True, text=True, timeout=left(40), env={**os.environ, **path})
        run.log.write(f"$ sampler cost (rc {res.returncode})\n{res.stdout}{res.stderr}\n")
        if not target.exists():
            raise RuntimeError(f"the sampler-cost child failed (rc {res.returncode}): {res.stderr.strip()[-600:]}")
        return json.loads(target.read_text())

    if time.monotonic() < deadline:
        cost = run.part("sampler_cost", cost_in_a_child)
        if cost:
            doc["sampler_cost"] = cost
    if args.overhead:
        over = run.part("overhead", overhead, run, work, args.rounds, deadline + 150)
        if over:
            doc["overhead"] = over
            doc["overhead_ratio"] = max(s["ratio_on_vs_plain"] for s in over.values())
            doc["overhead_ratio_of"] = "--gpu-util with the counters on / plain (this script's rounds)"
            doc["counters_own_ratio"] = max(s["ratio_on_vs_off"] for s in over.values())
    else:
        bench = run.part("overhead_from_bench", overhead_from, args.overhead_json or out / "overhead.json")
        if bench:
            doc["overhead_from_bench"] = bench
            if bench.get("overhead_ratio") is not None:
                doc["overhead_ratio"], doc["overhead_ratio_of"] = bench["overhead_ratio"], bench["of"]
            doc["counters_own_ratio"] = bench.get("counters_own_ratio")
    doc["checks"] = check(doc)
    doc["seconds"] = round(time.monotonic() - started, 1)
    run.save()
    (out / "hardware.md").write_text(markdown(doc), encoding="utf-8")
    print(f"{doc.get('env', {}).get('gpu_model')}: {doc['seconds']} s")
    for c in doc.get("cases") or ():
        print(f"  {c['case']:16} busy {c['busy_pct']}  SM {c['sm_pct']}  tensor {c['tensor_pct']}  DRAM {c['dram_bw_pct']}"
              f"  energy {c['energy_j']} J  {c['counters_note'] or ''}")
    if doc.get("overhead_ratio") is not None:
        print(f"  overhead_ratio {doc['overhead_ratio']:.3f} ({doc.get('overhead_ratio_of')})")
    for row in doc["checks"]:
        print(f"  {'ok  ' if row['holds'] else 'FAIL'} {row['check']}: {row['seen']}")
    for name in doc["errors"]:
        print(f"  ERROR in {name} (see hardware.json)")
    return 0 if all(r["holds"] for r in doc["checks"]) and not doc["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
