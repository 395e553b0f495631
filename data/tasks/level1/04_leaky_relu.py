import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise leaky ReLU: x if x > 0 else negative_slope * x."""

    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 8192
dim = 8192
negative_slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]


SMALL_SIZES = {"batch_size": 5, "dim": 131}
