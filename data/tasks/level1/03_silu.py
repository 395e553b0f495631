import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise SiLU (swish): x * sigmoid(x), on bf16 activations."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)


batch_size = 8192
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 6, "dim": 123}
