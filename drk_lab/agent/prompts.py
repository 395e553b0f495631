"""The words a model is given: the first prompt (the task's source, the ModelNew contract, a short
Triton example) and the requests that close each feedback message."""

from __future__ import annotations

import re

from drk_lab.harness.task import Task

TRITON_EXAMPLE = '''\
# Problem: Model.forward(x, y) returns x * y + 1.0 for two tensors of the same shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mul_add_one_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep)
    y = tl.load(y_ptr + offs, mask=keep)
    tl.store(out_ptr + offs, x * y + 1.0, mask=keep)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        mul_add_one_kernel[grid](x, y, out, n, BLOCK=1024)
        return out
'''

PROMPT_TEMPLATE = """\
Your job: make a PyTorch module faster by writing it with Triton GPU kernels.

Here is the reference module `Model` with the functions that build its inputs:

```python
{source}
```

Write a Python module that defines `class ModelNew(nn.Module)`:
- It takes the same constructor arguments as `Model` (those from `get_init_inputs()`) and its
  `forward` takes the same inputs (those from `get_inputs()`).
- It returns the same outputs: same shapes, dtypes and device, with values within a small tolerance.
- The computation is done by your own `@triton.jit` kernels, launched from `forward`. Computing the
  answer with PyTorch operators, calling `Model`, or caching results between calls is rejected.
- If `Model` has parameters, create the same ones in the same order (for example the same
  `nn.Linear`), because both modules are built after the same random seed and must hold equal weights.
- The module must be self-contained: import torch, triton and triton.language yourself.

Your code is first checked for correctness on fresh random inputs, then timed against the PyTorch
reference; faster correct code earns more.

An example of the expected format, for a different problem:

```python
{example}```

Think briefly about how to split the work across Triton programs, then give the complete module in
a single ```python block. Only the last ```python block of your reply is evaluated.
"""

REQUEST_FIX = ("Write an improved `ModelNew` that fixes the problem above. Give the complete module in a "
               "single ```python block.")
REQUEST_FASTER = ("Write an improved `ModelNew` that is faster while staying correct. Give the complete "
                  "module in a single ```python block.")


def initial_prompt(task: Task) -> str:
    return initial_prompt_for_source(task.source)


def initial_prompt_for_source(source: str) -> str:
    """The first prompt for a task's reference source (without building the Task)."""
    # SMALL_SIZES is the harness's CPU setting, not part of the problem
    source = re.sub(r"^SMALL_SIZES\s*=\s*\{[^\n]*\}[ \t]*\n?", "", source, flags=re.M).strip()
    return PROMPT_TEMPLATE.format(source=source, example=TRITON_EXAMPLE)
