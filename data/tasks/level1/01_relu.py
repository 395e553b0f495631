import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise ReLU: max(x, 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 8192
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 7, "dim": 100}
