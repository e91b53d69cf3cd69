"""(GPU) The GPU work of child processes, attributed to the test that started them, against truth.

    python validation/children_truth.py --out DIR [--two-gpu] [--overhead-repeats N]

Runs ``pytest --gpu-util`` (fresh processes) on generated tests whose children do known GPU work:
a ``subprocess`` child, ``torch.multiprocessing.spawn`` with one and two processes on one GPU,
a forked multiprocessing child, a child of a test that does GPU work itself, parent/child/parent
bursts (their order on one clock, from the test's trace), a CUDA program built with nvcc and a
``python -S`` torch child (both measured by the injection library), a child killed with SIGKILL,
a server child still running when its test (and the session) ends, which the parent asks to hand
over, and a nested ``pytest --gpu-util`` run (not counted twice). ``--two-gpu`` (a host with two GPUs):
``torchrun --nproc-per-node 2`` (NCCL all_reduce plus matmuls), spawn with one process per GPU,
and a forked child on the second GPU.

Truth: each child warms up (cuBLAS, NCCL, first launches) while the test is still in set-up,
writes a "ready" file and waits; the test's call tells it to go, and the child times its work
with CUDA events around a stream that never idles, so the elapsed time is its GPU busy time, and
writes it to a file. The test's attributed GPU ms (``gpu_busy_ms``) must be within 5 % of the
summed truth. ``--overhead-repeats N`` (default 2; 0 skips) also runs the overhead suites plain,
with ``--gpu-util`` (children on, the default) and with ``--gpu-util-children=off``, interleaved
(``benchmarks/bench_overhead.py``). Writes DIR/children.json:

    {"cases": [{"case", "test", "gpu_ms", "truth_gpu_ms", "error_pct", "ok", "processes", "note"}],
     "checks": [...], "overhead": {...}}

and prints a summary last. Every run has a timeout; a failing case records its error and the
others go on.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE_PCT = 5.0
#: kept in every process of the 2-GPU host (NVLink multicast off), also those started with their own environment
NCCL_SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

WORK = r'''
"""Child workloads with their own truth (see validation/children_truth.py)."""
import argparse, json, os, sys, time

import torch


def wait_for(path, timeout=120.0, alive=lambda: True):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"nobody created {path}")
        if not alive():
            raise RuntimeError(f"the process that was to create {path} has ended")
        time.sleep(0.002)


def matmuls(n, dtype, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(4096, 4096, device=device, dtype=dtype)
    b = torch.randn(4096, 4096, device=device, dtype=dtype)
    def block(k):
        for _ in range(k):
            torch.mm(a, b)
    return block


def timed(block, k):
    """CUDA-event time of k back-to-back matmuls (the stream never idles: elapsed = busy)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    block(k)
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def run(name, n, device=0, dtype="fp32", protocol=None, progress=False, distributed=False, linger=0.0):
    """Warm up, say ready, wait for go, time n matmuls (and all_reduces), write the truth."""
    torch.cuda.set_device(device)
    block = matmuls(n, torch.float32 if dtype == "fp32" else torch.bfloat16, f"cuda:{device}")
    block(3)
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("nccl", device_id=torch.device(f"cuda:{device}"))
        x = torch.ones(1 << 22, device=f"cuda:{device}")
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.synchronize()
    ready, go, out = protocol
    open(ready, "w").close()
    wait_for(go)
    if progress:  # until killed: the truth so far after every 10 matmuls
        s = torch.cuda.Event(enable_timing=True)
        s.record()
        while True:
            block(10)
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            e.synchronize()
            with open(out + ".tmp", "w") as handle:
                json.dump({"pid": os.getpid(), "truth_ms": s.elapsed_time(e), "t": time.time_ns()}, handle)
            os.replace(out + ".tmp", out)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    if distributed:
        for _ in range(n // 5):
            block(5)
            dist.all_reduce(x)
    else:
        block(n)
    e.record()
    e.synchronize()
    truth = s.elapsed_time(e)
    if distributed:
        dist.destroy_process_group()
    with open(out + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid(), "truth_ms": truth, "device": device, "rank": os.environ.get("RANK", ""),
                   "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20}, handle)
    os.replace(out + ".tmp", out)
    time.sleep(linger)  # a server that outlives its test (the parent must ask it to hand over)


def files(folder, name):
    return tuple(os.path.join(folder, f"{name}.{what}") for what in ("ready", "go", "json"))


def spawn_entry(rank, folder, name, n, devices, serial):
    """torch.multiprocessing.spawn's target: rank r is one child (serial: one after another)."""
    ready, go, out = files(folder, f"{name}.{rank}")
    if serial and rank:
        go = files(folder, f"{name}.{rank - 1}")[2]  # start when the previous rank has written its truth
    run(f"{name}.{rank}", n, devices[rank], protocol=(ready, go, out))


def process_entry(folder, name, n, device):
    run(name, n, device, protocol=files(folder, name))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("name")
    p.add_argument("n", type=int)
    p.add_argument("--device", type=int, default=None)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--linger", type=float, default=0.0)
    a = p.parse_args()
    rank = os.environ.get("LOCAL_RANK")
    name = a.name if rank is None else f"{a.name}.{rank}"
    device = a.device if a.device is not None else int(rank or 0)
    ready, _, out = files(a.folder, name)
    run(name, a.n, device, a.dtype, (ready, os.path.join(a.folder, f"{a.name}.go"), out), a.progress, a.distributed,
        a.linger)
'''

PROG = r'''
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
__global__ void spin(long long cycles) { long long t = clock64(); while (clock64() - t < cycles) {} }
int main(int argc, char **argv) {
  const char *ready = argv[1], *go = argv[2], *out = argv[3];
  size_t bytes = 256u << 20;
  char *d; cudaMalloc(&d, bytes); char *h; cudaMallocHost(&h, bytes);
  spin<<<1, 1>>>(1000); cudaMemcpy(d, h, 1 << 20, cudaMemcpyHostToDevice); cudaMemset(d, 0, 1 << 20);
  cudaDeviceSynchronize();
  fclose(fopen(ready, "w"));
  while (access(go, F_OK) != 0) usleep(2000);
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  cudaEventRecord(s);
  for (int i = 0; i < 40; i++) spin<<<132, 32>>>(4000000);
  cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice);
  cudaMemsetAsync(d, 1, bytes);
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms = 0; cudaEventElapsedTime(&ms, s, e);
  FILE *f = fopen(out, "w"); fprintf(f, "{\"pid\": %d, \"truth_ms\": %f}", (int)getpid(), ms); fclose(f);
  return 0;
}
'''

CONFTEST = r'''
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import work  # noqa: E402

FOLDER = str(HERE / "truth")
os.makedirs(FOLDER, exist_ok=True)


def start(name, *argv, env=None, quiet=False):
    """A Popen child that warms up and waits (set-up); returns a function that runs it (the call)."""
    ready, go, out = work.files(FOLDER, name)
    stdio = subprocess.DEVNULL if quiet else None  # a child that outlives pytest must not hold its output open
    proc = subprocess.Popen(list(argv), env=env, stdout=stdio, stderr=stdio)
    deadline = time.monotonic() + 120
    while not os.path.exists(ready):
        assert proc.poll() is None, f"{name} ended before it was ready: {proc.returncode}"
        assert time.monotonic() < deadline, f"{name} never got ready"
        time.sleep(0.005)

    def go_and_wait():
        open(go, "w").close()
        assert proc.wait(120) == 0, f"{name} failed"
    go_and_wait.proc = proc
    return go_and_wait


def python_child(name, n=40, *extra, flags=(), env=None, quiet=False):
    return start(name, sys.executable, *flags, str(HERE / "work.py"), FOLDER, name, str(n), *extra, env=env, quiet=quiet)


def wait_for(path, timeout=120, alive=lambda: True):
    work.wait_for(path, timeout, alive)
'''

TESTS_PYTHON = r'''
import os, signal, subprocess, sys, time

import pytest
import torch
import torch.multiprocessing as mp

from conftest import FOLDER, HERE, python_child, start, wait_for
import work


@pytest.fixture
def subprocess_child():
    return python_child("subprocess")


def test_subprocess(subprocess_child):
    subprocess_child()


@pytest.fixture
def spawned(request):
    nprocs = request.param
    context = mp.spawn(work.spawn_entry, args=(FOLDER, f"spawn{nprocs}", 40, [0] * nprocs, True), nprocs=nprocs,
                       join=False)
    for rank in range(nprocs):
        wait_for(work.files(FOLDER, f"spawn{nprocs}.{rank}")[0], alive=lambda: all(p.is_alive() for p in context.processes))
    return nprocs, context


@pytest.mark.parametrize("spawned", [1, 2], indirect=True, ids=["one", "two"])
def test_spawn(spawned):
    nprocs, context = spawned
    open(work.files(FOLDER, f"spawn{nprocs}.0")[1], "w").close()
    while not context.join(timeout=120):
        pass


@pytest.fixture
def parent_and_child():
    torch.cuda.init()
    block = work.matmuls(0, torch.bfloat16, "cuda:0")
    block(3)
    torch.cuda.synchronize()
    return block, python_child("with_parent")


def test_parent_and_child(parent_and_child):
    block, child = parent_and_child
    truth = work.timed(block, 200)
    with open(os.path.join(FOLDER, "parent.json"), "w") as handle:
        handle.write('{"truth_ms": %f}' % truth)
    child()


@pytest.fixture
def interleaved():
    block = work.matmuls(0, torch.bfloat16, "cuda:0")
    block(3)
    torch.cuda.synchronize()
    return block, python_child("interleave", 20)


def test_interleave(interleaved):
    block, child = interleaved
    a = work.timed(block, 100)
    child()
    c = work.timed(block, 100)
    with open(os.path.join(FOLDER, "interleave_parent.json"), "w") as handle:
        handle.write('{"truth_ms": %f}' % (a + c))


@pytest.fixture
def python_s_child():
    import site
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*site.getsitepackages(), os.environ.get("PYTHONPATH", "")]))
    return python_child("python_S", 40, flags=("-S",), env=env)


