"""The Python child's bootstrap, run for real: the .pth in site-packages, the torch import hook,
the capture started at CUDA's initialisation, the fork handler, exit and SIGKILL, a child's own
profiler, and a nested pytest run taking the capture over. torch and CUPTI are the fakes of
conftest.py, so the children run anywhere with a C compiler."""
from __future__ import annotations

import os
import signal
import site
import subprocess
import sys
import time

import pytest

from pytest_gpuutil.children.spool import injection_library
from pytest_gpuutil.children.spool_format import EXITED, FORKED, NESTED, PYTHON

from .conftest import child_env, run_python
from .helpers import read_spool

PTH = "pytest_gpuutil_children.pth"
pytestmark = pytest.mark.skipif(
    not any(os.path.exists(os.path.join(p, PTH)) for p in site.getsitepackages()),
    reason=f"{PTH} is not installed in site-packages (pip install -e . puts it there)")


def test_a_torch_child_hands_over_its_kernels_memory_and_end(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti, RANK="1", LOCAL_RANK="1")
    run_python("import torch\nfor _ in range(3): torch.cuda.work('_Zmatmul', 2_000_000, memory=3 << 20)\n"
               "torch.cuda.work('_Zadd', 1_000_000, device=1, memory=1 << 20)", env)
    (child,) = read_spool(str(spool.directory))
    assert child.header.capture == PYTHON and child.header.program == "python -c"
    assert child.header.rank == "1" and child.header.library == fake_cupti and child.header.startup_ns > 0
    assert child.names() == ["matmul", "matmul", "matmul", "add"]  # demangled in the child
    assert child.durations() == [2_000_000] * 3 + [1_000_000]
    assert child.memory[-1].devices == ((0, 3 << 20, 6 << 20), (1, 1 << 20, 2 << 20))
    assert [e.reason for e in child.end] == [EXITED]


def test_a_child_that_imports_torch_but_never_uses_cuda_writes_nothing(spool, fake_cupti) -> None:
    run_python("import torch; assert not torch.cuda.is_initialized()", child_env(spool, fake_cupti))
    assert read_spool(str(spool.directory)) == []


def test_no_spool_variable_no_bootstrap(spool, fake_cupti) -> None:
    env = child_env(spool, fake_cupti)
    del env["PYTEST_GPUUTIL_SPOOL"]
    out = run_python("import sys, torch; torch.cuda.work('k', 1000)\n"
                     "print('pytest_gpuutil.children.bootstrap' in sys.modules)", env)
    assert out.stdout.strip() == "False" and read_spool(str(spool.directory)) == []


def test_a_child_where_cupti_cannot_start_says_so(spool, fake_cupti, tmp_path) -> None:
    env = child_env(spool, fake_cupti)
    # the fake torch loads no libcupti: CUPTI "is not loaded in this process"
    env["FAKE_CUPTI"] = "libc.so.6"
    run_python("import torch; torch.cuda.init()", env)
    (child,) = read_spool(str(spool.directory))
    assert child.events == [] and child.notes[0].text.startswith("not measured: CUPTI did not start")


def test_a_forked_child_is_measured_and_the_parent_is_not(spool, fake_cupti) -> None:
    code = """
import os, torch
from pytest_gpuutil.children import bootstrap
os.environ.pop("PYTEST_GPUUTIL_SPOOL")  # the parent: a pytest process, not bootstrapped
bootstrap.ensure_fork_hook()
os.environ["PYTEST_GPUUTIL_SPOOL"] = SPOOL
pid = os.fork()
if pid == 0:
    torch.cuda.work("_Zchild_kernel", 1_000_000)
    assert os.environ["PYTEST_GPUUTIL_SELF"] == str(os.getpid())
    os._exit(0)  # how multiprocessing's forked children end: no atexit
_, status = os.waitpid(pid, 0)
assert status == 0, status
"""
    env = child_env(spool, fake_cupti)
    run_python(f"SPOOL = {str(spool.directory)!r}\n" + code, env)
    (child,) = read_spool(str(spool.directory))
    assert child.header.flags & FORKED and child.header.program.endswith("(forked)")
    assert child.names() == ["child_kernel"] and [e.reason for e in child.end] == [EXITED]


def test_multiprocessing_fork_children_hand_over(spool, fake_cupti) -> None:
    code = """
import multiprocessing as mp, torch
def work(i):
    torch.cuda.work(f"_Zk{i}", 500_000)
if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=work, args=(i,)) for i in range(2)]
    for p in procs: p.start()
    for p in procs: p.join(); assert p.exitcode == 0
"""
    run_python(code, child_env(spool, fake_cupti))
    files = read_spool(str(spool.directory))
    assert sorted(n for f in files for n in f.names()) == ["k0", "k1"]
    assert all(f.header.flags & FORKED and f.end for f in files)


AFTER_A_SYNC = """
import sys, time, torch
torch.cuda.work("_Zfirst", 1_000_000)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
torch.cuda.work("_Zafter_the_last_hand_over", 1_000_000)
print("done", flush=True)
time.sleep(60)
"""


