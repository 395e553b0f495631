import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gated RMSNorm: rmsnorm(x) * weight * silu(gate), computed in fp32 and returned in bf16."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim, dtype=torch.bfloat16))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float() * F.silu(gate.float())).to(x.dtype)


batch_size = 8
seq_len = 2048
dim = 4096


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, dim, dtype=torch.bfloat16),
        torch.randn(batch_size, seq_len, dim, dtype=torch.bfloat16),
    ]


def get_init_inputs():
    return [dim]


SMALL_SIZES = {"batch_size": 3, "seq_len": 7, "dim": 72}
