import torch
import torch.nn as nn


class Model(nn.Module):
    """Transformer MLP in fp16: Linear(dim, 4*dim) -> GELU (exact) -> Linear(4*dim, dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim, dtype=torch.float16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


batch_size = 8
seq_len = 1024
dim = 2048


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim, dtype=torch.float16)]


def get_init_inputs():
    return [dim]


SMALL_SIZES = {"batch_size": 2, "seq_len": 19, "dim": 40}
