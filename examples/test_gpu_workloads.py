"""What ``pytest --gpu-util`` is for, in four problems, each beside its fix, and a healthy matmul.

    pytest --gpu-util --gpu-util-html examples/        (on a GPU machine; skipped without CUDA)

Each problem test gets one finding, the rule that names its problem; the test after it does the
same work the way the finding's fix says, gets none, and moves a number: the GPU is busier, or
the same work takes less GPU time (``conftest.PAIRS`` says which, for each pair). Data,
weights and reference results are built in fixtures, outside the measured call, and
``conftest.warm_gpu`` brings CUDA and cuBLAS up before the first test: each test's window holds
its GPU work and nothing else.

The last tests use the plugin's fixtures: ``gpu_trace``, ``kernel_bench`` and ``metric_table``.
``GPUUTIL_EXAMPLE_SLOW=1`` makes ``test_matmul_bf16`` do five redundant fp32 matmuls: a change
that a saved baseline's gate catches (``--gpu-util-compare``).
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

DEVICE = "cuda"
BF16 = torch.bfloat16
SLOW = os.environ.get("GPUUTIL_EXAMPLE_SLOW") == "1"


def rel_err(actual, expected) -> float:
    """The relative error of ``actual`` (Frobenius norm), in float64."""
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


# -- 1. Copies to the GPU: pageable host memory, then pinned ---------------------------------------
# A loader hands a model 48 batches of 8 MB from host memory. From ordinary (pageable) memory
# non_blocking=True does not help: the driver stages each batch through a buffer of its own, and
# the copy runs at about a third of the speed of a copy from pinned memory. Sizes: the model's
# work is about twice a pinned copy, so that the copies stay under half of the fixed test's GPU
# time (else "memcpy-dominant" would name them there). The GPU is busy in both windows (the
# copies count): what the fix moves is the GPU time.

BATCHES, BATCH_ROWS, FEATURES, HIDDEN = 48, 4096, 1024, 12288


@pytest.fixture(scope="module")
def loader():
    """The batches in pageable and in pinned host memory, the model's weights, and its outputs."""
    torch.manual_seed(0)
    on_gpu = torch.randn(BATCHES, BATCH_ROWS, FEATURES, device=DEVICE, dtype=BF16)
    w1 = torch.randn(FEATURES, HIDDEN, device=DEVICE, dtype=BF16) / FEATURES**0.5
    w2 = torch.randn(HIDDEN, FEATURES, device=DEVICE, dtype=BF16) / HIDDEN**0.5
    expected = torch.empty_like(on_gpu)
    for batch, out in zip(on_gpu, expected):
        torch.mm(batch @ w1, w2, out=out)
    # the tests' comparison once, here: its first run loads its kernels and grows the caching
    # allocator (~145 ms on an H100), which would land in whichever copy test runs first (issue 42)
    torch.testing.assert_close(expected.clone(), expected)
    pageable = on_gpu.cpu()
    return SimpleNamespace(pageable=pageable.unbind(0), pinned=pageable.pin_memory().unbind(0), w1=w1, w2=w2,
                           expected=expected, out=torch.empty_like(on_gpu))


@pytest.fixture
def model(loader):
    """The loader with its output buffer emptied (NaN), so that a test can only pass on its own outputs."""
    loader.out.fill_(float("nan"))
    torch.cuda.synchronize()
    return loader


def run_model(batches, model) -> None:
    for batch, out in zip(batches, model.out):
        x = batch.to(DEVICE, non_blocking=True)
        torch.mm(x @ model.w1, model.w2, out=out)


def test_copy_pageable_batches(model):
    """Problem (pageable-memcpy): each batch copied from pageable memory."""
    run_model(model.pageable, model)
    torch.testing.assert_close(model.out, model.expected)


def test_copy_pinned_batches(model):
    """Fix: the same batches from pinned memory (DataLoader(pin_memory=True) does this), non_blocking=True."""
    run_model(model.pinned, model)
    torch.testing.assert_close(model.out, model.expected)


# -- 2. fp32 matmuls, then TF32 --------------------------------------------------------------------
# A 16-layer fp32 linear stack. Without TF32 the matmuls run on the GPU's fp32 units; with TF32
# (torch.set_float32_matmul_precision("high")) on its tensor cores, about 8x faster, to a
# relative error of ~1e-3 a layer instead of ~1e-6: enough for most tests' tolerance. Both
# windows are GPU-bound (busy ~100 %): what the fix moves is the GPU time.

LAYERS, WIDTH = 16, 4096


