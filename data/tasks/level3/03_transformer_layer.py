import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Pre-norm GPT transformer layer in fp16: x + attn(LN(x)), then + MLP(LN(x)) with causal attention and GELU."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim, dtype=torch.float16)
        self.qkv = nn.Linear(dim, 3 * dim, dtype=torch.float16)
        self.proj = nn.Linear(dim, dim, dtype=torch.float16)
        self.ln2 = nn.LayerNorm(dim, dtype=torch.float16)
        self.fc1 = nn.Linear(dim, 4 * dim, dtype=torch.float16)
        self.fc2 = nn.Linear(4 * dim, dim, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        head_dim = dim // self.num_heads
        qkv = self.qkv(self.ln1(x)).view(batch, seq, 3, self.num_heads, head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(x.dtype)
        attn = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, dim)
        x = x + self.proj(attn)
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return x


batch_size = 8
seq_len = 1024
dim = 1024
num_heads = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim, dtype=torch.float16)]


def get_init_inputs():
    return [dim, num_heads]


SMALL_SIZES = {"batch_size": 1, "seq_len": 37, "dim": 32, "num_heads": 2}