def test_python_S_injection(python_s_child):
    python_s_child()


@pytest.fixture
def cuda_program():
    prog = HERE / "prog"
    if not prog.exists():
        pytest.skip("no nvcc-built program")
    ready, go, out = work.files(FOLDER, "nvcc")
    return start("nvcc", str(prog), ready, go, out)


def test_nvcc_program(cuda_program):
    cuda_program()


@pytest.fixture
def server_child():
    env = dict(os.environ, PYTEST_GPUUTIL_PERIOD="60")  # hands over when asked (a poke) or at exit
    return python_child("server", 40, "--linger", "60", env=env, quiet=True)


def test_server_still_running(server_child):
    open(work.files(FOLDER, "server")[1], "w").close()
    wait_for(work.files(FOLDER, "server")[2], alive=lambda: server_child.proc.poll() is None)


@pytest.fixture
def killed_child():
    env = dict(os.environ, PYTEST_GPUUTIL_PERIOD="0.5")
    return python_child("killed", 0, "--progress", env=env)


def test_sigkill(killed_child):
    open(work.files(FOLDER, "killed")[1], "w").close()
    time.sleep(3.0)
    killed_child.proc.send_signal(signal.SIGKILL)
    killed_child.proc.wait(30)
'''

TESTS_FORK = r'''
import multiprocessing as mp

