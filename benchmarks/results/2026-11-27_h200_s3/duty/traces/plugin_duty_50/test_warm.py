import torch
def test_a_warm():
    torch.zeros(1, device='cuda').add_(1)
