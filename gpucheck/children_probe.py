"""Development probe for issue 20 (child processes): what CUDA, CUPTI, fork, injection and NVML
really do, measured with the branch's own children/ package. One H100, about 2-3 minutes.

    python3 gpucheck/children_probe.py OUTDIR

Needs the branch installed (``pip install -e .`` builds the injection library and puts the .pth
into site-packages; gpucheck/run_probe.sh does it). Every case runs in its own subprocesses with a
timeout; a failing case records its error and the others go on. Writes OUTDIR/probe.json and
prints a summary last.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path

import numpy as np

from pytest_gpuutil.children.spool import (
    CUPTI_ENV,
    INJECTION_ENV,
    PERIOD_ENV,
    SELF_ENV,
    SPOOL_ENV,
    Spool,
    injection_library,
)
from pytest_gpuutil.children.spool_format import ChunkReader, End, Events, Header, Memory, Note

PY = sys.executable
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "probe_out").resolve()
OUT.mkdir(parents=True, exist_ok=True)
WORK = OUT / "work"
WORK.mkdir(exist_ok=True)
RESULTS: dict = {}

# a child's GPU work with its own truth (CUDA events around it) ------------------------------------
CHILD_WORK = r'''
import json, os, sys, time
import torch
n, out = int(sys.argv[1]), sys.argv[2]
device = int(sys.argv[3]) if len(sys.argv) > 3 else 0
torch.backends.cuda.matmul.allow_tf32 = False
torch.cuda.set_device(device)
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0 = time.time_ns()
s.record()
for _ in range(n):
    c = a @ b
e.record()
torch.cuda.synchronize()
t1 = time.time_ns()
json.dump({"pid": os.getpid(), "truth_ms": s.elapsed_time(e), "t0": t0, "t1": t1,
           "max_alloc": torch.cuda.max_memory_allocated(), "rank": os.environ.get("RANK", "")}, open(out, "w"))
'''


def run(code: str, *args: str, env: dict | None = None, timeout: float = 60, python_flags: tuple = ()) -> dict:
    path = WORK / f"script_{abs(hash(code)) % 10**8}.py"
    path.write_text(code)
    began = time.perf_counter()
    try:
        proc = subprocess.run([PY, *python_flags, str(path), *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
        return {"rc": proc.returncode, "out": proc.stdout[-3000:], "err": proc.stderr[-3000:],
                "s": round(time.perf_counter() - began, 3)}
    except subprocess.TimeoutExpired as exc:
        return {"rc": "timeout", "out": str(exc.stdout)[-2000:], "err": str(exc.stderr)[-2000:]}


def cupti_path() -> str:
    out = run("import torch\nfrom pytest_gpuutil.capture.cupti import find_loaded_library as f\nprint(f() or '')")
    return out["out"].strip().splitlines()[-1] if out.get("rc") == 0 and out["out"].strip() else ""


def spool_env(spool: Spool, cupti: str, inject: bool = True, period: float = 0.5, self_pid: int = 1) -> dict:
    env = dict(os.environ)
    env[SPOOL_ENV] = str(spool.directory)
    env[CUPTI_ENV] = cupti
    env[PERIOD_ENV] = str(period)
    env[SELF_ENV] = str(self_pid)
    lib = injection_library()
    if inject and lib:
        env[INJECTION_ENV] = lib
    else:
        env.pop(INJECTION_ENV, None)
    return env


def union_ms(starts: np.ndarray, ends: np.ndarray) -> float:
    if not starts.size:
        return 0.0
    order = np.argsort(starts)
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:] - 1, [s.size - 1]))
    return float(np.sum(reach[last] - s[first])) / 1e6


def read_spool(directory: str) -> list[dict]:
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "*.gpuc"))):
        reader = ChunkReader(path)
        chunks = reader.read_new()
        header = next((c for c in chunks if isinstance(c, Header)), None)
        events = [c for c in chunks if isinstance(c, Events)]
        starts = np.concatenate([e.starts for e in events]) if events else np.zeros(0, np.int64)
        ends = np.concatenate([e.ends for e in events]) if events else np.zeros(0, np.int64)
        devices = np.concatenate([e.devices for e in events]) if events else np.zeros(0, np.uint32)
        names: dict[str, float] = {}
        for e in events:
            for code, dur in zip(e.codes.tolist(), (e.ends - e.starts).tolist()):
                names[e.names[code]] = names.get(e.names[code], 0.0) + dur / 1e6
        top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
        found.append({
            "file": os.path.basename(path),
            "pid": header.pid if header else None,
            "capture": header.capture if header else None,
            "program": header.program if header else None,
            "flags": header.flags if header else None,
            "rank": header.rank if header else None,
            "startup_ms": header.startup_ns / 1e6 if header else None,
            "created_ns": header.created_ns if header else None,
            "chunks": len(chunks), "event_chunks": len(events), "events": int(starts.size),
            "busy_ms_by_device": {str(d): union_ms(starts[devices == d], ends[devices == d]) for d in np.unique(devices).tolist()},
            "first_ns": int(starts.min()) if starts.size else None, "last_ns": int(ends.max()) if ends.size else None,
            "top": [(n[:80], round(ms, 3)) for n, ms in top],
            "memory": [list(d) for c in chunks if isinstance(c, Memory) for d in c.devices],
            "notes": [c.text for c in chunks if isinstance(c, Note)],
            "end": ({"reason": c.reason, "note": c.note} for c in chunks if isinstance(c, End)).__next__() if any(isinstance(c, End) for c in chunks) else None,
            "reader_error": reader.error,
            "covered_last": max((e.covered_ns for e in events), default=None),
        })
    return found


def case(name: str):
    def wrap(fn):
        def runner():
            began = time.perf_counter()
            try:
                RESULTS[name] = fn()
            except Exception:  # noqa: BLE001
                RESULTS[name] = {"error": traceback.format_exc()[-3000:]}
            RESULTS[name] = {**(RESULTS[name] if isinstance(RESULTS[name], dict) else {"value": RESULTS[name]}),
                             "case_s": round(time.perf_counter() - began, 2)}
            (OUT / "probe.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        runner.__name__ = name
        return runner
    return wrap


CUPTI = ""


@case("A_environment")
def a_environment():
    code = textwrap.dedent('''
    import time, os, json, site
    t = time.perf_counter(); import torch; imported = time.perf_counter() - t
    maps = open("/proc/self/maps").read()
    from pytest_gpuutil.children.spool import injection_library
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "import_s": imported,
        "libcupti_mapped_after_import": "libcupti" in maps, "cuda_initialized": torch.cuda.is_initialized(),
        "device_count_nvml": torch.cuda.device_count(), "cuda_initialized_after_count": torch.cuda.is_initialized(),
        "injection_library": injection_library(), "pth": [p for s in site.getsitepackages() for p in
        [os.path.join(s, "pytest_gpuutil_children.pth")] if os.path.exists(p)],
        "nspid": [l for l in open("/proc/self/status") if l.startswith("NSpid")]}))
    ''')
    out = run(code)
    return {"run": out, "info": json.loads(out["out"].strip().splitlines()[-1]) if out["rc"] == 0 else None}


FORK_PARENT = r'''
import json, os, sys, time, multiprocessing as mp
variant, spool_dir, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["PYTEST_GPUUTIL_SELF"] = str(os.getpid())  # as the plugin does: the injection library leaves this process alone
import torch
result = {"variant": variant}
from pytest_gpuutil.children import bootstrap
if variant in ("is_available",):
    result["is_available"] = torch.cuda.is_available()
result["count"] = torch.cuda.device_count()
source = None
if variant in ("cupti_started", "cupti_started_inject_child", "timestamp"):
    from pytest_gpuutil.capture.cupti import CuptiSource
    t = time.perf_counter(); source = CuptiSource(); source.start(); result["cupti_start_s"] = time.perf_counter() - t
    result["timestamp_minus_time_ns"] = source.now() - time.time_ns()
result["parent_cuda_initialized_before_fork"] = torch.cuda.is_initialized()
if variant != "cupti_started_inject_child":
    bootstrap.ensure_fork_hook()

def child(path):
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(30):
            c = a @ b
        e.record(); torch.cuda.synchronize()
        json.dump({"ok": True, "truth_ms": s.elapsed_time(e), "pid": os.getpid(),
                   "capture": repr(bootstrap.current()), "problem": bootstrap.problem()}, open(path, "w"))
    except Exception as exc:
        json.dump({"ok": False, "error": repr(exc)[:500]}, open(path, "w"))

if variant != "timestamp":
    p = mp.get_context("fork").Process(target=child, args=(os.path.join(out_dir, f"fork_{variant}.json"),))
    p.start(); p.join(60)
    result["exitcode"] = p.exitcode
    try:
        result["child"] = json.load(open(os.path.join(out_dir, f"fork_{variant}.json")))
    except Exception as exc:
        result["child"] = repr(exc)
if source is not None:
    # the parent itself now uses CUDA (CUPTI was enabled before its cuInit): are its records there?
    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(10):
        y = x @ x
    torch.cuda.synchronize()
    columns, dropped = source.drain()
    result["parent_events_after_late_cuinit"] = len(columns)
    result["parent_kernel_names"] = sorted(set(list(columns.names)))[:3]
print(json.dumps(result, default=str))
'''


def fork_variant(variant: str) -> dict:
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=variant == "cupti_started_inject_child")
    out = run(FORK_PARENT, variant, str(spool.directory), str(WORK), env=env, timeout=120)
    parsed = None
    try:
        parsed = json.loads(out["out"].strip().splitlines()[-1])
    except Exception:  # noqa: BLE001
        pass
    found = read_spool(str(spool.directory))
    return {"run": out if parsed is None else {"rc": out["rc"], "err": out["err"][-1500:]}, "result": parsed, "spool": found}


@case("B_fork")
def b_fork():
    return {v: fork_variant(v) for v in ("plain", "is_available", "cupti_started", "cupti_started_inject_child", "timestamp")}


@case("C_subprocess_python_child")
def c_subprocess():
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True)
    truth = WORK / "c_truth.json"
    out = run(CHILD_WORK, "50", str(truth), env=env)
    return {"run": {k: out[k] for k in ("rc", "err", "s")}, "truth": json.loads(truth.read_text()) if truth.exists() else None,
            "spool": read_spool(str(spool.directory))}


INTERLEAVE_PARENT = r'''
import json, os, subprocess, sys, time
import torch
from pytest_gpuutil.capture.cupti import CuptiSource
spool_dir, child_script, truth = sys.argv[1], sys.argv[2], sys.argv[3]
source = CuptiSource(); source.start()
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda")
def burst(n):
    for _ in range(n):
        c = a @ a
    torch.cuda.synchronize()
burst(1)
source.drain()
marks = {"a0": source.now()}; burst(20); marks["a1"] = source.now()
subprocess.run([sys.executable, child_script, "20", truth], check=True)
marks["c0"] = source.now(); burst(20); marks["c1"] = source.now()
columns, _ = source.drain()
import numpy as np
starts = np.asarray(columns.starts_ns); ends = starts + np.asarray(columns.durs_ns)
print(json.dumps({"marks": marks, "parent_events": [[int(s), int(e)] for s, e in zip(starts, ends)]}))
'''


@case("C2_clock_interleave")
def c2_interleave():
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True)
    child = WORK / "child_work.py"
    child.write_text(CHILD_WORK)
    truth = WORK / "c2_truth.json"
    out = run(INTERLEAVE_PARENT, str(spool.directory), str(child), str(truth), env=env, timeout=120)
    parsed = json.loads(out["out"].strip().splitlines()[-1]) if out["rc"] == 0 else None
    found = read_spool(str(spool.directory))
    result = {"run": {k: out.get(k) for k in ("rc", "err")}, "spool": found}
    if parsed and found:
        m = parsed["marks"]
        ev = parsed["parent_events"]
        a = [e for e in ev if m["a0"] <= e[0] <= m["a1"]]
        c = [e for e in ev if m["c0"] <= e[0] <= m["c1"]]
        kid = found[0]
        result["order"] = {
            "parent_a_last_end": max(e[1] for e in a) if a else None,
            "child_first_start": kid["first_ns"], "child_last_end": kid["last_ns"],
            "parent_c_first_start": min(e[0] for e in c) if c else None,
            "a_before_child": bool(a) and kid["first_ns"] is not None and max(e[1] for e in a) <= kid["first_ns"],
            "child_before_c": bool(c) and kid["last_ns"] is not None and kid["last_ns"] <= min(e[0] for e in c),
            "gap_a_child_ms": (kid["first_ns"] - max(e[1] for e in a)) / 1e6 if a and kid["first_ns"] else None,
            "gap_child_c_ms": (min(e[0] for e in c) - kid["last_ns"]) / 1e6 if c and kid["last_ns"] else None,
        }
    return result


SPAWN_PARENT = r'''
import json, os, sys
import torch.multiprocessing as mp
def work(rank, out_dir):
    import runpy
    sys.argv = ["w", "30", os.path.join(out_dir, f"spawn_truth_{rank}.json"), "0"]
    exec(open(os.path.join(out_dir, "child_work.py")).read(), {"__name__": "__main__"})
if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1],), nprocs=int(sys.argv[2]), join=True)
    print("ok")
'''


@case("D_spawn")
def d_spawn():
    results = {}
    for nprocs in (1, 2):
        spool = Spool.create(str(WORK))
        env = spool_env(spool, CUPTI, inject=True)
        (WORK / "child_work.py").write_text(CHILD_WORK)
        for old in WORK.glob("spawn_truth_*.json"):
            old.unlink()
        out = run(SPAWN_PARENT, str(WORK), str(nprocs), env=env, timeout=120)
        truths = [json.loads(p.read_text()) for p in sorted(WORK.glob("spawn_truth_*.json"))]
        results[str(nprocs)] = {"run": {k: out.get(k) for k in ("rc", "err", "s")}, "truths": truths,
                                "spool": read_spool(str(spool.directory))}
    return results


CUDA_PROG = r'''
#include <cstdio>
#include <unistd.h>
__global__ void spin(long long n){ long long t=clock64(); while(clock64()-t<n){} }
int main(int argc, char** argv){
  int sleep_s = argc > 1 ? atoi(argv[1]) : 0;
  float *d; cudaMalloc(&d, 64<<20); char *h = (char*)malloc(64<<20);
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  cudaEventRecord(s);
  for(int i=0;i<20;i++) spin<<<1,1>>>(4000000);
  cudaMemcpy(d, h, 64<<20, cudaMemcpyHostToDevice);
  cudaMemset(d, 0, 64<<20);
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms = 0; cudaEventElapsedTime(&ms, s, e);
  printf("truth_ms %f\n", ms); fflush(stdout);
  if (sleep_s) sleep(sleep_s);
  return 0;
}
'''


@case("E_injection")
def e_injection():
    result = {"library": injection_library()}
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        src = WORK / "cuda_prog.cu"
        src.write_text(CUDA_PROG)
        build = subprocess.run([nvcc, "-o", str(WORK / "cuda_prog"), str(src)], capture_output=True, text=True, timeout=120)
        result["nvcc"] = {"rc": build.returncode, "err": build.stderr[-1000:]}
        if build.returncode == 0:
            spool = Spool.create(str(WORK))
            env = spool_env(spool, CUPTI, inject=True)
            t = time.perf_counter()
            proc = subprocess.run([str(WORK / "cuda_prog")], env=env, capture_output=True, text=True, timeout=60)
            result["cuda_prog"] = {"rc": proc.returncode, "out": proc.stdout[-500:], "err": proc.stderr[-500:],
                                   "s": time.perf_counter() - t, "spool": read_spool(str(spool.directory))}
            # without injection: how long the program takes (the injection's cost)
            t = time.perf_counter()
            subprocess.run([str(WORK / "cuda_prog")], capture_output=True, text=True, timeout=60)
            result["cuda_prog_plain_s"] = time.perf_counter() - t
            # poke latency with a sleeping injected program
            spool = Spool.create(str(WORK))
            env = spool_env(spool, CUPTI, inject=True, period=30)
            proc = subprocess.Popen([str(WORK / "cuda_prog"), "4"], env=env, stdout=subprocess.PIPE, text=True)
            proc.stdout.readline()
            time.sleep(0.3)
            before = read_spool(str(spool.directory))
            poked = time.time_ns(); spool.poke()
            latency = None
            while time.time_ns() - poked < 3e9:
                now = read_spool(str(spool.directory))
                if now and (now[0]["covered_last"] or 0) >= poked:
                    latency = (time.time_ns() - poked) / 1e6
                    break
                time.sleep(0.005)
            proc.kill(); proc.wait()
            result["inject_poke"] = {"latency_ms": latency, "before_events": before[0]["events"] if before else None,
                                     "after": read_spool(str(spool.directory))}
    # a torch child without the .pth bootstrap (python -S): the injection library measures it
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True)
    import site
    env["PYTHONPATH"] = os.pathsep.join([*site.getsitepackages(), os.getcwd()])
    truth = WORK / "e_truth.json"
    out = run(CHILD_WORK, "30", str(truth), env=env, python_flags=("-S",))
    result["python_S_child"] = {"run": {k: out.get(k) for k in ("rc", "err", "s")},
                                "truth": json.loads(truth.read_text()) if truth.exists() else None,
                                "spool": read_spool(str(spool.directory))}
    return result


KILL_CHILD = r'''
import json, os, sys, time
import torch
out = sys.argv[1]
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda")
s = torch.cuda.Event(enable_timing=True); s.record()
done = 0
while True:
    for _ in range(20):
        c = a @ a
    e = torch.cuda.Event(enable_timing=True); e.record(); e.synchronize()
    done += 20
    json.dump({"truth_ms": s.elapsed_time(e), "matmuls": done, "t": time.time_ns()}, open(out + ".tmp", "w"))
    os.replace(out + ".tmp", out)
'''


@case("G_sigkill")
def g_sigkill():
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True, period=0.3)
    path = WORK / "kill_child.py"
    path.write_text(KILL_CHILD)
    truth = WORK / "kill_truth.json"
    proc = subprocess.Popen([PY, str(path), str(truth)], env=env)
    time.sleep(6)
    killed_at = time.time_ns()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return {"killed_at": killed_at, "truth": json.loads(truth.read_text()) if truth.exists() else None,
            "spool": read_spool(str(spool.directory))}


NVML_CHILD = r'''
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
'''


@case("H_nvml")
def h_nvml():
    from pytest_gpuutil.children.nvml import NvmlSampler

    result = {}
    sampler = NvmlSampler()
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True)
    path = WORK / "nvml_child.py"
    path.write_text(NVML_CHILD)
    proc = subprocess.Popen([PY, str(path), "3"], env=env, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    result["child_pid"] = proc.pid
    t = time.perf_counter()
    samples = sampler.sample()
    result["sample_ms"] = (time.perf_counter() - t) * 1000
    result["samples"] = [s.__dict__ for s in samples]
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        result["pynvml_all"] = [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
    except Exception as exc:  # noqa: BLE001
        result["pynvml_all"] = repr(exc)
    proc.wait(timeout=30)
    result["spool"] = read_spool(str(spool.directory))
    return result


POKE_CHILD = r'''
import sys, time, torch
a = torch.randn(2048, 2048, device="cuda")
for _ in range(10):
    b = a @ a
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
'''


@case("J_poke_python")
def j_poke():
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True, period=30)
    path = WORK / "poke_child.py"
    path.write_text(POKE_CHILD)
    proc = subprocess.Popen([PY, str(path), "4"], env=env, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(0.2)
    before = read_spool(str(spool.directory))
    poked = time.time_ns()
    spool.poke()
    latency = None
    while time.time_ns() - poked < 3e9:
        now = read_spool(str(spool.directory))
        if now and (now[0]["covered_last"] or 0) >= poked:
            latency = (time.time_ns() - poked) / 1e6
            break
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    return {"latency_ms": latency, "before": before, "after": read_spool(str(spool.directory))}


PROFILER_CHILD = r'''
import torch, time
a = torch.randn(2048, 2048, device="cuda")
def burst(name, n=10):
    for _ in range(n):
        b = a @ a
    torch.cuda.synchronize()
burst("before")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    burst("during")
burst("after_1")
time.sleep(0.3)
burst("after_2")
print("kineto events", len(prof.events()))
'''


@case("K_child_torch_profiler")
def k_profiler():
    spool = Spool.create(str(WORK))
    env = spool_env(spool, CUPTI, inject=True, period=0.1)
    out = run(PROFILER_CHILD, env=env)
    return {"run": {k: out.get(k) for k in ("rc", "out", "err")}, "spool": read_spool(str(spool.directory))}


STARTUP_CHILD = r'''
import time, torch
t = time.perf_counter()
torch.zeros(1, device="cuda").sum().item()
print(time.perf_counter() - t)
'''


@case("L_child_startup_cost")
def l_startup():
    spool = Spool.create(str(WORK))
    timings = {"measured": [], "plain": []}
    for _ in range(2):
        for kind in ("measured", "plain"):
            env = spool_env(spool, CUPTI, inject=True) if kind == "measured" else dict(os.environ)
            out = run(STARTUP_CHILD, env=env)
            if out["rc"] == 0:
                timings[kind].append({"cuda_init_s": float(out["out"].strip().splitlines()[-1]), "process_s": out["s"]})
    return {"timings": timings, "spool": read_spool(str(spool.directory))}


def main() -> None:
    global CUPTI
    CUPTI = cupti_path()
    RESULTS["cupti_path"] = CUPTI
    for fn in (a_environment, b_fork, c_subprocess, c2_interleave, d_spawn, e_injection, g_sigkill, h_nvml, j_poke,
               k_profiler, l_startup):
        print("===", fn.__name__, flush=True)
        fn()
    (OUT / "probe.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    print_summary()


def print_summary() -> None:
    def short(value, limit=220):
        text = json.dumps(value, default=str)
        return text if len(text) <= limit else text[:limit] + "..."

    print("\n===== children probe summary =====")
    for name, value in RESULTS.items():
        if name == "cupti_path":
            print("cupti:", value)
            continue
        if "error" in value:
            print(name, "ERROR", value["error"].splitlines()[-1])
            continue
        print(name, f"({value.get('case_s')} s)")
        if name == "B_fork":
            for variant, v in value.items():
                if not isinstance(v, dict):
                    continue
                r = v.get("result") or {}
                print(f"  {variant}: child={short(r.get('child'), 160)} parent_events={r.get('parent_events_after_late_cuinit')} "
                      f"ts-now={r.get('timestamp_minus_time_ns')} spool={short([(s['capture'], s['events'], s['busy_ms_by_device'], s['end']) for s in v.get('spool', [])], 200)}")
        elif "spool" in value:
            print("  spool:", short([(s["program"], s["capture"], s["events"], s["busy_ms_by_device"], s["startup_ms"],
                                      s["end"], s["notes"][:2], s["memory"]) for s in value["spool"]], 400))
            for key in ("truth", "order", "latency_ms", "timings", "samples"):
                if key in value:
                    print(f"  {key}:", short(value[key], 300))
        else:
            print("  ", short(value, 600))
    print("results:", OUT / "probe.json")


if __name__ == "__main__":
    main()
