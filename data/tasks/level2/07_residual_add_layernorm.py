import torch
import torch.nn as nn


class Model(nn.Module):
    """Residual add followed by LayerNorm over the last dimension (post-norm transformer style), in fp16."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, dtype=torch.float16)
        with torch.no_grad():  # non-trivial affine parameters so that they matter
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


batch_size = 8
seq_len = 2048
dim = 4096


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, dim, dtype=torch.float16),
        torch.randn(batch_size, seq_len, dim, dtype=torch.float16),
    ]


def get_init_inputs():
    return [dim]


SMALL_SIZES = {"batch_size": 3, "seq_len": 5, "dim": 100}
