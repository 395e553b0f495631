# task: level1/01_relu
# expect: oom
# device: cuda
# what: asks the GPU for 4 TiB
# hack_checks: off  (a crash test: the static checks would stop it before it runs)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty(1 << 42, dtype=torch.uint8, device=x.device)
