# 20 GPU-bound tests: ten 4096^3 bf16 matmuls each.
import pytest
import torch


@pytest.mark.parametrize("i", range(20))
def test_matmul(i):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        c = a @ a
    torch.cuda.synchronize()
    assert c.shape == (4096, 4096)
