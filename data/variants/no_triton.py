# task: level1/01_relu
# expect: no_triton_kernel
# what: plain PyTorch, no Triton kernel at all
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
