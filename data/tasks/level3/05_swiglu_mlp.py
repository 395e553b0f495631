import torch
import torch.nn as nn


class Model(nn.Module):
    """Gated MLP (SwiGLU) in fp16: W_down(silu(x W_gate) * (x W_up)), no biases."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden_dim, bias=False, dtype=torch.float16)
        self.w_up = nn.Linear(dim, hidden_dim, bias=False, dtype=torch.float16)
        self.w_down = nn.Linear(hidden_dim, dim, bias=False, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(torch.nn.functional.silu(self.w_gate(x)) * self.w_up(x))


batch_size = 8
seq_len = 1024
dim = 2048
hidden_dim = 5632


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim, dtype=torch.float16)]


def get_init_inputs():
    return [dim, hidden_dim]


SMALL_SIZES = {"batch_size": 2, "seq_len": 21, "dim": 48, "hidden_dim": 72}
