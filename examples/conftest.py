"""The examples' set-up: what each test is meant to show, CUDA warmed up once, skips without CUDA.

``PAIRS`` and ``HEALTHY`` are the one place that says what each example should show under
``pytest --gpu-util`` on a GPU: each problem test exactly its rule's finding, its fix twin (the
same work done right) none, and the figure the fix moves; ``validation/examples_truth.py`` reads
them to check a real run. Every test in this folder is skipped where no CUDA GPU is available.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

HERE = Path(__file__).resolve().parent
SKIP_REASON = "needs a CUDA GPU"


class Pair(NamedTuple):
    """A problem test beside its fix: the rule the problem shows, and the figure the fix moves."""

    problem: str
    fix: str
    rule: str
    #: "busy_pct": the fix keeps the GPU busier (higher); "gpu_busy_ms": the same work takes less GPU
    #: time (lower; a GPU-bound window is ~100 % busy either way, so busy % cannot show it)
    moves: str


#: the problems and their fixes, in the order the story tells them (test function names)
PAIRS: tuple[Pair, ...] = (
    Pair("test_copy_pageable_batches", "test_copy_pinned_batches", "pageable-memcpy", "gpu_busy_ms"),
    Pair("test_matmul_fp32", "test_matmul_tf32", "fp32-matmul", "gpu_busy_ms"),
    Pair("test_steps_launched_one_by_one", "test_steps_replayed_as_cuda_graph", "launch-bound", "busy_pct"),
    Pair("test_loss_read_every_step", "test_loss_read_once_at_end", "host-sync", "busy_pct"),
)
#: tests that should show no finding at all (the fixtures' tests are measured by the fixture itself)
HEALTHY: tuple[str, ...] = ("test_matmul_bf16", "test_gpu_trace_block", "test_kernel_bench_matmul",
                            "test_metric_table_matmul_sizes")


def expected_rules() -> dict[str, tuple[str, ...]]:
    """Test function name -> the rule ids its findings should be, exactly."""
    found: dict[str, tuple[str, ...]] = {name: () for name in HEALTHY}
    for pair in PAIRS:
        found[pair.problem] = (pair.rule,)
        found[pair.fix] = ()
    return found


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _mine(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if _mine(item)]
    if not mine or _cuda_available():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in mine:
        item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def warm_gpu() -> Iterator[None]:
    """Bring CUDA up once, before the first example: the context, cuBLAS's handles and kernels for
    bf16, fp32 and TF32 matmuls, and the staging buffers of pageable and pinned copies. No test's
    measured call then holds a one-time cost."""
    import torch

    before = torch.get_float32_matmul_precision()
    for precision in ("highest", "high"):
        torch.set_float32_matmul_precision(precision)
        a = torch.randn(512, 512, device="cuda")
        a @ a
    torch.set_float32_matmul_precision(before)
    b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    b @ b
    host = torch.randn(1 << 20)
    host.to("cuda", non_blocking=True)
    host.pin_memory().to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    yield


@pytest.fixture
def matmul_precision() -> Iterator[object]:
    """``torch.set_float32_matmul_precision`` for one test ("highest": fp32, "high": TF32), put back after it."""
    import torch

    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)
