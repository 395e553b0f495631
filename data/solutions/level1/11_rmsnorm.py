"""RMSNorm: one program per row; the whole row stays in registers when it fits (one read, one write)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_BLOCK = 16384  # longest row kept in registers; longer rows are streamed in chunks


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                   BLOCK: tl.constexpr, ROW_FITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK)
    if ROW_FITS:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            mask = start + offs < n_cols
            x = tl.load(x_row + start + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2d = x.contiguous().view(-1, n_cols)
        y = torch.empty_like(x2d)
        block = triton.next_power_of_2(n_cols)
        row_fits = block <= MAX_FUSED_BLOCK
        block = min(block, MAX_FUSED_BLOCK if row_fits else 4096)
        num_warps = min(16, max(4, block // 1024))
        rmsnorm_kernel[(x2d.shape[0],)](
            x2d, self.weight, y, n_cols, x2d.stride(0), y.stride(0), self.eps,
            BLOCK=block, ROW_FITS=row_fits, num_warps=num_warps)
        return y.view(x.shape)