def sigkill_after(spool, fake_cupti, code: str, **env: str) -> list[str]:
    """Run ``code``; at its "ready", the spool's kernels; then a line to its stdin, and SIGKILL at its "done"."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=child_env(spool, fake_cupti, period=3600, **env),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        (child,) = read_spool(str(spool.directory))
        at_ready = child.names()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        proc.kill()
    (child,) = read_spool(str(spool.directory))
    assert child.end == []  # killed: no END chunk
    return at_ready + ["|"] + child.names()


def test_a_sigkill_after_a_synchronize_keeps_the_work_before_it(spool, fake_cupti) -> None:
    # CUPTI's default flush holds a buffer until it is full (FAKE_CUPTI_HOLD): only the hand-over right
    # after torch.cuda.synchronize brings "first" before the kill; the later kernel is what is lost
    got = sigkill_after(spool, fake_cupti, AFTER_A_SYNC, FAKE_CUPTI_HOLD="1")
    assert got == ["first", "|", "first"]


def test_synchronize_stays_torchs_own_to_the_program(spool, fake_cupti) -> None:
    code = """
import torch
original = torch.cuda.synchronize
torch.cuda.work("_Zk", 1_000_000)
wrapped = torch.cuda.synchronize
assert wrapped is not original and wrapped.__wrapped__ is original and wrapped.__name__ == "synchronize"
assert wrapped() is None and wrapped(0) is None
"""
    run_python(code, child_env(spool, fake_cupti, period=3600, FAKE_CUPTI_HOLD="1"))
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["k"] and child.end  # handed over at the synchronize, and at exit (nothing more)


def test_synchronizes_in_a_burst_hand_over_at_most_every_gap(spool, fake_cupti) -> None:
    code = """
import torch
from pytest_gpuutil.children import bootstrap
from pytest_gpuutil.children.child_capture import SYNC_HAND_OVER_GAP_S
torch.cuda.work("_Zk", 1_000)
capture = bootstrap._PROCESS.capture
capture.last_forced = float("inf")  # as if one had just happened: the next synchronizes are within the gap
for _ in range(100):
    torch.cuda.synchronize()
print(len(capture.source.drain()[0]))
"""
    out = run_python(code, child_env(spool, fake_cupti, period=3600, FAKE_CUPTI_HOLD="1")).stdout
    assert out.split() == ["1"]  # the kernel was still with CUPTI: no synchronize in the gap handed over


def test_the_injection_library_stays_out_of_a_bootstrapped_child(spool, fake_cupti) -> None:
    lib = injection_library()
    if lib is None:
        pytest.skip("the injection library was not built")
    code = """
import ctypes, os, torch
torch.cuda.init()
assert ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection() == 1  # as the driver would
torch.cuda.work("_Zk", 1_000_000)
"""
    run_python(code, child_env(spool, fake_cupti, inject=lib))
    (child,) = read_spool(str(spool.directory))  # one file: the Python capture's
    assert child.header.capture == PYTHON and child.names() == ["k"]


def test_a_child_injected_before_torch_stays_with_the_injection_library(spool, fake_cupti) -> None:
    lib = injection_library()
    if lib is None:
        pytest.skip("the injection library was not built")
    code = """
import ctypes, os
fake = ctypes.CDLL(os.environ["FAKE_CUPTI"], mode=ctypes.RTLD_GLOBAL)
assert ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection() == 1  # CUDA first, from C
import torch
from pytest_gpuutil.children import bootstrap
torch.cuda.work("_Zk", 1_000_000)
assert bootstrap.current() is None
"""
    run_python(code, child_env(spool, fake_cupti, inject=lib))
    (child,) = read_spool(str(spool.directory))
    assert child.header.capture != PYTHON and child.names() == ["_Zk"]


def test_a_childs_own_profiler_session_is_stepped_around(spool, fake_cupti) -> None:
    code = """
import time, torch
from torch.autograd.profiler import profile
torch.cuda.work("_Zbefore", 1_000_000)
prof = profile()
prof._prepare_trace()
torch.cuda.work("_Zduring", 1_000_000)
prof.stop()
from pytest_gpuutil.children import bootstrap
deadline = time.monotonic() + 120
while bootstrap._PROCESS.capture.paused and time.monotonic() < deadline:
    time.sleep(0.01)  # until the hand-over thread has seen the session end and measures again
torch.cuda.work("_Zafter", 1_000_000)
"""
    run_python(code, child_env(spool, fake_cupti, period=0.05))
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["before", "after"]
    assert [n.text.split(":")[0] for n in child.notes] == ["its own torch.profiler session took over CUPTI",
                                                          "measured again after its torch.profiler session"]


def test_a_nested_pytest_run_takes_the_capture_over(spool, fake_cupti) -> None:
    code = """
import torch
from pytest_gpuutil.children import bootstrap
torch.cuda.work("_Zbefore", 1_000_000)
source = bootstrap.take_over()
assert source is not None and bootstrap.current() is None
torch.cuda.work("_Zmine_now", 1_000_000)
columns, _ = source.drain()
assert list(columns.names) == ["mine_now"], list(columns.names)
"""
    run_python(code, child_env(spool, fake_cupti))
    (child,) = read_spool(str(spool.directory))
    assert child.names() == ["before"] and [e.reason for e in child.end] == [NESTED]
