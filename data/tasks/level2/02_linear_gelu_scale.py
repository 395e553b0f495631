import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Bias-free fully connected layer, exact (erf) GELU, then multiplication by a constant, in fp16."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False, dtype=torch.float16)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) * self.scale


batch_size = 8192
in_features = 8192
out_features = 4096
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.float16)]


def get_init_inputs():
    return [in_features, out_features, scale]


SMALL_SIZES = {"batch_size": 50, "in_features": 72, "out_features": 33}
