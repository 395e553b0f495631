"""The policy-gradient loss (docs/formulas.md) as a pure function of per-token tensors.

    loss, metrics = clipped_policy_loss(logp, old_logp, advantages, mask, num_sequences=...)

All tensors are [N, L] (sequences x positions). `logp` is the trained model's log-probability of
each token (with gradient), `old_logp` the behaviour policy's (no gradient), `advantages` the
per-token advantage (a turn's advantage on every model token of that turn), `mask` True on the
tokens that are trained (model tokens of kept turns); everything else (prompt, feedback, chat
glue, padding, rejected turns) contributes nothing, not even NaN or inf values placed there.

Per token, with ratio r = exp(logp - old_logp) and advantage A:
    clipped = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))          (PPO, asymmetric clip)
    loss    = min(clipped, -A * dual_clip)  when A < 0, else clipped          (dual clip)
With a reference (`ref_logp`, the starting model's log-probs, and `kl_coef` = beta > 0) each token adds
    beta * k3,  k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1     (>= 0; its mean estimates KL(new || ref))
a pull towards the starting model that acts where rewards cannot: when every sample of a group fails
the same way, the group's advantages are all zero and this is the only term left (its gradient, like
the others', reaches the logits scaled by 1 - p of the sampled token: it moves uncertain tokens).
Aggregation "seq-mean-token-sum": each sequence's token losses are summed, then the sums are
averaged over `num_sequences` (by default the N rows given; the trainer passes the count over the
whole optimizer step so that micro-batches and processes add up to one mean).
"""

from __future__ import annotations

import torch

EPS_LOW = 0.2
EPS_HIGH = 0.28
DUAL_CLIP = 3.0


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    dual_clip: float | None = DUAL_CLIP,
    num_sequences: float | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(scalar loss, metrics). Metrics are detached 0-d tensors: token and sequence counts, and
    means over the masked tokens of the clip fractions (clip_low: A < 0 and r < 1 - eps_low;
    clip_high: A > 0 and r > 1 + eps_high; clip_dual: A < 0 and r > dual_clip), the ratio and the
    approximate KL between old and new policies (k3 estimator, (r - 1) - log r); with `ref_logp`, ref_kl: the
    mean k3 against the reference (also when kl_coef is 0, which adds nothing to the loss)."""
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    mask = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    log_ratio = torch.where(mask, logp - old_logp.to(logp.dtype), zero)
    adv = torch.where(mask, advantages.to(logp.dtype), zero)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    token_loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        token_loss = torch.where(adv < 0, torch.minimum(token_loss, -adv * dual_clip), token_loss)
    if ref_logp is not None:
        # clamped: a token the reference all but rules out must not overflow exp()
        ref_log_ratio = torch.where(mask, ref_logp.to(logp.dtype) - logp, zero).clamp(-20.0, 20.0)
        ref_kl = torch.exp(ref_log_ratio) - ref_log_ratio - 1.0
        token_loss = token_loss + kl_coef * ref_kl
    token_loss = torch.where(mask, token_loss, zero)
    denominator = float(num_sequences) if num_sequences is not None else float(logp.shape[0])
    loss = token_loss.sum() / max(denominator, 1e-12)

    with torch.no_grad():
        tokens = mask.sum()
        count = tokens.clamp(min=1).to(logp.dtype)

        def frac(condition: torch.Tensor) -> torch.Tensor:
            return (condition & mask).sum().to(logp.dtype) / count

        metrics = {
            "tokens": tokens.to(logp.dtype),
            "sequences": mask.any(dim=-1).sum().to(logp.dtype),
            "clip_low": frac((adv < 0) & (ratio < 1.0 - eps_low)),
            "clip_high": frac((adv > 0) & (ratio > 1.0 + eps_high)),
            "clip_dual": frac((adv < 0) & (ratio > dual_clip)) if dual_clip is not None else zero.detach(),
            "ratio_mean": torch.where(mask, ratio, zero).sum() / count,
            "approx_kl": torch.where(mask, ratio - 1.0 - log_ratio, zero).sum() / count,
            "token_loss_sum": token_loss.sum().detach(),
        }
        if ref_logp is not None:
            metrics["ref_kl"] = torch.where(mask, ref_kl, zero).sum() / count
    return loss, metrics


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.bool()
    return torch.where(mask, values, torch.zeros_like(values)).sum() / mask.sum().clamp(min=1)
