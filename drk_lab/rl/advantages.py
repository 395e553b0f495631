"""Turn-level advantages for multi-turn RL: TRLOO, multi-turn GRPO and single-turn RLOO.

Layout: `rewards[B, T]` holds the reward of turn t of sample i, `group[B]` the id of the prompt
that sample i answers (ints, strings or anything hashable), `valid[B, T]` which turns count.

Return-to-go: G(i,t) = sum over valid k >= t of gamma^(k-t) * r(i,k).
- An invalid entry is padding (the trajectory ended earlier) or a rejected turn: its reward is
  ignored (so NaN padding is harmless) and its own G and advantage are 0. A rejected turn in the
  middle keeps its place in time: gamma still counts it in the exponent k - t.
- To let a rejected turn's reward still count for earlier turns, compute G with the mask of
  existing turns and pass it to `advantages_from_returns` with the mask of trained turns.

TRLOO: S_t = samples of the group with a valid turn t, K_t = |S_t|,
    A(i,t) = G(i,t) - mean of G(j,t) over j in S_t, j != i = K_t/(K_t-1) * (G(i,t) - mean over S_t).
GRPO (multi-turn): A(i,t) = G(i,t) - mean over S_t including i = (K_t-1)/K_t * TRLOO.
A group of one at turn t (K_t = 1) has no baseline; `single` chooses: "return" gives A = G
(TRLOO's default, §12), "zero" gives A = 0 (GRPO's default: what its formula gives).
`std_normalize=True` divides by the (unbiased) std of G over S_t plus `eps`; off by default.

`trloo_token_level` / `grpo_multiturn_token_level` take the token layout that verl and SkyRL
advantage estimators receive, so they can be registered there (see their docstrings).
"""

from __future__ import annotations

from typing import Any

import torch

SINGLE_CHOICES = ("return", "zero")


