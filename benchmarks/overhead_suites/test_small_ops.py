# 300 small unit tests, a few kernels each: the shape of a typical GPU unit-test suite.
import pytest
import torch


@pytest.mark.parametrize("i", range(300))
def test_small(i):
    x = torch.ones(1024, device="cuda")
    y = (x * i + 1).sum()
    assert y.item() == 1024 * (i + 1)
