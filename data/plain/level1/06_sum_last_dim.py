"""Plain row sum, keepdim (starting point for the launch-parameter search): one program per row, walking
the row in chunks of BLOCK columns with an fp32 accumulator. Slow on purpose: 64-column chunks, one warp.
Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        acc += tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, 1), dtype=x.dtype, device=x.device)
        BLOCK = 64
        row_sum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK, num_warps=1)
        return out