def _float_tensor(x: Any) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def _bool_tensor(x: Any, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(x, device=device).bool()


def group_indices(group: Any, device: torch.device | str = "cpu") -> torch.Tensor:
    """Group ids (tensor, numpy array or list of hashables) -> int64 ids 0..n_groups-1."""
    if isinstance(group, torch.Tensor):
        return torch.unique(group.reshape(-1), return_inverse=True)[1].to(device)
    ids: dict[Any, int] = {}
    out = [ids.setdefault(g.item() if hasattr(g, "item") else g, len(ids)) for g in list(group)]
    return torch.tensor(out, dtype=torch.long, device=device)


def returns_to_go(rewards: Any, valid: Any = None, gamma: float = 1.0) -> torch.Tensor:
    """G[B, T] with G(i,t) = sum over valid k >= t of gamma^(k-t) r(i,k); 0 where invalid."""
    r = _float_tensor(rewards)
    v = torch.ones_like(r, dtype=torch.bool) if valid is None else _bool_tensor(valid, r.device)
    r = torch.where(v, r, torch.zeros_like(r))
    g = torch.zeros_like(r)
    running = torch.zeros_like(r[:, :1]).squeeze(1)
    for t in range(r.shape[1] - 1, -1, -1):
        running = r[:, t] + gamma * running
        g[:, t] = running
    return torch.where(v, g, torch.zeros_like(g))


def advantages_from_returns(
    returns: Any,
    group: Any,
    valid: Any,
    *,
    leave_one_out: bool = True,
    single: str = "return",
    std_normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group baselines per turn over S_t (valid samples of the group at turn t).

    leave_one_out=True: A = G - mean over S_t without i (TRLOO); False: A = G - mean over S_t (GRPO).
    """
    if single not in SINGLE_CHOICES:
        raise ValueError(f"single must be one of {SINGLE_CHOICES}, got {single!r}")
    g = _float_tensor(returns)
    if g.dim() != 2:
        raise ValueError(f"returns must be [B, T], got shape {tuple(g.shape)}")
    v = _bool_tensor(valid, g.device)
    gv = torch.where(v, g, torch.zeros_like(g))
    gid = group_indices(group, g.device)
    if gid.numel() != g.shape[0]:
        raise ValueError(f"group has {gid.numel()} ids for {g.shape[0]} samples")
    n_groups = int(gid.max()) + 1 if gid.numel() else 0

    def per_group_sum(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_groups, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, gid, x)[gid]

    total = per_group_sum(gv)  # sum of G over S_t, for each sample's own group
    k = per_group_sum(v.to(g.dtype))  # K_t
    mean = total / k.clamp(min=1)
    multi = k > 1
    if leave_one_out:
        adv = torch.where(multi, gv - (total - gv) / (k - 1).clamp(min=1), gv)
    else:
        adv = gv - mean
    if single == "return":
        adv = torch.where(multi, adv, gv)
    else:
        adv = torch.where(multi, adv, torch.zeros_like(adv))
    if std_normalize:
        dev = torch.where(v, gv - mean, torch.zeros_like(gv))
        std = (per_group_sum(dev * dev) / (k - 1).clamp(min=1)).sqrt()
        adv = torch.where(multi, adv / (std + eps), adv)
    return torch.where(v, adv, torch.zeros_like(adv))


def trloo(
    rewards: Any,
    group: Any,
    valid: Any,
    gamma: float = 1.0,
    *,
    single: str = "return",
    std_normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Turn-level leave-one-out advantages [B, T]; invalid entries get 0."""
    g = returns_to_go(rewards, valid, gamma)
    return advantages_from_returns(
        g, group, valid, leave_one_out=True, single=single, std_normalize=std_normalize, eps=eps
    )


def grpo_multiturn(
    rewards: Any,
    group: Any,
    valid: Any,
    gamma: float = 1.0,
    *,
    single: str = "zero",
    std_normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Multi-turn GRPO advantages [B, T]: G minus the mean over S_t including i (for comparison)."""
    g = returns_to_go(rewards, valid, gamma)
    return advantages_from_returns(
        g, group, valid, leave_one_out=False, single=single, std_normalize=std_normalize, eps=eps
    )


ADVANTAGES = ("trloo", "grpo")


def batch_advantages(returns: Any, group: Any, valid: Any, method: str = "trloo", *,
                     std_normalize: bool = False) -> torch.Tensor:
    """What RLTrainer trains on, by `method`: "trloo" (a group of one keeps its return) or "grpo" (a group
    of one gets 0)."""
    if method not in ADVANTAGES:
        raise ValueError(f"advantage must be one of {ADVANTAGES}, got {method!r}")
    grpo = method == "grpo"
    return advantages_from_returns(returns, group, valid, leave_one_out=not grpo, single="zero" if grpo else "return",
                                   std_normalize=std_normalize)


def rloo(
    rewards: Any, group: Any, *, single: str = "return", std_normalize: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """Single-turn RLOO [B]: A_i = r_i - mean of r_j over the rest of i's group."""
    r = _float_tensor(rewards).reshape(-1, 1)
    valid = torch.ones_like(r, dtype=torch.bool)
    return advantages_from_returns(
        r, group, valid, leave_one_out=True, single=single, std_normalize=std_normalize, eps=eps
    )[:, 0]


# ---- token layout (verl / SkyRL advantage estimators) ----


def token_turn_ids(response_mask: Any, turn_ids: Any = None) -> torch.Tensor:
    """Turn number of each model token [B, L] (-1 on environment tokens and padding).

    With `turn_ids`, model tokens take its value (so a turn whose tokens were all masked out, e.g.
    rejected, leaves a gap and is invalid). Without, each contiguous run of model tokens is a turn.
    """
    m = torch.as_tensor(response_mask).bool()
    if turn_ids is not None:
        tid = torch.as_tensor(turn_ids, device=m.device).long()
    else:
        before = torch.zeros_like(m)
        before[:, 1:] = m[:, :-1]
        tid = torch.cumsum((m & ~before).long(), dim=1) - 1
    return torch.where(m, tid, torch.full_like(tid, -1))


def _config_value(config: Any, name: str) -> Any:
    if config is None:
        return None
    if isinstance(config, dict):
        return config.get(name)
    return getattr(config, name, None)


def turn_advantages_token_level(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    turn_ids: Any = None,
    gamma: float | None = None,
    *,
    leave_one_out: bool = True,
    single: str = "return",
    std_normalize: bool = False,
    epsilon: float = 1e-6,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-turn advantages spread onto tokens: (advantages[B, L], returns[B, L]).

    A turn's reward is the sum of `token_level_rewards` over its model tokens (the trainer puts it
    on the turn's last model token); every model token of turn t gets A(i,t) and G(i,t);
    environment tokens get 0. Turn t of one sample is compared with turn t of the others in its
    group. gamma=None takes `config.gamma` when there is one, else 1.0.
    """
    if gamma is None:
        gamma = _config_value(config, "gamma")
        gamma = 1.0 if gamma is None else float(gamma)
    r_tok = _float_tensor(token_level_rewards)
    mask = torch.as_tensor(response_mask, device=r_tok.device).bool()
    tid = token_turn_ids(mask, turn_ids)
    b = r_tok.shape[0]
    n_turns = max(int(tid.max()) + 1, 1) if tid.numel() else 1
    slot = torch.where(mask, tid + torch.arange(b, device=tid.device)[:, None] * n_turns, 0)
    zeros = torch.zeros(b * n_turns, dtype=r_tok.dtype, device=r_tok.device)
    r_bt = zeros.index_add(0, slot[mask], r_tok[mask]).view(b, n_turns)
    valid = zeros.index_add(0, slot[mask], torch.ones_like(r_tok[mask])).view(b, n_turns) > 0
    g = returns_to_go(r_bt, valid, gamma)
    adv = advantages_from_returns(
        g, index, valid, leave_one_out=leave_one_out, single=single, std_normalize=std_normalize, eps=epsilon
    )
    gather_at = tid.clamp(min=0)
    adv_tok = torch.where(mask, adv.gather(1, gather_at), torch.zeros_like(r_tok))
    ret_tok = torch.where(mask, g.gather(1, gather_at), torch.zeros_like(r_tok))
    return adv_tok, ret_tok


def trloo_token_level(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    turn_ids: Any = None,
    gamma: float | None = None,
    epsilon: float = 1e-6,
    single: str = "return",
    std_normalize: bool = False,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRLOO in the advantage-estimator call shape of verl and SkyRL -> (advantages, returns) [B, L].

    Extra keyword arguments those frameworks pass (values, lambd, norm_adv_by_std_in_grpo, ...)
    are ignored: std normalisation is only `std_normalize`. Register it with, in verl:

        from verl.trainer.ppo.core_algos import register_adv_est
        register_adv_est("trloo")(trloo_token_level)      # algorithm.adv_estimator=trloo

    and in SkyRL:

        from skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry
        AdvantageEstimatorRegistry.register("trloo", trloo_token_level)

    Neither passes `turn_ids`, so turns are then the contiguous runs of the response mask
    (environment tokens masked out between turns); a rejected turn must stay masked in, or
    be marked through `turn_ids`, to keep later turns aligned with the rest of the group.
    Rewards on tokens outside the mask are ignored here (a rejected turn's). verl's stock agent
    loops can put an episode's reward on such a token (a trailing observation or padding): for
    verl, drk_lab.integrations.verl_estimator.register_trloo counts it for the turn before it.
    """
    return turn_advantages_token_level(
        token_level_rewards, response_mask, index, turn_ids, gamma,
        leave_one_out=True, single=single, std_normalize=std_normalize, epsilon=epsilon, config=config,
    )


def grpo_multiturn_token_level(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    turn_ids: Any = None,
    gamma: float | None = None,
    epsilon: float = 1e-6,
    single: str = "zero",
    std_normalize: bool = False,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn GRPO in the same call shape as `trloo_token_level`."""
    return turn_advantages_token_level(
        token_level_rewards, response_mask, index, turn_ids, gamma,
        leave_one_out=False, single=single, std_normalize=std_normalize, epsilon=epsilon, config=config,
    )
