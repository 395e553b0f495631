"""One program per row: x + residual, LayerNorm statistics and affine all in fp32, one store.
The summed row stays in registers when it fits (each input read once); longer rows take a looped two-pass path."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_SINGLE_PASS_BLOCK = 16384  # widest row held in registers at once


@triton.jit
def add_layernorm_kernel(
    x_ptr, res_ptr, weight_ptr, bias_ptr, out_ptr, n_cols, stride_x_row, stride_res_row, stride_out_row, eps,
    BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    res_row = res_ptr + row * stride_res_row
    out_row = out_ptr + row * stride_out_row
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) + tl.load(res_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(h, axis=0) / n_cols
        centered = tl.where(mask, h - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
        weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + cols, (centered * rstd * weight + bias).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        partial_sum = tl.zeros([BLOCK], dtype=tl.float32)
        partial_sq = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) + tl.load(res_row + cols, mask=mask, other=0.0).to(tl.float32)
            partial_sum += h
            partial_sq += h * h
        mean = tl.sum(partial_sum, axis=0) / n_cols
        var = tl.maximum(tl.sum(partial_sq, axis=0) / n_cols - mean * mean, 0.0)
        rstd = tl.rsqrt(var + eps)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) + tl.load(res_row + cols, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_row + cols, ((h - mean) * rstd * weight + bias).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, dtype=torch.float16)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2d = x.reshape(-1, n_cols)
        res2d = residual.reshape(-1, n_cols)
        if x2d.stride(-1) != 1:
            x2d = x2d.contiguous()
        if res2d.stride(-1) != 1:
            res2d = res2d.contiguous()
        out = torch.empty((x2d.shape[0], n_cols), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(n_cols)
        single_pass = block <= MAX_SINGLE_PASS_BLOCK
        if not single_pass:
            block = MAX_SINGLE_PASS_BLOCK // 4
        num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        add_layernorm_kernel[(x2d.shape[0],)](
            x2d, res2d, self.norm.weight, self.norm.bias, out, n_cols,
            x2d.stride(0), res2d.stride(0), out.stride(0), self.norm.eps,
            BLOCK=block, SINGLE_PASS=single_pass, num_warps=num_warps,
        )
        return out.view(x.shape)
