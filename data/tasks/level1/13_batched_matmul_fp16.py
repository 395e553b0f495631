import torch
import torch.nn as nn


class Model(nn.Module):
    """Half-precision batched matrix product: out[i] = a[i] @ b[i] (torch.bmm)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


batch_size = 32
M = 1024
K = 2048
N = 1024


def get_inputs():
    a = torch.randn(batch_size, M, K, dtype=torch.float16)
    b = torch.randn(batch_size, K, N, dtype=torch.float16)
    return [a, b]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 3, "M": 40, "K": 48, "N": 36}