@pytest.fixture(scope="module")
def linear_stack():
    """The input, the layers' weights (scaled to keep the activations' size) and the float64 result."""
    torch.manual_seed(0)
    x = torch.randn(WIDTH, WIDTH, device=DEVICE)
    weights = [torch.randn(WIDTH, WIDTH, device=DEVICE) / WIDTH**0.5 for _ in range(LAYERS)]
    reference = x.double()
    for w in weights:
        reference = reference @ w.double()
    before = torch.get_float32_matmul_precision()
    for precision in ("highest", "high"):  # each test's kernels loaded, and cuBLAS's choice made, here
        torch.set_float32_matmul_precision(precision)
        x @ weights[0]
    torch.set_float32_matmul_precision(before)
    return SimpleNamespace(x=x, weights=weights, reference=reference)


def forward(stack):
    x = stack.x
    for w in stack.weights:
        x = x @ w
    return x


def test_matmul_fp32(linear_stack, matmul_precision):
    """Problem (fp32-matmul): full fp32 matmuls, the default."""
    matmul_precision("highest")
    assert rel_err(forward(linear_stack), linear_stack.reference) < 1e-4


def test_matmul_tf32(linear_stack, matmul_precision):
    """Fix: the same matmuls with TF32 allowed, checked to the tolerance TF32 keeps."""
    matmul_precision("high")
    assert rel_err(forward(linear_stack), linear_stack.reference) < 5e-2


# -- 3. Many small kernels: one launch each, then CUDA graphs ------------------------------------
# 1,500 steps of a small simulation (512k springs), two ~3 µs kernels a step. Launched one by
# one, the host's ~5-10 µs per launch sets the pace and the GPU idles between kernels; captured
# once as a CUDA graph of 50 steps (in the fixture), the same 3,000 kernels go out in 30 replays.
# (One graph of all 3,000 kernels would keep the GPU waiting while the host submits it: a graph's
# launch costs the host about 2 µs a kernel, and its first kernel starts when the launch is done.)

PARTICLES, STEPS, DT = 1 << 19, 1500, 1e-3
GRAPH_STEPS = 50


def simulate(x, v, steps: int = STEPS) -> None:
    for _ in range(steps):
        v.add_(x, alpha=-DT)  # the springs pull back
        x.add_(v, alpha=DT)


@pytest.fixture(scope="module")
def springs():
    """Start positions and speeds, their state after STEPS steps, and GRAPH_STEPS steps captured as a CUDA graph."""
    torch.manual_seed(0)
    x0, v0 = torch.randn(PARTICLES, device=DEVICE), torch.randn(PARTICLES, device=DEVICE)
    x, v = x0.clone(), v0.clone()
    simulate(x, v)
    state = SimpleNamespace(x0=x0, v0=v0, x_end=x, v_end=v, x=x0.clone(), v=v0.clone())
    side = torch.cuda.Stream()  # warm up on a side stream before capturing, as torch.cuda.graphs asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        simulate(state.x, state.v, 3)
    torch.cuda.current_stream().wait_stream(side)
    state.graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(state.graph):
        simulate(state.x, state.v, GRAPH_STEPS)
    state.graph.replay()  # the first replay uploads the graph: not in any test's window
    return state


@pytest.fixture
def fresh_springs(springs):
    """The springs at their start (the graph's own tensors, so that it replays from there)."""
    springs.x.copy_(springs.x0)
    springs.v.copy_(springs.v0)
    torch.cuda.synchronize()
    return springs


def test_steps_launched_one_by_one(fresh_springs):
    """Problem (launch-bound): 3,000 launches of ~3 µs kernels."""
    simulate(fresh_springs.x, fresh_springs.v)
    torch.testing.assert_close(fresh_springs.x, fresh_springs.x_end, rtol=0, atol=0)


