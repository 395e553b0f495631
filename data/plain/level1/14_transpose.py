"""Plain transpose (starting point for the launch-parameter search): one program per BLOCK_R x BLOCK_C tile,
read row-major and written transposed into a new contiguous tensor.
Slow on purpose: 16x16 tiles, one warp. Tunable: BLOCK_R, BLOCK_C, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x, stride_out,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tile = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask)
    tl.store(out_ptr + cols[None, :].to(tl.int64) * stride_out + rows[:, None], tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty((n_cols, n_rows), dtype=x.dtype, device=x.device)
        BLOCK_R = 16
        BLOCK_C = 16
        grid = (triton.cdiv(n_rows, BLOCK_R), triton.cdiv(n_cols, BLOCK_C))
        transpose_kernel[grid](x, out, n_rows, n_cols, x.stride(0), out.stride(0),
                               BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, num_warps=1)
        return out
