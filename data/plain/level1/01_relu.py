"""Plain ReLU (starting point for the launch-parameter search): one flat pass in small blocks.
Slow on purpose: 128 elements per program and one warp. Tunable: BLOCK, num_warps."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK = 128
        relu_kernel[(triton.cdiv(n_elements, BLOCK),)](x, out, n_elements, BLOCK=BLOCK, num_warps=1)
        return out
