# 20 launch-bound tests: 2,000 tiny kernels each.
import pytest
import torch


@pytest.mark.parametrize("i", range(20))
def test_many_kernels(i):
    x = torch.zeros(256, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    assert x[0].item() == 2000
