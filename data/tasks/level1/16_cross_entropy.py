import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean cross-entropy loss of logits (batch, classes) against integer class targets."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


batch_size = 4096
num_classes = 16384


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 3.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []


SMALL_SIZES = {"batch_size": 9, "num_classes": 150}
