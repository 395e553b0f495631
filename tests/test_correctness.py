"""Tolerances: scale-aware for long reductions, still strict for what the tolerance is for."""

import pytest
import torch

from drk_lab.harness.correctness import Mismatch, compare, reference_scale


def test_a_cancelling_sum_keeps_the_rounding_error_of_its_terms():
    torch.manual_seed(0)
    x = 16 * torch.randn(64, 16384)
    x[0, -1] = -x[0, :-1].double().sum().float()  # row 0 sums to about zero; its terms do not
    ref = x.sum(-1)
    other_order = x.cumsum(-1)[:, -1]  # an honest fp32 sum in another order
    scale = reference_scale(ref.double())
    assert scale > 100
    compare(other_order, ref)  # passes: atol is scaled by the reference's RMS
    with pytest.raises(Mismatch, match="first at index \\[0\\]"):
        compare(other_order, ref, atol=1e-4 / scale)  # with a plain 1e-4 the cancelling row fails


def test_scale_does_not_excuse_real_errors():
    torch.manual_seed(0)
    x = torch.randn(64, 16384)
    ref = x.sum(-1)
    with pytest.raises(Mismatch):
        compare(x[:, 1:].sum(-1), ref)  # one term missing
    with pytest.raises(Mismatch):
        compare(x.bfloat16().float().sum(-1), ref)  # inputs rounded to bf16
    small = torch.rand(1000)
    assert reference_scale(small.double()) == 1.0
    with pytest.raises(Mismatch):
        compare(small + 2e-4, small)
