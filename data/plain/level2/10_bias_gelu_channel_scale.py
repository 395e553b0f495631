"""Plain per-channel bias + exact GELU + per-channel scale over NCHW fp16 (starting point for the
launch-parameter search): one flat pass, the channel of each element recomputed from its index, fp32 math.
Slow on purpose: 128 elements per program, one warp, per-element bias and scale gathers.
Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_scale_kernel(x_ptr, bias_ptr, scale_ptr, out_ptr, n_elements, channels, HW, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    channel = (offs // HW) % channels
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + channel, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + channel, mask=mask, other=0.0).to(tl.float32)
    v = x + bias
    y = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476)) * scale
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(channels, 1, 1, dtype=torch.float16))
        self.scale = nn.Parameter(0.5 + torch.rand(channels, 1, 1, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK = 128
        bias_gelu_scale_kernel[(triton.cdiv(n_elements, BLOCK),)](
            x, self.bias, self.scale, out, n_elements, c, h * w, BLOCK=BLOCK, num_warps=1
        )
        return out
