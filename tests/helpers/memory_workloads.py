"""Four pytest tests with known GPU memory behaviour, as source text for ``pytester`` or a file.

A 1 GiB tensor allocated and freed; 256 MiB kept alive in a module global under
``max_leak="1 MiB"``; an allocation that cannot fit (out of memory); kernel_bench (the profiler
steps aside, memory is still measured). ``LEAK_LINE`` and ``OOM_LINE`` are the lines of
``TESTS`` that allocate the kept 256 MiB and the allocation that cannot fit. Used by
``tests/capture/test_memory_gpu.py`` and ``validation/memory_truth.py``.
"""
from __future__ import annotations

TESTS = '''import pytest
import torch

KEEP = []


def test_1_one_gib():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del x


@pytest.mark.gpu_util(max_leak="1 MiB")
def test_2_keeps_256_mib():
    KEEP.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))


def test_3_out_of_memory():
    free, total = torch.cuda.mem_get_info()
    torch.empty(total * 2, dtype=torch.uint8, device="cuda")


def test_4_kernel_bench(kernel_bench):
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    kernel_bench(lambda: x.add_(1), warmup_ms=1, rep_ms=2)
'''
#: the line of TESTS that allocates the 256 MiB the leaky test keeps
LEAK_LINE = 14
#: the line of TESTS whose allocation cannot fit
OOM_LINE = 19
