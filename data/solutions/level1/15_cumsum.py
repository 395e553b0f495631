"""Cumsum: one program per row, scanning the row in chunks (tl.cumsum) with a running carry."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    carry = tl.zeros([1], dtype=tl.float32)  # sum of all earlier chunks of this row
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_ptr + row * stride_x + start + offs, mask=mask, other=0.0).to(tl.float32)
        prefix = tl.cumsum(x, axis=0) + carry
        tl.store(y_ptr + row * stride_y + start + offs, prefix.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2d = x.contiguous().view(-1, n_cols)
        y = torch.empty_like(x2d)
        block = min(triton.next_power_of_2(n_cols), 8192)
        num_warps = min(16, max(4, block // 1024))
        cumsum_kernel[(x2d.shape[0],)](x2d, y, n_cols, x2d.stride(0), y.stride(0),
                                       BLOCK=block, num_warps=num_warps)
        return y.view(x.shape)
