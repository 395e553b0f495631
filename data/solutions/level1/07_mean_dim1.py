"""Mean over dim 1 of (B, R, C): each program owns one batch and a strip of columns and
walks down the R rows with coalesced [BLOCK_R, BLOCK_C] tiles, accumulating in fp32."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim1_kernel(x_ptr, out_ptr, n_reduce, n_cols, n_col_blocks,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    batch = pid // n_col_blocks
    col_block = pid % n_col_blocks
    cols = col_block * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < n_cols
    rows = tl.arange(0, BLOCK_R)
    x_batch = x_ptr + batch.to(tl.int64) * n_reduce * n_cols
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for start in range(0, n_reduce, BLOCK_R):
        row_idx = start + rows
        mask = (row_idx < n_reduce)[:, None] & col_mask[None, :]
        ptrs = x_batch + row_idx[:, None].to(tl.int64) * n_cols + cols[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_reduce
    tl.store(out_ptr + batch.to(tl.int64) * n_cols + cols, mean, mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_batch, n_reduce, n_cols = x.shape
        out = torch.empty((n_batch, n_cols), dtype=x.dtype, device=x.device)
        # Wide column strips for coalescing, narrowed until there are enough programs to fill the GPU.
        block_c = min(triton.next_power_of_2(n_cols), 256)
        while block_c > 32 and n_batch * triton.cdiv(n_cols, block_c) < 1024:
            block_c //= 2
        block_r = max(1, min(triton.next_power_of_2(n_reduce), 4096 // block_c))
        n_col_blocks = triton.cdiv(n_cols, block_c)
        mean_dim1_kernel[(n_batch * n_col_blocks,)](
            x, out, n_reduce, n_cols, n_col_blocks, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=4
        )
        return out
