import torch
import torch.nn as nn


class Model(nn.Module):
    """Half-precision matrix product C = A @ B with A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


M = 8192
K = 8192
N = 8192


def get_inputs():
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    return [a, b]


def get_init_inputs():
    return []


SMALL_SIZES = {"M": 80, "K": 72, "N": 50}
