"""(GPU) Child processes measured for real: a subprocess's matmuls and a forked child under --gpu-util.

Skipped without CUDA. validation/children_truth.py checks the figures against CUDA-event truth
on more kinds of children (spawn, torchrun, the injection library, SIGKILL).
"""
from __future__ import annotations

import pytest

from tests.helpers import HAS_CUDA, read_json, records_by_test

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")

CHILD_CODE = """
import json, sys, torch
a = torch.randn(2048, 2048, device="cuda")
a @ a
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(50):
    a @ a
e.record()
e.synchronize()
json.dump({"truth_ms": s.elapsed_time(e)}, open(sys.argv[1], "w"))
"""

TESTS = f"""
import json, multiprocessing as mp, subprocess, sys
import torch

CHILD = {CHILD_CODE!r}


def test_subprocess(tmp_path):
    subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "truth.json")], check=True, timeout=120)
    print("TRUTH", json.loads((tmp_path / "truth.json").read_text())["truth_ms"])


def forked_work():
    a = torch.randn(1024, 1024, device="cuda")
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()


def test_fork_under_gpu_util():
    # the pytest process has not used CUDA: a forked child can, with --gpu-util as without it
    assert not torch.cuda.is_initialized()
    process = mp.get_context("fork").Process(target=forked_work)
    process.start()
    process.join(120)
    assert process.exitcode == 0
"""


def test_childrens_gpu_work_is_attributed_and_fork_still_works(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kids=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpu-util", "-s")
    result.assert_outcomes(passed=2)
    got = records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))
    sub = got["test_kids.py::test_subprocess"]
    # with -s the line follows pytest's "test_kids.py " on the same line
    truth = float(next(line.split("TRUTH", 1)[1].split()[0] for line in result.stdout.lines if "TRUTH" in line))
    kids = [p for p in sub["processes"] if not p["parent"]]
    assert len(kids) == 1 and kids[0]["measured_by"] == "python" and kids[0]["memory_source"] == "allocator"
    # the child's 51 matmuls and 1 randn: its 50 timed ones are the truth, within 5 %
    assert truth * 0.95 <= sub["gpu_busy_ms"] <= truth * 1.10
    forked = got["test_kids.py::test_fork_under_gpu_util"]
    assert [p["program"].endswith("(forked)") for p in forked["processes"]] == [True]
    assert forked["kernel_count"] >= 20
