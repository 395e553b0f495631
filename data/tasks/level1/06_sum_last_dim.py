import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the last dimension of a 2-D tensor, keeping that dimension (size 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1, keepdim=True)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 13, "dim": 100}
