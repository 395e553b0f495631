"""Row sum (keepdim): one program per row, looping over the row in chunks of up to 4096 columns."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        acc += tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, 1), dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(n_cols), 4096)
        num_warps = 8 if block >= 2048 else 4
        row_sum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=block, num_warps=num_warps)
        return out
