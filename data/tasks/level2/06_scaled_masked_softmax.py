import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention-probability style softmax: softmax(scores * scale + mask) over the key dimension,
    with an additive padding mask of shape (batch, 1, 1, seq_len) broadcast over heads and queries."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores * self.scale + mask, dim=-1)


batch_size = 4
num_heads = 16
seq_len = 1024
head_dim = 64


def get_inputs():
    scores = torch.randn(batch_size, num_heads, seq_len, seq_len) * head_dim ** 0.5
    mask = (torch.rand(batch_size, 1, 1, seq_len) < 0.2).float() * -10000.0
    return [scores, mask]


def get_init_inputs():
    return [head_dim ** -0.5]


SMALL_SIZES = {"batch_size": 2, "num_heads": 3, "seq_len": 13}
