"""Plain residual add + LayerNorm in fp16 (starting point for the launch-parameter search): one program per
row and three passes in chunks of BLOCK columns (mean, variance, normalised affine write) over x + residual
(added in fp16, as the reference does), fp32 statistics.
Slow on purpose: reads both inputs three times, 64-column chunks, one warp. Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_r, stride_y, eps,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = r_ptr + row * stride_r
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        h = tl.load(x_row + start + cols, mask=mask, other=0.0) + tl.load(r_row + start + cols, mask=mask, other=0.0)
        acc += h.to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        h = tl.load(x_row + start + cols, mask=mask, other=0.0) + tl.load(r_row + start + cols, mask=mask, other=0.0)
        diff = tl.where(mask, h.to(tl.float32) - mean, 0.0)
        acc += diff * diff
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        h = tl.load(x_row + start + cols, mask=mask, other=0.0) + tl.load(r_row + start + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = (h.to(tl.float32) - mean) * rstd * w + b
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, dtype=torch.float16)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        r2d = residual.reshape(-1, residual.shape[-1]).contiguous()
        n_rows, n_cols = x2d.shape
        y = torch.empty_like(x2d)
        BLOCK = 64
        add_layernorm_kernel[(n_rows,)](x2d, r2d, self.norm.weight, self.norm.bias, y, n_cols, x2d.stride(0),
                                        r2d.stride(0), y.stride(0), self.norm.eps, BLOCK=BLOCK, num_warps=1)
        return y.view(x.shape)
