import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over dimension 1 of a 3-D tensor (batch, reduce_dim, features) -> (batch, features)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


batch_size = 128
reduce_dim = 1024
features = 512


def get_inputs():
    return [torch.randn(batch_size, reduce_dim, features)]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 3, "reduce_dim": 37, "features": 20}
