import torch
import torch.nn as nn


class Model(nn.Module):
    """Fully connected layer (x @ W^T + b) followed by ReLU, in fp16."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 8192
in_features = 4096
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.float16)]


def get_init_inputs():
    return [in_features, out_features]


SMALL_SIZES = {"batch_size": 37, "in_features": 48, "out_features": 80}
