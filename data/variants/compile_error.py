# task: level1/01_relu
# expect: compile
# device: cuda
# what: tl.arange needs compile-time bounds; n is a runtime argument
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_kernel(x_ptr, out_ptr, n):
    offsets = tl.arange(0, n)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        bad_kernel[(1,)](x, out, x.numel())
        return out
