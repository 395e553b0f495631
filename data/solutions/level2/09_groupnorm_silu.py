"""One program per (image, group): a group is one contiguous span of NCHW memory. Statistics in fp32,
then per-channel affine and SiLU before one store. The group stays in registers as a (channel, pixel)
tile when it fits (one read, one write); larger groups take a looped two-pass path, channel by channel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_SINGLE_PASS_BLOCK = 16384  # largest group held in registers at once


@triton.jit
def groupnorm_silu_kernel(
    x_ptr, weight_ptr, bias_ptr, out_ptr, HW, channels_per_group, num_groups, eps,
    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    # the group as a (channel, pixel) tile in registers: each channel's weight is loaded once, no
    # division per element
    pid = tl.program_id(0)
    group = pid % num_groups
    group_size = channels_per_group * HW
    base = pid.to(tl.int64) * group_size  # (image, group) spans are laid out back to back
    first_channel = group * channels_per_group
    c = tl.arange(0, BLOCK_C)
    hw = tl.arange(0, BLOCK_HW)
    mask = (c[:, None] < channels_per_group) & (hw[None, :] < HW)
    offs = c[:, None] * HW + hw[None, :]
    x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(tl.sum(x, axis=1), axis=0) / group_size
    centered = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(tl.sum(centered * centered, axis=1), axis=0) / group_size + eps)
    c_ok = c < channels_per_group
    weight = tl.load(weight_ptr + first_channel + c, mask=c_ok, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + first_channel + c, mask=c_ok, other=0.0).to(tl.float32)
    y = centered * (rstd * weight)[:, None] + bias[:, None]
    # the result before the store's address: the other way round (Python evaluates the address
    # first) the kernel took 0.095 ms on the H200 instead of 0.072, with the same registers
    result = y * tl.sigmoid(y)
    tl.store(out_ptr + base + offs, result.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def groupnorm_silu_looped_kernel(
    x_ptr, weight_ptr, bias_ptr, out_ptr, HW, channels_per_group, num_groups, eps, BLOCK_HW: tl.constexpr,
):
    # groups too large for registers: statistics in one pass, then channel by channel
    pid = tl.program_id(0)
    group = pid % num_groups
    group_size = channels_per_group * HW
    base = pid.to(tl.int64) * group_size
    first_channel = group * channels_per_group
    partial_sum = tl.zeros([BLOCK_HW], dtype=tl.float32)
    partial_sq = tl.zeros([BLOCK_HW], dtype=tl.float32)
    for start in range(0, group_size, BLOCK_HW):
        offs = start + tl.arange(0, BLOCK_HW)
        x = tl.load(x_ptr + base + offs, mask=offs < group_size, other=0.0).to(tl.float32)
        partial_sum += x
        partial_sq += x * x
    mean = tl.sum(partial_sum, axis=0) / group_size
    var = tl.maximum(tl.sum(partial_sq, axis=0) / group_size - mean * mean, 0.0)
    rstd = tl.rsqrt(var + eps)
    for ch in range(0, channels_per_group):
        scale = rstd * tl.load(weight_ptr + first_channel + ch).to(tl.float32)
        shift = tl.load(bias_ptr + first_channel + ch).to(tl.float32) - mean * scale
        for start in range(0, HW, BLOCK_HW):
            offs = start + tl.arange(0, BLOCK_HW)
            mask = offs < HW
            x = tl.load(x_ptr + base + ch * HW + offs, mask=mask, other=0.0).to(tl.float32)
            y = x * scale + shift
            tl.store(out_ptr + base + ch * HW + offs, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=mask)


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
        block_c, block_hw = triton.next_power_of_2(C // G), triton.next_power_of_2(H * W)
        args = (x, self.norm.weight, self.norm.bias, out, H * W, C // G, G, self.norm.eps)
        tile = block_c * block_hw
        if tile <= MAX_SINGLE_PASS_BLOCK:
            num_warps = 4 if tile <= 2048 else (8 if tile <= 8192 else 16)
            groupnorm_silu_kernel[(N * G,)](*args, BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=num_warps)
        else:
            groupnorm_silu_looped_kernel[(N * G,)](*args, BLOCK_HW=min(block_hw, 4096), num_warps=8)
        return out
