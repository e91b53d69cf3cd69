"""One planted cause per test (issue 42): each test's finding must name the line marked ``# planted``
first. The four read-back loops are the issue's table (bf16 matmuls with a read-back each step)."""
from __future__ import annotations

import time

import torch

CUDA = "cuda"


def matmuls(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(size, size, device=CUDA, dtype=torch.bfloat16),
            torch.randn(size, size, device=CUDA, dtype=torch.bfloat16))


def test_sum_item_100_x_2048():
    a, b = matmuls(2048)
    torch.cuda.synchronize()
    for _ in range(100):
        (a @ b).sum().item()  # planted: host-sync


def test_sum_item_300_x_4096():
    a, b = matmuls(4096)
    torch.cuda.synchronize()
    for _ in range(300):
        (a @ b).sum().item()  # planted: host-sync


def test_index_item_300_x_4096():
    a, b = matmuls(4096)
    torch.cuda.synchronize()
    for _ in range(300):
        c = a @ b
        c[0, 0].item()  # planted: host-sync


def test_synchronize_300_x_4096():
    a, b = matmuls(4096)
    torch.cuda.synchronize()
    for _ in range(300):
        a @ b
        torch.cuda.synchronize()  # planted: host-sync


def test_pageable_copies_in_a_loop():
    batches = [torch.randn(2048, 1024) for _ in range(24)]  # 8 MB each, pageable
    w = torch.randn(1024, 1024, device=CUDA)
    torch.cuda.synchronize()
    for batch in batches:
        x = batch.to(CUDA, non_blocking=True)  # planted: pageable-memcpy
        x @ w


def slow_helper(seconds: float) -> float:
    end, total = time.perf_counter() + seconds, 0.0
    while time.perf_counter() < end: total += sum(i * 0.5 for i in range(200))  # planted: gpu-idle
    return total


def test_slow_host_helper_between_steps():
    a, b = matmuls(1024)
    for _ in range(20):
        a @ b
        slow_helper(0.005)


def test_6000_launches():
    x = torch.zeros(1024, device=CUDA)
    torch.cuda.synchronize()
    for _ in range(6000):
        x.add_(1)  # planted: launch-bound
