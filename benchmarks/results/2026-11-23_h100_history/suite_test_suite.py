
import os
import time

import pytest

torch = pytest.importorskip("torch")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
SLOW = int(os.environ.get("HISTORY_NOISE_SLOW", "1"))
SIZE = 2048 if DEV == "cuda" else 256


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# -- kernel_bench: CUDA-event timings ---------------------------------------------------------
def test_kb_matmul(kernel_bench):
    a = torch.randn(SIZE, SIZE, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float32)
    b = torch.randn_like(a)

    def run():
        for _ in range(SLOW):
            a @ b

    kernel_bench(run, warmup_ms=10, rep_ms=50, label="mm")


def test_kb_small(kernel_bench):
    x = torch.ones(1024, device=DEV)

    def run():
        for _ in range(SLOW):
            x.add_(1)

    kernel_bench(run, warmup_ms=5, rep_ms=30, label="add_1k")


def test_kb_big_add(kernel_bench):
    x = torch.ones(16 * 1024 * 1024 if DEV == "cuda" else 1024 * 1024, device=DEV)
    kernel_bench(lambda: x.add_(1), warmup_ms=10, rep_ms=50, label="add_64MiB")


def test_kb_softmax(kernel_bench):
    x = torch.randn(4 * SIZE, SIZE, device=DEV)
    kernel_bench(lambda: torch.softmax(x, dim=-1), warmup_ms=10, rep_ms=50, label="softmax")


def test_kb_layernorm(kernel_bench):
    x = torch.randn(4 * SIZE, 1024, device=DEV)
    kernel_bench(lambda: torch.nn.functional.layer_norm(x, (1024,)), warmup_ms=10, rep_ms=50, label="layernorm")


# -- plain tests, measured by --gpu-util ------------------------------------------------------
def test_matmul_loop():
    a = torch.randn(SIZE, SIZE, device=DEV)
    for _ in range(20):
        a = torch.tanh(a @ a)
    sync()


def test_launch_bound():
    x = torch.ones(1024, device=DEV)
    for _ in range(2000):
        x.add_(1)
    sync()


def test_mixed_host_work():
    x = torch.randn(SIZE, SIZE, device=DEV)
    for _ in range(10):
        y = torch.relu(x @ x).sum().item()
        time.sleep(0.001)
    assert y == y


def test_copies():
    host = torch.ones(16 * 1024 * 1024)
    for _ in range(4):
        back = host.to(DEV, copy=True).mul_(2).cpu()
    assert back[0] == 2


def test_conv():
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(DEV)
    x = torch.randn(16, 64, 64, 64, device=DEV)
    with torch.no_grad():
        for _ in range(5):
            x = conv(x)
    sync()
