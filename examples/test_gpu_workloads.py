"""Small real GPU workloads: the suite pytest-gpuutil measures (each well under 1 s of GPU time).

Run on a GPU machine: ``pytest examples`` (skipped without CUDA, see conftest.py).
``GPUUTIL_EXAMPLE_SLOW=1`` makes test_matmul_bf16 do redundant fp32 work, to show a regression gate.
"""
from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

DEVICE = "cuda"
SLOW = os.environ.get("GPUUTIL_EXAMPLE_SLOW") == "1"


def _max_rel_err(actual, expected) -> float:
    return ((actual.float() - expected).abs().max() / expected.abs().max()).item()


def test_matmul_bf16():
    torch.manual_seed(0)
    n = 4096
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    out = a @ b
    reference = a.float() @ b.float()
    if SLOW:  # the deliberate regression: five redundant full-precision matmuls
        for _ in range(5):
            reference = a.float() @ b.float()
    assert out.dtype == torch.bfloat16
    assert _max_rel_err(out, reference) < 2e-2


def test_conv2d_forward_backward():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 128, kernel_size=3, padding=1).to(DEVICE)
    x = torch.randn(16, 64, 56, 56, device=DEVICE, requires_grad=True)
    y = conv(x)
    y.sum().backward()
    # forward against the CPU on two images; TF32 convolutions allow ~1e-3 relative error
    expected = F.conv2d(x[:2].detach().cpu(), conv.weight.detach().cpu(), conv.bias.detach().cpu(), padding=1)
    assert _max_rel_err(y[:2].detach().cpu(), expected) < 1e-2
    # d(sum)/d(bias) is the number of output positions per channel, exactly
    assert torch.equal(conv.bias.grad, torch.full_like(conv.bias.grad, 16 * 56 * 56))
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all()


def test_scaled_dot_product_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 1024, 64, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(1024, 1024, device=DEVICE, dtype=torch.bool).tril()
    reference = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v.float()
    assert _max_rel_err(out, reference) < 2e-2


def test_launch_bound_tiny_kernels():
    x = torch.zeros(1024, device=DEVICE)
    for _ in range(2000):
        x.add_(1)
    assert torch.all(x == 2000).item()


def test_training_step_loss_decreases():
    torch.manual_seed(0)
    x = torch.randn(1024, 256, device=DEVICE)
    y = x @ torch.randn(256, 10, device=DEVICE)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(30):
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# --- the plugin's fixtures ---------------------------------------------------------------------


def test_gpu_trace_context_manager(gpu_trace):
    a = torch.randn(2048, 2048, device=DEVICE)
    with gpu_trace() as t:
        for _ in range(10):
            a = torch.tanh(a @ a)
    assert t.summary.busy_pct > 0
    assert t.summary.mm_conv_pct > 0


def test_gpu_trace_run(gpu_trace):
    a = torch.randn(2048, 2048, device=DEVICE, dtype=torch.bfloat16)
    result = gpu_trace.run(torch.mm, a, a, warmup=2, runs=3)
    assert result.busy_pct > 0
    assert result.mm_conv_pct > 0
    assert result.summary.top_kernels[0].category == "gemm"


def test_kernel_bench_matmul(kernel_bench):
    n = 4096
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    result = kernel_bench(torch.mm, a, b, flops=2 * n**3)
    assert result.timer == "cuda_event"
    assert result.median > 0
    assert result.tflops is not None and result.tflops > 0


def test_metric_table_matmul_sizes(metric_table):
    table = metric_table("matmul_sizes", ["n", "ms"])
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
        a @ a  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ a
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        assert ms > 0
        table.add_row({"n": n, "ms": ms})
