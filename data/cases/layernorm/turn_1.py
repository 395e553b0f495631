# Turn 1: a first fused LayerNorm: one program per row, the whole row in registers, mean then variance, fixed block and warps.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(X, W, B, Y, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    # pass 1 over the row: the mean
    mean = tl.sum(x, axis=0) / N
    # pass 2 over the row: the variance of the centred values
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        self.ln.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[-1]
        x2d = x.contiguous().view(-1, N)
        y = torch.empty_like(x2d)
        BLOCK_SIZE = triton.next_power_of_2(N)
        layernorm_fwd_kernel[(x2d.shape[0],)](
            x2d, self.ln.weight, self.ln.bias, y, x2d.stride(0), N, self.ln.eps,
            BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return y.view(x.shape)
