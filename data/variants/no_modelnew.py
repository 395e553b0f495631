# task: level1/01_relu
# expect: no_modelnew
# what: the class has the wrong name
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr):
    pass


class Model(nn.Module):
    def forward(self, x):
        return x
