"""One program per row: RMS statistic in fp32, then weight and silu(gate) applied before one store.
The row stays in registers when it fits (x and gate read once); longer rows take a looped two-pass path."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_SINGLE_PASS_BLOCK = 16384  # widest row held in registers at once


@triton.jit
def rmsnorm_silu_gate_kernel(
    x_ptr, gate_ptr, weight_ptr, out_ptr, n_cols, stride_x_row, stride_gate_row, stride_out_row, eps,
    BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    gate_row = gate_ptr + row * stride_gate_row
    out_row = out_ptr + row * stride_out_row
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * rstd * weight * (gate * tl.sigmoid(gate))
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        partial_sq = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            partial_sq += x * x
        rstd = tl.rsqrt(tl.sum(partial_sq, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = x * rstd * weight * (gate * tl.sigmoid(gate))
            tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim, dtype=torch.bfloat16))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2d = x.reshape(-1, n_cols)
        gate2d = gate.reshape(-1, n_cols)
        if x2d.stride(-1) != 1:
            x2d = x2d.contiguous()
        if gate2d.stride(-1) != 1:
            gate2d = gate2d.contiguous()
        out = torch.empty((x2d.shape[0], n_cols), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(n_cols)
        single_pass = block <= MAX_SINGLE_PASS_BLOCK
        if not single_pass:
            block = MAX_SINGLE_PASS_BLOCK // 4
        num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        rmsnorm_silu_gate_kernel[(x2d.shape[0],)](
            x2d, gate2d, self.weight, out, n_cols, x2d.stride(0), gate2d.stride(0), out.stride(0), self.eps,
            BLOCK=block, SINGLE_PASS=single_pass, num_warps=num_warps,
        )
        return out.view(x.shape)
