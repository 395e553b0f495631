# task: level1/01_relu
# expect: cuda_illegal_access
# device: cuda
# what: the kernel stores far outside its output buffer
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets + (1 << 40), x)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        wild_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
