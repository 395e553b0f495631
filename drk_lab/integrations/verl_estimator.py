"""TRLOO in verl's advantage-estimator registry.

    from drk_lab.integrations.verl_estimator import register_trloo
    register_trloo()                                   # then algorithm.adv_estimator=trloo

verl (0.9.x, `verl.trainer.ppo.ray_trainer.compute_advantage`) calls a registered estimator as

    advantages, returns = fn(token_level_rewards=[B, L], response_mask=[B, L], config=AlgoConfig,
                             index=uid[B], reward_baselines=... (only when present))

One row is one episode: in verl's agent loops every turn of an episode sits in the same response,
the model's tokens with response_mask 1 and the environment's tokens (tool output, feedback) with 0,
so turn t of a row is its t-th run of 1s. `index` holds the prompt's uid (the n samples of a prompt
share it). The reward sits in `token_level_rewards`: verl's stock agent loops put the episode's one
reward on the last response token; an agent loop with per-turn rewards puts turn t's reward on the
last model token of turn t (`turn_rewards_on_tokens` builds that tensor). Both layouts are read the
same way (`turn_rewards_from_tokens`): a turn's reward is the sum of the rewards on its model tokens
and on the environment tokens that follow it, so a reward on a trailing observation or padding
token still counts for the turn before it.

The estimator then calls drk_lab's `trloo(rewards[B, T], group[B], valid[B, T], gamma)` and puts
A(i, t) and G(i, t) on every model token of turn t (0 elsewhere). A row whose mask is all 0 (verl's
sequence-level rollout rejection zeroes the mask before the advantages) has no valid turn and leaves
its group's baselines, as MRS-rejected trajectories do in drk_lab's trainer.
"""

from __future__ import annotations

from typing import Any

import torch

from drk_lab.rl.advantages import returns_to_go, token_turn_ids, trloo

ESTIMATOR_NAME = "trloo"


def _gamma(config: Any) -> float:
    value = config.get("gamma", None) if hasattr(config, "get") else getattr(config, "gamma", None)
    return 1.0 if value is None else float(value)


def turn_rewards_from_tokens(token_level_rewards: torch.Tensor, response_mask: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """verl's token layout -> (rewards[B, T], valid[B, T], turn of each token[B, L]).

    Turn t of a row is its t-th contiguous run of response_mask == 1; `valid` marks the turns a row
    has. A reward on a token outside the mask counts for the latest turn that began before it (the
    first turn when none did); a row without model tokens has no turn and its rewards are dropped.
    """
    mask = torch.as_tensor(response_mask).bool()
    rewards_tok = torch.as_tensor(token_level_rewards, device=mask.device).double()
    turn_of_token = token_turn_ids(mask)  # -1 outside the mask
    started = torch.cummax(turn_of_token, dim=1).values  # latest turn begun at or before each token
    owner = torch.where(started >= 0, started, torch.zeros_like(started))
    has_turn = mask.any(dim=1, keepdim=True).expand_as(mask)
    n_turns = max(int(turn_of_token.max()) + 1, 1) if turn_of_token.numel() else 1
    rewards = torch.zeros(mask.shape[0], n_turns, dtype=torch.float64, device=mask.device)
    rewards.scatter_add_(1, owner, torch.where(has_turn, rewards_tok, torch.zeros_like(rewards_tok)))
    tokens_per_turn = torch.zeros(mask.shape[0], n_turns, dtype=torch.long, device=mask.device)
    tokens_per_turn.scatter_add_(1, turn_of_token.clamp(min=0), mask.long())
    valid = tokens_per_turn > 0
    return rewards, valid, turn_of_token


def turn_rewards_on_tokens(turn_rewards: Any, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-turn rewards [B, T] -> verl's token_level_rewards [B, L]: turn t's reward on the last model
    token of turn t (the layout an agent loop with per-turn rewards should write into rm_scores)."""
    mask = torch.as_tensor(response_mask).bool()
    rewards = torch.as_tensor(turn_rewards, dtype=torch.float32, device=mask.device)
    turn_of_token = token_turn_ids(mask)
    after = torch.zeros_like(mask)
    after[:, :-1] = mask[:, 1:]
    last_of_turn = mask & ~after
    if turn_of_token.numel() and int(turn_of_token.max()) >= rewards.shape[1]:
        raise ValueError(f"the mask has more turns than turn_rewards' {rewards.shape[1]} columns")
    gathered = rewards.gather(1, turn_of_token.clamp(min=0))
    return torch.where(last_of_turn, gathered, torch.zeros_like(gathered))


def trloo_for_verl(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None,
                   config: Any = None, **ignored: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """TRLOO with verl's estimator call shape -> (advantages[B, L], returns[B, L]).

    gamma comes from `config.gamma` (verl's algorithm.gamma, 1.0 by default). No std normalisation:
    verl's `norm_adv_by_std_in_grpo` and the other keywords verl may pass are ignored. Without
    `index` every row is its own group (A = G). Output in the dtype and device of the rewards.
    """
    rewards_tok = torch.as_tensor(token_level_rewards)
    mask = torch.as_tensor(response_mask, device=rewards_tok.device).bool()
    rewards, valid, turn_of_token = turn_rewards_from_tokens(rewards_tok, mask)
    group = list(range(rewards.shape[0])) if index is None else index
    gamma = _gamma(config) if config is not None else 1.0
    adv = trloo(rewards, group, valid, gamma)
    ret = returns_to_go(rewards, valid, gamma)
    at = turn_of_token.clamp(min=0)
    dtype = rewards_tok.dtype if rewards_tok.is_floating_point() else torch.float32
    adv_tok = torch.where(mask, adv.gather(1, at), torch.zeros_like(adv.gather(1, at))).to(dtype)
    ret_tok = torch.where(mask, ret.gather(1, at), torch.zeros_like(ret.gather(1, at))).to(dtype)
    return adv_tok, ret_tok


def register_trloo(name: str = ESTIMATOR_NAME):
    """Register `trloo_for_verl` in verl's advantage-estimator registry under `name`; returns it.

    Safe to call again (verl accepts the same function twice). It takes no required argument, so it
    also serves as Ray's per-process hook, which registers it in every process of a verl job,
    including the trainer that computes the advantages:
    `+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=drk_lab.integrations.verl_estimator.register_trloo`
    """
    from verl.trainer.ppo.core_algos import register_adv_est

    return register_adv_est(name)(trloo_for_verl)
