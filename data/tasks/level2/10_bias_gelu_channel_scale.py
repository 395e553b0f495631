import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-channel bias add, exact (erf) GELU, then per-channel multiply over an NCHW tensor, in fp16."""

    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(channels, 1, 1, dtype=torch.float16))
        self.scale = nn.Parameter(0.5 + torch.rand(channels, 1, 1, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias) * self.scale


batch_size = 32
channels = 512
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [channels]


SMALL_SIZES = {"batch_size": 2, "channels": 12, "height": 5, "width": 7}
