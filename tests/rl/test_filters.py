"""MRS and PRS on crafted log-probs and coverages."""

import math

import pytest
import torch

from drk_lab.rl.filters import (
    mismatch_rejection,
    profiling_keep_probability,
    profiling_rejection,
    profiling_rejection_with_metrics,
)


def crafted_batch():
    """Five trajectories of four tokens; log_ratio = train - rollout per token."""
    log_ratio = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # weight 1: kept (token 3 is masked out and holds -inf)
            [0.002, 0.0, 0.0, 0.0],  # one token at 1.002 but geometric mean e^0.0005: kept
            [0.002, 0.002, 0.002, 0.002],  # weight e^0.002 > 1.001: rejected
            [-0.0015, -0.0015, -0.0015, -0.0015],  # weight e^-0.0015 < 0.999: rejected
            [math.log(1e-5), 0.0, 0.0, 0.0],  # mean restored below; one token under 1e-4: vetoed
        ],
        dtype=torch.float64,
    )
    log_ratio[4, 1:] = -math.log(1e-5) / 3  # geometric mean exactly 1
    rollout = -torch.rand(5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    train = rollout + log_ratio
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[0, 3] = False
    train[0, 3] = -math.inf
    return train, rollout, mask


def test_mrs_band_and_token_veto():
    train, rollout, mask = crafted_batch()
    keep, m = mismatch_rejection(train, rollout, mask)
    assert keep.tolist() == [True, True, False, False, False]
    assert m["mrs/rejected"] == 3 and m["mrs/rejected_frac"] == pytest.approx(0.6)
    assert m["mrs/out_of_band"] == 2
    assert m["mrs/vetoed_trajectories"] == 1 and m["mrs/vetoed_tokens"] == 1
    assert m["mrs/weight_max"] == pytest.approx(math.exp(0.002), abs=1e-12)
    assert m["mrs/weight_min"] == pytest.approx(math.exp(-0.0015), abs=1e-12)
    assert m["mrs/token_ratio_min"] == pytest.approx(1e-5, rel=1e-9)
    # a wider band keeps trajectories 2 and 3, the veto still drops 4
    keep_wide, _ = mismatch_rejection(train, rollout, mask, lower=0.99, upper=1.01)
    assert keep_wide.tolist() == [True, True, True, True, False]
    # a laxer veto lets 4 through (its weight is 1)
    keep_lax, m_lax = mismatch_rejection(train, rollout, mask, token_veto=1e-6)
    assert keep_lax.tolist() == [True, True, False, False, True] and m_lax["mrs/vetoed_tokens"] == 0


def test_mrs_metrics_hand_values_and_low_precision_input():
    # log ratios ln 2 and 0: k3 = (2 - 1 - ln 2 + 0) / 2, mean |log ratio| = ln 2 / 2
    train = torch.tensor([[math.log(2.0) - 1.0, -2.0]])
    rollout = torch.tensor([[-1.0, -2.0]])
    keep, m = mismatch_rejection(train, rollout, torch.ones(1, 2, dtype=torch.bool))
    assert keep.tolist() == [False]  # weight sqrt(2)
    assert m["mrs/weight_mean"] == pytest.approx(math.sqrt(2), rel=1e-6)
    assert m["mrs/k3_kl"] == pytest.approx((1 - math.log(2)) / 2, rel=1e-6)
    assert m["mrs/log_ratio_abs_mean"] == pytest.approx(math.log(2) / 2, rel=1e-6)
    # bf16 log-probs, identical on both sides, and a trajectory with no model tokens: kept
    lp = torch.randn(2, 3).bfloat16()
    mask = torch.tensor([[True, True, False], [False, False, False]])
    keep, m = mismatch_rejection(lp, lp.clone(), mask)
    assert keep.tolist() == [True, True] and m["mrs/weight_mean"] == 1.0 and m["mrs/k3_kl"] == 0.0


def test_prs_keep_probability_ends_are_exact():
    cov = [0.0, 0.2, 0.3, 0.4, 0.9, 1.0]
    assert profiling_keep_probability(cov).tolist() == [0, 0, 0, 1, 1, 1]
    assert profiling_keep_probability([0.35])[0] == pytest.approx(0.5)
    assert profiling_keep_probability([0.29, 0.3], width=0).tolist() == [0, 1]  # hard cut
    n = 2000
    gen = torch.Generator().manual_seed(1)
    keep = profiling_rejection(cov * n, [True] * (6 * n), generator=gen).view(n, 6)
    assert keep.all(dim=0).tolist() == [False, False, False, True, True, True]
    assert (~keep).all(dim=0).tolist() == [True, True, True, False, False, False]


def test_prs_statistics_with_seeded_generator():
    n = 20000
    gen = torch.Generator().manual_seed(0)
    keep, m = profiling_rejection_with_metrics([0.35] * n + [0.32] * n, [True] * (2 * n), generator=gen)
    assert abs(keep[:n].double().mean().item() - 0.5) < 0.02
    assert abs(keep[n:].double().mean().item() - 0.2) < 0.02
    assert m["prs/judged"] == 2 * n and m["prs/rejected"] == float((~keep).sum())
    # same seed, same draw; another seed, another draw
    again = profiling_rejection([0.35] * n, [True] * n, generator=torch.Generator().manual_seed(5))
    same = profiling_rejection([0.35] * n, [True] * n, generator=torch.Generator().manual_seed(5))
    other = profiling_rejection([0.35] * n, [True] * n, generator=torch.Generator().manual_seed(6))
    assert torch.equal(again, same) and not torch.equal(again, other)


def test_prs_keeps_incorrect_hacked_and_unprofiled_turns():
    coverage = [0.0, 0.0, None, math.nan, 0.1, 0.05]
    correct = [False, True, True, True, True, True]
    hacked = [False, True, False, False, False, False]
    keep, m = profiling_rejection_with_metrics(
        coverage, correct, hacked=hacked, generator=torch.Generator().manual_seed(0)
    )
    assert keep.tolist() == [True, True, True, True, False, False]
    assert m["prs/judged"] == 2 and m["prs/missing_coverage"] == 2
    assert m["prs/rejected_frac"] == pytest.approx(2 / 6) and m["prs/rejected_frac_of_judged"] == 1.0
    assert m["prs/coverage_mean_judged"] == pytest.approx(0.075)
    # tensors in, same answer
    keep_t = profiling_rejection(
        torch.tensor([0.0, 0.0, math.nan, math.nan, 0.1, 0.05]),
        torch.tensor(correct),
        hacked=torch.tensor(hacked),
        generator=torch.Generator().manual_seed(0),
    )
    assert keep_t.tolist() == keep.tolist()


def test_prs_keep_if_speedup():
    coverage = [0.1, 0.1, 0.1, 0.1]
    correct = [True] * 4
    speedup = [2.5, 2.0, 1.5, None]
    keep, m = profiling_rejection_with_metrics(coverage, correct, speedup=speedup, keep_if_speedup=2.0)
    assert keep.tolist() == [True, True, False, False] and m["prs/kept_by_speedup"] == 2
    assert profiling_rejection(coverage, correct, speedup=speedup).tolist() == [False] * 4
