"""Elementwise chain in one pass: grid axis 0 walks the (image, channel) planes, axis 1 the blocks of
one plane, so each program loads its channel's bias and scale once and streams a contiguous span."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _erf(x):
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): one exp and five FMAs, cheaper than libdevice's erf
    a = tl.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * tl.exp(-a * a)
    return tl.where(x < 0, -y, y)


@triton.jit
def bias_gelu_scale_kernel(x_ptr, bias_ptr, scale_ptr, out_ptr, channels, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    channel = plane % channels
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    base = plane.to(tl.int64) * HW
    bias = tl.load(bias_ptr + channel).to(tl.float32)
    scale = tl.load(scale_ptr + channel).to(tl.float32)
    v = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32) + bias
    y = 0.5 * v * (1.0 + _erf(v * 0.7071067811865476)) * scale
    tl.store(out_ptr + base + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(channels, 1, 1, dtype=torch.float16))
        self.scale = nn.Parameter(0.5 + torch.rand(channels, 1, 1, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.shape
        x = x.contiguous()
        out = torch.empty_like(x)
        HW = H * W
        block = min(4096, triton.next_power_of_2(HW))
        num_warps = max(2, block // 1024)  # 32 elements per thread: 0.090 -> 0.080 ms on the H200 against 8 warps
        bias_gelu_scale_kernel[(N * C, triton.cdiv(HW, block))](
            x, self.bias, self.scale, out, C, HW, BLOCK=block, num_warps=num_warps,
        )
        return out
