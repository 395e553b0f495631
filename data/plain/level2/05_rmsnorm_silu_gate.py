"""Plain gated RMSNorm in bf16 (starting point for the launch-parameter search): one program per row and two
passes in chunks of BLOCK columns (sum of squares; then x * inv_rms * weight * silu(gate)), fp32 math.
Slow on purpose: reads x twice, 64-column chunks, one warp. Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_silu_gate_kernel(x_ptr, g_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_g, stride_y, eps,
                             BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    g_row = g_ptr + row * stride_g
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * inv_rms * w * (g / (1.0 + tl.exp(-g)))
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim, dtype=torch.bfloat16))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        g2d = gate.reshape(-1, gate.shape[-1]).contiguous()
        n_rows, n_cols = x2d.shape
        y = torch.empty_like(x2d)
        BLOCK = 64
        rmsnorm_silu_gate_kernel[(n_rows,)](x2d, g2d, self.weight, y, n_cols, x2d.stride(0), g2d.stride(0),
                                            y.stride(0), float(self.eps), BLOCK=BLOCK, num_warps=1)
        return y.view(x.shape)
