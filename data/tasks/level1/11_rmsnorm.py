import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalisation over the last dimension: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        # Random weight around 1, so that a solution must really apply it.
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 8192
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, 1e-6]


SMALL_SIZES = {"batch_size": 5, "dim": 300}
