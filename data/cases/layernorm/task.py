import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalisation over the last dimension of a bf16 activation, with a learned affine (nn.LayerNorm)."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        # Random affine parameters, so that a solution must really apply weight and bias.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.1)
            self.ln.bias.normal_(0.0, 0.1)
        self.ln.to(torch.bfloat16)  # parameters, input and output are all bf16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 8192
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16) * 2.0 + 0.5]


def get_init_inputs():
    return [dim]


SMALL_SIZES = {"batch_size": 7, "dim": 96}
