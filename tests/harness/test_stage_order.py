"""The candidate's forward runs before the reference's in every correctness trial (real worker, Triton interpreter).

Why it matters: the candidate must not find the reference's output (or anything the reference
leaves behind) in memory before it runs. The crafted reference below sees how often the
candidate has run (the worker loads it as module "candidate") and returns x + 1 only when the
candidate has run exactly as often as the reference itself, i.e. when the candidate ran first.
"""

import drk_lab as drk
from drk_lab.harness.task import task_from_source

ORDER_TASK = '''
import sys

import torch
import torch.nn as nn


class Model(nn.Module):
    calls = 0

    def forward(self, x):
        Model.calls += 1
        candidate_calls = getattr(sys.modules.get("candidate"), "CALLS", None)
        return x + 1.0 if candidate_calls == Model.calls else x


def get_inputs():
    return [torch.randn(3, 5)]


def get_init_inputs():
    return []
'''

COUNTING_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

CALLS = 0  # forwards so far, read by the reference


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        global CALLS
        CALLS += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        add_one_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
        return out
'''


def test_candidate_runs_before_the_reference_in_every_trial():
    task = task_from_source(ORDER_TASK, "stage_order")
    # hack checks off: their extra calls of both models would break the count the reference keeps
    result = drk.evaluate(task, COUNTING_CANDIDATE, device="cpu", hack_checks=False, correctness_trials=4)
    assert result.ok, result.error
    assert result.trials == 4


def test_the_order_check_can_fail():
    # the same candidate without its counter: the reference returns x, the candidate x + 1
    task = task_from_source(ORDER_TASK, "stage_order")
    uncounted = COUNTING_CANDIDATE.replace("        CALLS += 1\n", "")
    result = drk.evaluate(task, uncounted, device="cpu", hack_checks=False, correctness_trials=4)
    assert result.error_kind == "mismatch" and "trial 0" in result.error
