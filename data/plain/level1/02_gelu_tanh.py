"""Plain GELU, tanh approximation (starting point for the launch-parameter search): one flat pass, fp32 math.
Slow on purpose: 128 elements per program and one warp. Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_tanh_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    tanh_u = 2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0
    y = 0.5 * x * (1.0 + tanh_u)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK = 128
        gelu_tanh_kernel[(triton.cdiv(n_elements, BLOCK),)](x, out, n_elements, BLOCK=BLOCK, num_warps=1)
        return out
