import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """1x1 Conv2d with bias (fp16) followed by inference-mode BatchNorm using its running statistics, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, dtype=torch.float16)
        self.bn = nn.BatchNorm2d(out_channels)  # fp32 parameters and running statistics
        with torch.no_grad():  # statistics as if trained, so that every term matters
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        # training=False: always normalise with the running statistics, whatever the module's mode
        y = F.batch_norm(y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(y)


batch_size = 32
in_channels = 512
out_channels = 512
height = 56
width = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [in_channels, out_channels]


SMALL_SIZES = {"batch_size": 2, "in_channels": 24, "out_channels": 40, "height": 5, "width": 7}