import pytest

from conftest import FOLDER
import work


@pytest.fixture
def forked(request):
    device = request.param
    process = mp.get_context("fork").Process(target=work.process_entry, args=(FOLDER, f"fork{device}", 40, device))
    process.start()
    work.wait_for(work.files(FOLDER, f"fork{device}")[0], alive=process.is_alive)
    return device, process


@pytest.mark.parametrize("forked", DEVICES, indirect=True)
def test_fork(forked):
    device, process = forked
    open(work.files(FOLDER, f"fork{device}")[1], "w").close()
    process.join(120)
    assert process.exitcode == 0
'''

TESTS_NESTED = r'''
import os, subprocess, sys

from conftest import HERE


def test_nested_pytest():
    inner = HERE / "inner"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-util",
                    "--gpu-util-dir", str(inner / "out"), str(inner / "test_inner.py")], check=True, timeout=150)
'''

TESTS_INNER = r'''
from conftest import python_child


def test_inner_child():
    python_child("nested_inner")()
'''

TESTS_TWO_GPU = r'''
import os, sys

import pytest
import torch.multiprocessing as mp

from conftest import FOLDER, HERE, start, wait_for
import work


@pytest.fixture
def torchrun():
    go = start("torchrun.0", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(HERE / "work.py"), FOLDER, "torchrun", "40", "--distributed")
    wait_for(work.files(FOLDER, "torchrun.1")[0], alive=lambda: go.proc.poll() is None)
    return go


