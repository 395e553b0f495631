# task: level1/01_relu
# expect: segfault
# what: dereferences a null pointer through ctypes
# hack_checks: off  (a crash test: the static checks would stop it before it runs)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


def relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


import ctypes


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return relu(x)
