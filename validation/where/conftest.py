"""The planted-cause suite's set-up: CUDA, cuBLAS (bf16 and fp32) and host copies warmed up at the
session's start, so that no planted test's window holds a one-time cost; skipped without CUDA."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(items):
    if not torch.cuda.is_available():
        for item in items:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(scope="session", autouse=True)
def warm():
    if not torch.cuda.is_available():
        yield
        return
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.randn(4096, 4096, device="cuda", dtype=dtype)
        (a @ a).sum().item()
    host = torch.randn(1 << 20)
    host.to("cuda")
    host.pin_memory().to("cuda", non_blocking=True)
    torch.zeros(1024, device="cuda").add_(1)
    torch.cuda.synchronize()
    yield
