"""Row L2 normalisation: one program per row; the whole row stays in registers when it fits."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_BLOCK = 16384  # longest row kept in registers; longer rows are streamed in chunks
EPS = 1e-12


@triton.jit
def l2_normalize_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                        BLOCK: tl.constexpr, ROW_FITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK)
    if ROW_FITS:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        inv_norm = 1.0 / tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), eps)
        tl.store(y_row + offs, (x * inv_norm).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        inv_norm = 1.0 / tl.maximum(tl.sqrt(tl.sum(acc, axis=0)), eps)
        for start in range(0, n_cols, BLOCK):
            mask = start + offs < n_cols
            x = tl.load(x_row + start + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + offs, (x * inv_norm).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.contiguous()
        n_cols = x2d.shape[1]
        y = torch.empty_like(x2d)
        block = triton.next_power_of_2(n_cols)
        row_fits = block <= MAX_FUSED_BLOCK
        block = min(block, MAX_FUSED_BLOCK if row_fits else 4096)
        num_warps = min(16, max(4, block // 1024))
        l2_normalize_kernel[(x2d.shape[0],)](
            x2d, y, n_cols, x2d.stride(0), y.stride(0), EPS,
            BLOCK=block, ROW_FITS=row_fits, num_warps=num_warps)
        return y
