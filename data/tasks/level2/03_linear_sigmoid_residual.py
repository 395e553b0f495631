import torch
import torch.nn as nn


class Model(nn.Module):
    """Fully connected layer with bias, sigmoid, then a residual add of a second input, in fp16."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x)) + residual


batch_size = 8192
in_features = 4096
out_features = 4096


def get_inputs():
    return [
        torch.randn(batch_size, in_features, dtype=torch.float16),
        torch.randn(batch_size, out_features, dtype=torch.float16),
    ]


def get_init_inputs():
    return [in_features, out_features]


SMALL_SIZES = {"batch_size": 40, "in_features": 100, "out_features": 24}
