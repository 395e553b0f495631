# task: level1/01_relu
# expect: syntax
# what: a missing colon
import torch


class ModelNew(torch.nn.Module)
    def forward(self, x):
        return x
