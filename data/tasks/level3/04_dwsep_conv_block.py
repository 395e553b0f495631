import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise-separable conv block in fp16 (NCHW): depthwise 3x3 conv (pad 1) -> pointwise 1x1 conv -> ReLU."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.depthwise = nn.Conv2d(
            in_channels, in_channels, kernel_size=3, padding=1, groups=in_channels, dtype=torch.float16
        )
        self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.pointwise(self.depthwise(x)))


batch_size = 64
in_channels = 256
out_channels = 512
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [in_channels, out_channels]


SMALL_SIZES = {"batch_size": 1, "in_channels": 40, "out_channels": 24, "height": 11, "width": 9}