def test_steps_replayed_as_cuda_graph(fresh_springs):
    """Fix: the same 3,000 kernels, captured once as a graph of 100, replayed 30 times."""
    for _ in range(STEPS // GRAPH_STEPS):
        fresh_springs.graph.replay()
    torch.testing.assert_close(fresh_springs.x, fresh_springs.x_end, rtol=0, atol=0)


# -- 4. A value read every step, then once at the end ---------------------------------------------
# 600 steps of a ~50 µs matmul, each followed by reading one value (a loss, a metric) with
# .item(): the host waits for the GPU every step, and the GPU then waits for the host's next
# launch. Kept on the GPU and read once at the end, the launches run ahead of the GPU.

SYNC_STEPS = 600


@pytest.fixture(scope="module")
def steps():
    """The step's operands, its output buffer, a buffer for the readings and the value each step reads."""
    torch.manual_seed(0)
    a = torch.randn(4096, 2048, device=DEVICE, dtype=BF16)
    b = torch.randn(2048, 2048, device=DEVICE, dtype=BF16)
    out = torch.empty(4096, 2048, device=DEVICE, dtype=BF16)
    torch.mm(a, b, out=out)
    readings = torch.empty(SYNC_STEPS, device=DEVICE)
    readings[0] = out[0, 0]  # the fix's copy kernel, loaded here
    return SimpleNamespace(a=a, b=b, out=out, expected=out[0, 0].item(), readings=readings)


@pytest.fixture
def fresh_steps(steps):
    """The steps with the output and the readings emptied (NaN)."""
    steps.out.fill_(float("nan"))
    steps.readings.fill_(float("nan"))
    torch.cuda.synchronize()
    return steps


def test_loss_read_every_step(fresh_steps):
    """Problem (host-sync): .item() in the loop."""
    steps = fresh_steps
    readings = []
    for _ in range(SYNC_STEPS):
        torch.mm(steps.a, steps.b, out=steps.out)
        readings.append(steps.out[0, 0].item())
    assert readings == [steps.expected] * SYNC_STEPS


def test_loss_read_once_at_end(fresh_steps):
    """Fix: the readings stay on the GPU; one .tolist() at the end."""
    steps = fresh_steps
    for i in range(SYNC_STEPS):
        torch.mm(steps.a, steps.b, out=steps.out)
        steps.readings[i] = steps.out[0, 0]
    assert steps.readings.tolist() == [steps.expected] * SYNC_STEPS


# -- A healthy test: one large bf16 matmul ----------------------------------------------------------

@pytest.fixture(scope="module")
def bf16_pair():
    """Two 8192 x 8192 bf16 matrices and their product in fp32 (TF32 off)."""
    torch.manual_seed(0)
    a = torch.randn(8192, 8192, device=DEVICE, dtype=BF16)
    b = torch.randn(8192, 8192, device=DEVICE, dtype=BF16)
    a @ b  # the kernel loaded, and cuBLAS's choice made, outside the test
    return SimpleNamespace(a=a, b=b, reference=a.float() @ b.float())


def test_matmul_bf16(bf16_pair):
    """Healthy: the GPU busy with bf16 tensor-core work from the start of the call to its end."""
    out = bf16_pair.a @ bf16_pair.b
    if SLOW:  # the deliberate regression: five redundant full-precision matmuls
        for _ in range(5):
            bf16_pair.a.float() @ bf16_pair.b.float()
    assert out.dtype == BF16
    assert rel_err(out, bf16_pair.reference) < 2e-2


# -- The plugin's fixtures ---------------------------------------------------------------------------

def test_gpu_trace_block(gpu_trace, bf16_pair):
    """gpu_trace profiles a block of the test (the plugin's own measurement steps aside for it)."""
    a = bf16_pair.a[:4096, :4096]
    with gpu_trace() as t:
        for _ in range(10):
            a @ a
    assert t.summary is not None and t.summary.kernel_count >= 10
    assert t.summary.top_kernels[0].category == "gemm"


def test_kernel_bench_matmul(kernel_bench, bf16_pair):
    """kernel_bench times a callable with CUDA events (warm-up, L2 flushed between repetitions)."""
    a, b = bf16_pair.a[:4096, :4096], bf16_pair.b[:4096, :4096]
    result = kernel_bench(torch.mm, a, b, flops=2 * 4096**3)
    assert result.timer == "cuda_event"
    assert result.median > 0 and result.tflops is not None and result.tflops > 0


@pytest.fixture(scope="module")
def square_matrices():
    """Square bf16 matrices by size, each multiplied once (its kernel loaded, cuBLAS's choice made)."""
    torch.manual_seed(0)
    matrices = {n: torch.randn(n, n, device=DEVICE, dtype=BF16) for n in (1024, 2048, 4096, 8192)}
    for a in matrices.values():
        a @ a
    return matrices


def test_metric_table_matmul_sizes(metric_table, square_matrices):
    """metric_table collects rows (here: a bf16 matmul's time and rate by size) into a CSV of the run."""
    table = metric_table("matmul_sizes", ["n", "ms", "tflops"])
    reps = 10
    for n, a in square_matrices.items():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            a @ a
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / reps
        assert ms > 0
        table.add_row({"n": n, "ms": round(ms, 4), "tflops": round(2 * n**3 / ms / 1e9, 1)})