def test_torchrun(torchrun):
    open(os.path.join(FOLDER, "torchrun.go"), "w").close()
    assert torchrun.proc.wait(120) == 0


@pytest.fixture
def spawned_two_gpus():
    context = mp.spawn(work.spawn_entry, args=(FOLDER, "spawn_2gpu", 40, [0, 1], False), nprocs=2, join=False)
    for rank in range(2):
        wait_for(work.files(FOLDER, f"spawn_2gpu.{rank}")[0], alive=lambda: all(p.is_alive() for p in context.processes))
    return context


def test_spawn_two_gpus(spawned_two_gpus):
    for rank in range(2):
        open(work.files(FOLDER, f"spawn_2gpu.{rank}")[1], "w").close()
    while not spawned_two_gpus.join(timeout=120):
        pass
'''


def truth_ms(folder: Path, *names: str) -> Optional[float]:
    total = 0.0
    for name in names:
        path = folder / f"{name}.json"
        if not path.exists():
            return None
        total += json.loads(path.read_text())["truth_ms"]
    return total


def pytest_run(case_dir: Path, test_file: str, out_name: str, extra: tuple[str, ...] = (), timeout: float = 200) -> dict[str, Any]:
    out = case_dir / out_name
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--gpu-util", "--gpu-util-dir", str(out),
           *extra, str(case_dir / test_file)]
    began = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=case_dir, capture_output=True, text=True, timeout=timeout)
        log = res.stdout + res.stderr
        rc: Any = res.returncode
    except subprocess.TimeoutExpired as exc:
        log = f"TIMEOUT after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
        rc = "timeout"
    (case_dir / f"{out_name}.log").write_text(log if isinstance(log, str) else str(log))
    records = {}
    doc_path = out / "gpu_util.json"
    if doc_path.exists():
        doc = json.loads(doc_path.read_text())
        records = {t["test"].split("::")[-1]: t for t in doc["tests"]}
    return {"rc": rc, "s": round(time.perf_counter() - began, 1), "records": records, "tail": log[-2500:]}


def case_row(case: str, run: dict[str, Any], test: str, truth: Optional[float], note: str = "",
             expect_zero: bool = False) -> dict[str, Any]:
    record = run["records"].get(test)
    gpu_ms = record.get("gpu_busy_ms") if record else None
    error = None
    ok = False
    if gpu_ms is not None and truth:
        error = 100.0 * (gpu_ms - truth) / truth
        ok = abs(error) <= TOLERANCE_PCT
    if expect_zero and gpu_ms is not None:
        ok = gpu_ms < 1.0
    return {"case": case, "test": test, "gpu_ms": gpu_ms, "truth_gpu_ms": truth,
            "error_pct": None if error is None else round(error, 2), "ok": ok,
            "processes": record.get("processes") if record else None, "note": (record or {}).get("note", "") or note,
            "outcome": (record or {}).get("outcome"), "kernel_count": (record or {}).get("kernel_count"),
            "top_kernel": (record or {}).get("top_kernel")}


def trace_order(case_dir: Path, out_name: str) -> dict[str, Any]:
    """Parent bf16 bursts around the child's fp32 one: in that order on the merged time line?"""
    sys.path.insert(0, str(ROOT))
    from pytest_gpuutil.traces.reader import read_trace

    traces = list((case_dir / out_name / "traces").glob("*interleave*"))
    if not traces:
        return {"ok": False, "why": "no trace of test_interleave"}
    events = sorted(read_trace(str(traces[0])).events, key=lambda e: e.start_ns)
    child = [e for e in events if "f32f32" in e.name or "sgemm" in e.name]  # the child's fp32 matmuls
    parent = [e for e in events if e.kind == "kernel" and e not in child and ("nvjet" in e.name or "gemm" in e.name
                                                                               or "bf16" in e.name)]
    if not child or not parent:
        return {"ok": False, "why": f"{len(child)} child and {len(parent)} parent matmuls in the trace"}
    first, last = child[0].start_ns, max(e.end_ns for e in child)
    before = [e for e in parent if e.end_ns <= first]
    after = [e for e in parent if e.start_ns >= last]
    inside = [e for e in parent if e not in before and e not in after]
    return {"ok": len(before) >= 100 and len(after) >= 100 and not inside, "parent_before": len(before),
            "parent_after": len(after), "parent_overlapping_child": len(inside), "child_kernels": len(child),
            "gap_before_child_ms": (first - max(e.end_ns for e in before)) / 1e6 if before else None,
            "gap_after_child_ms": (min(e.start_ns for e in after) - last) / 1e6 if after else None}


def stop_server(truth_file: Path) -> None:
    try:
        os.kill(json.loads(truth_file.read_text())["pid"], 9)
    except (OSError, ValueError, KeyError):
        pass


def prepare(case_dir: Path, files: dict[str, str]) -> None:
    case_dir.mkdir(parents=True, exist_ok=True)
    (case_dir / "work.py").write_text(textwrap.dedent(WORK))
    (case_dir / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name, text in files.items():
        path = case_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def build_program(case_dir: Path) -> str:
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if nvcc is None:
        return "no nvcc"
    (case_dir / "prog.cu").write_text(PROG)
    res = subprocess.run([nvcc, "-O2", "-o", str(case_dir / "prog"), str(case_dir / "prog.cu")], capture_output=True,
                         text=True, timeout=120)
    return "built" if res.returncode == 0 else f"nvcc failed: {res.stderr[-500:]}"


def one_gpu_cases(out: Path, result: dict[str, Any]) -> None:
    case_dir = out / "one_gpu"
    prepare(case_dir, {"test_python.py": TESTS_PYTHON, "test_fork.py": TESTS_FORK.replace("DEVICES", "[0]"),
                       "test_nested.py": TESTS_NESTED, "inner/test_inner.py": TESTS_INNER,
                       "inner/conftest.py": CONFTEST, "inner/work.py": WORK})
    result["nvcc"] = build_program(case_dir)
    truth = case_dir / "truth"
    # the fork cases first and alone: their pytest process must not have initialised CUDA
    run = pytest_run(case_dir, "test_fork.py", "out_fork")
    result["runs"]["fork"] = {k: run[k] for k in ("rc", "s", "tail")}
    result["cases"].append(case_row("fork", run, "test_fork[0]", truth_ms(truth, "fork0")))
    run = pytest_run(case_dir, "test_python.py", "out_python", ("--gpu-util-traces", "all"), timeout=260)
    result["runs"]["python"] = {k: run[k] for k in ("rc", "s", "tail")}
    rows = [
        ("subprocess", "test_subprocess", ("subprocess",)),
        ("spawn", "test_spawn[one]", ("spawn1.0",)),
        ("spawn_two_processes", "test_spawn[two]", ("spawn2.0", "spawn2.1")),
        ("parent_and_child", "test_parent_and_child", ("parent", "with_parent")),
        ("interleave", "test_interleave", ("interleave_parent", "interleave")),
        ("injection_python_S", "test_python_S_injection", ("python_S",)),
        ("injection_nvcc", "test_nvcc_program", ("nvcc",)),
    ]
    for case, test, names in rows:
        result["cases"].append(case_row(case, run, test, truth_ms(truth, *names)))
    server = case_row("server_still_running", run, "test_server_still_running", truth_ms(truth, "server"))
    server["ok"] = server["ok"] and "was still running when the session ended" in run["tail"]
    result["cases"].append(server)
    stop_server(truth / "server.json")
    nvcc = next((c for c in result["cases"] if c["case"] == "injection_nvcc"), None)
    child = [p for p in (nvcc or {}).get("processes") or [] if not p.get("parent")]
    result["checks"].append({"check": "the injected CUDA program's memory comes from NVML's per-process list",
                             "ok": bool(child) and child[0].get("memory_source") == "nvml",
                             "processes": child})
    killed = case_row("sigkill", run, "test_sigkill", truth_ms(truth, "killed"))
    # killed: what was handed over (every 0.5 s) is at most the truth so far, and not much less
    if killed["gpu_ms"] is not None and killed["truth_gpu_ms"]:
        killed["ok"] = (killed["gpu_ms"] <= killed["truth_gpu_ms"] * 1.05 and killed["gpu_ms"] >= killed["truth_gpu_ms"] - 700
                        and "without handing over" in (killed["note"] or ""))
    result["cases"].append(killed)
    result["checks"].append({"check": "parent and child bursts in order on one clock (trace of test_interleave)",
                             **trace_order(case_dir, "out_python")})
    run = pytest_run(case_dir, "test_nested.py", "out_nested")
    result["runs"]["nested"] = {k: run[k] for k in ("rc", "s", "tail")}
    outer = case_row("nested_outer", run, "test_nested_pytest", 0.0, expect_zero=True)
    inner_doc = case_dir / "inner" / "out" / "gpu_util.json"
    inner = {"records": {t["test"].split("::")[-1]: t for t in json.loads(inner_doc.read_text())["tests"]}} if inner_doc.exists() else {"records": {}}
    result["cases"].append(outer)
    result["cases"].append(case_row("nested_inner", inner, "test_inner_child", truth_ms(case_dir / "inner" / "truth", "nested_inner")))


def two_gpu_cases(out: Path, result: dict[str, Any]) -> None:
    case_dir = out / "two_gpu"
    prepare(case_dir, {"test_two.py": TESTS_TWO_GPU, "test_fork.py": TESTS_FORK.replace("DEVICES", "[1]")})
    truth = case_dir / "truth"
    run = pytest_run(case_dir, "test_fork.py", "out_fork")
    result["runs"]["fork_2gpu"] = {k: run[k] for k in ("rc", "s", "tail")}
    result["cases"].append(case_row("fork_second_gpu", run, "test_fork[1]", truth_ms(truth, "fork1")))
    run = pytest_run(case_dir, "test_two.py", "out_two", timeout=260)
    result["runs"]["two_gpu"] = {k: run[k] for k in ("rc", "s", "tail")}
    result["cases"].append(case_row("torchrun", run, "test_torchrun", truth_ms(truth, "torchrun.0", "torchrun.1")))
    result["cases"].append(case_row("spawn_two_gpus", run, "test_spawn_two_gpus", truth_ms(truth, "spawn_2gpu.0", "spawn_2gpu.1")))


def overhead(out: Path, repeats: int, result: dict[str, Any]) -> None:
    target = out / "overhead"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_overhead.py"), "--out", str(target), "--repeats", str(repeats),
           "--variant", "children_off=--gpu-util-children=off"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 60 * repeats * 3)
    (out / "overhead.log").write_text(res.stdout + res.stderr)
    doc = json.loads((target / "overhead.json").read_text()) if (target / "overhead.json").exists() else {}
    result["overhead"] = {
        "repeats": repeats,
        "suites": {name: {"ratio_children_on": s["ratio"], "ratio_children_off": s["variants"]["children_off"]["ratio"],
                          "plain_s": s["plain_s"], "children_on_s": s["gpu_util_s"],
                          "children_off_s": s["variants"]["children_off"]["s"]}
                   for name, s in doc.get("suites", {}).items()},
        "tail": (res.stdout + res.stderr)[-1500:],
    }


def summary(result: dict[str, Any]) -> None:
    print("\n===== children truth =====")
    print(f"{'case':22} {'test':28} {'GPU ms':>9} {'truth ms':>9} {'error %':>8}  ok  processes")
    for c in result["cases"]:
        procs = ", ".join(f"{p.get('program')}:{p.get('gpu_ms') or 0:.1f}{'(' + p['note'] + ')' if p.get('note') else ''}"
                          for p in c.get("processes") or [])
        gpu = "" if c["gpu_ms"] is None else f"{c['gpu_ms']:.2f}"
        truth = "" if c["truth_gpu_ms"] is None else f"{c['truth_gpu_ms']:.2f}"
        err = "" if c["error_pct"] is None else f"{c['error_pct']:+.2f}"
        print(f"{c['case']:22} {c['test'][:28]:28} {gpu:>9} {truth:>9} {err:>8}  {'yes' if c['ok'] else 'NO '} {procs[:90]}")
        if not c["ok"] and c.get("note"):
            print(f"{'':22} note: {c['note'][:200]}")
    for check in result["checks"]:
        print("check:", json.dumps(check)[:300])
    for name, run in result["runs"].items():
        if run.get("rc") != 0:
            print(f"run {name}: rc={run.get('rc')}:", run.get("tail", "")[-600:].replace("\n", " | "))
    for name, s in result.get("overhead", {}).get("suites", {}).items():
        print(f"overhead {name}: children on {s['ratio_children_on']:.3f}x, off {s['ratio_children_off']:.3f}x")
    print(f"nvcc: {result.get('nvcc')}; {sum(c['ok'] for c in result['cases'])}/{len(result['cases'])} cases ok")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--two-gpu", action="store_true", help="the 2-GPU cases (torchrun, spawn per GPU, fork on GPU 1)")
    parser.add_argument("--overhead-repeats", type=int, default=2)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update(NCCL_SAFE)
    result: dict[str, Any] = {"cases": [], "checks": [], "runs": {}}

    def save() -> None:
        (out / "children.json").write_text(json.dumps(result, indent=1, default=str) + "\n")

    steps = [two_gpu_cases] if args.two_gpu else [one_gpu_cases]
    for step in steps:
        try:
            step(out, result)
        except Exception:  # noqa: BLE001 - the rest still runs and is written
            result["runs"][step.__name__] = {"rc": "error", "tail": traceback.format_exc()[-2500:]}
        save()
    if args.overhead_repeats and not args.two_gpu:
        try:
            overhead(out, args.overhead_repeats, result)
        except Exception:  # noqa: BLE001
            result["overhead"] = {"error": traceback.format_exc()[-2000:]}
        save()
    summary(result)
    return 0 if result["cases"] and all(c["ok"] for c in result["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
