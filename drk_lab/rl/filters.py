"""Rejection filters for RL batches: mismatch rejection (MRS) and profiling rejection (PRS).

MRS drops whole trajectories whose rollout engine's probabilities drifted from the trainer's:
rho = exp(logp_train - logp_rollout) per model token, trajectory weight = exp(mean log rho over all
its model tokens), rejected outside [lower, upper] or when any token has rho < token_veto.

PRS drops lazy kernels: a correct, non-hacked turn is kept with probability
clip((coverage - threshold) / width, 0, 1); incorrect and hacked turns are always kept (their low
reward is the signal), and so are turns without a coverage (no profile: nothing to judge by).
With `keep_if_speedup=s`, a turn with speedup >= s is kept whatever its coverage.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def mismatch_rejection(
    train_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    lower: float = 0.999,
    upper: float = 1.001,
    token_veto: float = 1e-4,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Trajectory-level MRS over [B, L] log-probs -> (keep[B] bool, metrics of plain floats).

    Bounds are inclusive. A trajectory without model tokens has weight 1 and is kept. Computed in
    float64 (the band is only 1e-3 wide); values under mask=False are ignored (may be inf/NaN).
    """
    m = torch.as_tensor(mask).bool()
    lt = torch.as_tensor(train_logp, device=m.device).double()
    lr = torch.as_tensor(rollout_logp, device=m.device).double()
    log_rho = torch.where(m, lt - lr, torch.zeros_like(lt))
    n_tok = m.sum(dim=1)
    mean_log = log_rho.sum(dim=1) / n_tok.clamp(min=1)
    weight = mean_log.exp()
    vetoed_tok = m & (log_rho < math.log(token_veto))
    vetoed = vetoed_tok.any(dim=1)
    in_band = (weight >= lower) & (weight <= upper)
    keep = in_band & ~vetoed

    b = keep.numel()
    n_all = int(n_tok.sum())
    rho = log_rho.exp()
    k3 = torch.where(m, rho - 1.0 - log_rho, torch.zeros_like(rho))  # KL(rollout || train), k3 estimator
    metrics = {
        "mrs/rejected_frac": float((~keep).sum()) / b if b else 0.0,
        "mrs/rejected": float((~keep).sum()),
        "mrs/out_of_band": float((~in_band).sum()),
        "mrs/vetoed_trajectories": float(vetoed.sum()),
        "mrs/vetoed_tokens": float(vetoed_tok.sum()),
        "mrs/weight_mean": float(weight.mean()) if b else 1.0,
        "mrs/weight_min": float(weight.min()) if b else 1.0,
        "mrs/weight_max": float(weight.max()) if b else 1.0,
        "mrs/log_ratio_abs_mean": float(log_rho.abs().sum()) / n_all if n_all else 0.0,
        "mrs/log_ratio_abs_max": float(log_rho.abs().max()) if n_all else 0.0,
        "mrs/k3_kl": float(k3.sum()) / n_all if n_all else 0.0,
        "mrs/token_ratio_min": float(torch.where(m, rho, torch.full_like(rho, math.inf)).min()) if n_all else 1.0,
    }
    return keep, metrics


def _float_or_nan(x: Any, n: int | None = None) -> torch.Tensor:
    if x is None:
        return torch.full((n or 0,), math.nan, dtype=torch.float64)
    if isinstance(x, torch.Tensor):
        return x.detach().double().reshape(-1)
    return torch.tensor([math.nan if v is None else float(v) for v in x], dtype=torch.float64)


def _bools(x: Any, n: int) -> torch.Tensor:
    if x is None:
        return torch.zeros(n, dtype=torch.bool)
    if isinstance(x, torch.Tensor):
        return x.detach().bool().reshape(-1).cpu()
    return torch.tensor([bool(v) for v in x], dtype=torch.bool)


def profiling_keep_probability(coverage: Any, threshold: float = 0.3, width: float = 0.1) -> torch.Tensor:
    """clip((coverage - threshold) / width, 0, 1); width <= 0 is a hard cut at threshold; NaN -> 1."""
    cov = _float_or_nan(coverage)
    if width > 0:
        p = ((cov - threshold) / width).clamp(0.0, 1.0)
    else:
        p = (cov >= threshold).double()
    return torch.where(cov.isnan(), torch.ones_like(p), p)


def profiling_rejection_with_metrics(
    coverage: Any,
    correct: Any,
    threshold: float = 0.3,
    width: float = 0.1,
    generator: torch.Generator | None = None,
    hacked: Any = None,
    speedup: Any = None,
    keep_if_speedup: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PRS over N turns -> (keep[N] bool on the CPU, metrics of plain floats).

    Inputs may be tensors or lists (None entries in coverage/speedup mean unknown). The random
    draw uses `generator` (a CPU torch.Generator) when given, for reproducible runs.
    """
    cov = _float_or_nan(coverage).cpu()
    n = cov.numel()
    ok = _bools(correct, n)
    hack = _bools(hacked, n)
    if ok.numel() != n or hack.numel() != n:
        raise ValueError(f"coverage has {n} entries, correct {ok.numel()}, hacked {hack.numel()}")
    judged = ok & ~hack & ~cov.isnan()
    p = profiling_keep_probability(cov, threshold, width)
    draw = torch.rand(n, generator=generator, dtype=torch.float64)
    keep = ~judged | (draw < p)  # rand is in [0, 1): p = 0 never keeps, p = 1 always does
    by_speed = torch.zeros(n, dtype=torch.bool)
    if keep_if_speedup is not None:
        spd = _float_or_nan(speedup, n).cpu()
        if spd.numel() != n:
            raise ValueError(f"speedup has {spd.numel()} entries for {n} turns")
        by_speed = judged & ~keep & (spd >= keep_if_speedup)  # NaN >= s is False
        keep = keep | by_speed
    rejected = int((~keep).sum())
    n_judged = int(judged.sum())
    metrics = {
        "prs/rejected": float(rejected),
        "prs/rejected_frac": rejected / n if n else 0.0,
        "prs/judged": float(n_judged),
        "prs/rejected_frac_of_judged": rejected / n_judged if n_judged else 0.0,
        "prs/kept_by_speedup": float(by_speed.sum()),
        "prs/missing_coverage": float((ok & ~hack & cov.isnan()).sum()),
        "prs/coverage_mean_judged": float(cov[judged].mean()) if n_judged else math.nan,
        "prs/low_coverage_frac_of_judged": float((p[judged] < 1).sum()) / n_judged if n_judged else 0.0,
    }
    return keep, metrics


def profiling_rejection(
    coverage: Any,
    correct: Any,
    threshold: float = 0.3,
    width: float = 0.1,
    generator: torch.Generator | None = None,
    hacked: Any = None,
    speedup: Any = None,
    keep_if_speedup: float | None = None,
) -> torch.Tensor:
    """PRS keep mask [N] bool (the public signature); see `profiling_rejection_with_metrics`."""
    return profiling_rejection_with_metrics(
        coverage, correct, threshold, width, generator, hacked, speedup, keep_if_speedup
    )[0]
