"""One program per (image, group): a group is one contiguous span of NCHW memory. Statistics in fp32,
then per-channel affine and SiLU before one store. The group stays in registers when it fits
(one read, one write); larger groups take a looped two-pass path."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_SINGLE_PASS_BLOCK = 16384  # largest group held in registers at once


@triton.jit
def groupnorm_silu_kernel(
    x_ptr, weight_ptr, bias_ptr, out_ptr, group_size, HW, channels_per_group, num_groups, eps,
    BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    pid = tl.program_id(0)
    group = pid % num_groups
    base = pid.to(tl.int64) * group_size  # (image, group) spans are laid out back to back
    first_channel = group * channels_per_group
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        mask = offs < group_size
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / group_size
        centered = tl.where(mask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(centered * centered, axis=0) / group_size + eps)
        channel = first_channel + offs // HW
        weight = tl.load(weight_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        y = centered * rstd * weight + bias
        tl.store(out_ptr + base + offs, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        partial_sum = tl.zeros([BLOCK], dtype=tl.float32)
        partial_sq = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, group_size, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + base + offs, mask=offs < group_size, other=0.0).to(tl.float32)
            partial_sum += x
            partial_sq += x * x
        mean = tl.sum(partial_sum, axis=0) / group_size
        var = tl.maximum(tl.sum(partial_sq, axis=0) / group_size - mean * mean, 0.0)
        rstd = tl.rsqrt(var + eps)
        for start in range(0, group_size, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < group_size
            x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
            channel = first_channel + offs // HW
            weight = tl.load(weight_ptr + channel, mask=mask, other=0.0).to(tl.float32)
            bias = tl.load(bias_ptr + channel, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * weight + bias
            tl.store(out_ptr + base + offs, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.shape
        G = self.norm.num_groups
        x = x.contiguous()
        out = torch.empty_like(x)
        group_size = (C // G) * H * W
        block = triton.next_power_of_2(group_size)
        single_pass = block <= MAX_SINGLE_PASS_BLOCK
        if not single_pass:
            block = MAX_SINGLE_PASS_BLOCK // 4
        num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        groupnorm_silu_kernel[(N * G,)](
            x, self.norm.weight, self.norm.bias, out, group_size, H * W, C // G, G, self.norm.eps,
            BLOCK=block, SINGLE_PASS=single_pass, num_warps=num_warps,
        )
        return out
