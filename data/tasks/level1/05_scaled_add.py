import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled add (axpy): alpha * x + y with a scalar alpha fixed at construction."""

    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + y


batch_size = 8192
dim = 8192
alpha = 0.75


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [alpha]


SMALL_SIZES = {"batch_size": 11, "dim": 90}
