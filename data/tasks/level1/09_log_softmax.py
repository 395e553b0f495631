import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the last dimension of a 2-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 8, "dim": 150}
