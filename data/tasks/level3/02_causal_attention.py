import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal attention softmax(q k^T / sqrt(head_dim) + causal mask) v on fp16 [batch, heads, seq, head_dim]."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return torch.matmul(probs, v)


batch_size = 8
num_heads = 16
seq_len = 2048
head_dim = 64


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=torch.float16) for _ in range(3)]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 1, "num_heads": 2, "seq_len": 45, "head_dim": 16}
