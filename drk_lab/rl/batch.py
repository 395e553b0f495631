"""Token batches: a rollout's sequences as padded tensors, with per-turn rewards and flags, for the trainer.

A trajectory is one sequence when every turn's prompt extends the previous one (full context), or
several when the context manager trimmed earlier turns (rollout.py explains why); model tokens carry
their turn id and rollout log-prob, environment tokens turn id ENV_TURN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drk_lab.rl.rollout import Rollout, TurnTokens

ENV_TURN = -1  # turn id of environment tokens


@dataclass
class SequenceBatch:
    """Padded token tensors of a rollout, one row per sequence, plus per-turn tensors per trajectory.

    Per sequence [N, L]: input_ids, attention_mask, model_mask (True on sampled tokens), rollout_logp
    (on model tokens, 0 elsewhere), turn_ids (turn index on model tokens, -1 elsewhere); traj_index[N].
    Per trajectory [B, T]: rewards, exists (the turn happened), coverage (NaN when unknown), correct
    (correct and not hacked), hacked, speedup (NaN when unknown); group[B].
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    model_mask: torch.Tensor
    rollout_logp: torch.Tensor
    turn_ids: torch.Tensor
    traj_index: torch.Tensor
    rewards: torch.Tensor
    exists: torch.Tensor
    coverage: torch.Tensor
    correct: torch.Tensor
    hacked: torch.Tensor
    speedup: torch.Tensor
    group: torch.Tensor
    padding_side: str = "right"

    PER_SEQUENCE = ("input_ids", "attention_mask", "model_mask", "rollout_logp", "turn_ids", "traj_index")

    @property
    def num_sequences(self) -> int:
        return self.input_ids.shape[0]

    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.long().cumsum(-1) - 1).clamp(min=0)

    def rows(self, index) -> dict[str, torch.Tensor]:
        """The per-sequence tensors of some rows, cut to the longest of them (padding side kept)."""
        index = torch.as_tensor(index, dtype=torch.long)
        out = {name: getattr(self, name)[index] for name in self.PER_SEQUENCE}
        width = int(out["attention_mask"].sum(-1).max()) if index.numel() else 0
        cut = slice(None, width) if self.padding_side == "right" else slice(-width if width else None, None)
        for name in self.PER_SEQUENCE[:-1]:
            out[name] = out[name][:, cut]
        out["position_ids"] = (out["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        return out

    def token_values(self, per_turn: torch.Tensor, rows: dict | None = None) -> torch.Tensor:
        """per_turn[B, T] spread onto the model tokens of each sequence ([N, L]); 0 on other tokens."""
        rows = rows or {name: getattr(self, name) for name in self.PER_SEQUENCE}
        tid = rows["turn_ids"]
        per_turn = per_turn.to(tid.device)
        values = per_turn[rows["traj_index"][:, None].expand_as(tid), tid.clamp(min=0)]
        return torch.where(tid >= 0, values, torch.zeros_like(values))

    def per_trajectory(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Model-token values [N, L] regrouped per trajectory -> (values[B, M], mask[B, M]), in order."""
        b = self.rewards.shape[0]
        pieces = [[] for _ in range(b)]
        for row in range(self.num_sequences):
            pieces[int(self.traj_index[row])].append(values[row][self.model_mask[row]])
        flat = [torch.cat(p) if p else values.new_zeros(0) for p in pieces]
        width = max([len(f) for f in flat] + [1])
        out = values.new_zeros(b, width)
        mask = torch.zeros(b, width, dtype=torch.bool, device=values.device)
        for i, f in enumerate(flat):
            out[i, :len(f)] = f
            mask[i, :len(f)] = True
        return out, mask


def _sequences(tokens: list[TurnTokens]) -> list[tuple[list[int], list[bool], list[float], list[int]]]:
    """Chains of turns whose prompts extend each other -> (ids, model mask, log-probs, turn ids) each."""
    out, cur = [], None
    for t, turn in enumerate(tokens):
        if cur is not None:
            prev = tokens[t - 1]
            expected_len = len(cur[0]) + len(prev.glue_ids or [])
            continues = (prev.glue_ids is not None and len(turn.prompt_ids) == expected_len
                         and turn.prompt_ids == cur[0] + prev.glue_ids)
            if continues:
                n = len(prev.glue_ids)
                cur[0].extend(prev.glue_ids)
                cur[1].extend([False] * n)
                cur[2].extend([0.0] * n)
                cur[3].extend([ENV_TURN] * n)
            else:
                out.append(cur)
                cur = None
        if cur is None:
            n = len(turn.prompt_ids)
            cur = (list(turn.prompt_ids), [False] * n, [0.0] * n, [ENV_TURN] * n)
        m = len(turn.completion_ids)
        cur[0].extend(turn.completion_ids)
        cur[1].extend([True] * m)
        cur[2].extend(turn.logprobs)
        cur[3].extend([t] * m)
    if cur is not None:
        out.append(cur)
    return out


def _nan_if_none(x) -> float:
    return float("nan") if x is None else float(x)


def build_batch(rollout: Rollout, pad_token_id: int, padding_side: str = "right") -> SequenceBatch:
    """The rollout's sequences padded into tensors (see SequenceBatch and the module docstring)."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    rows, owner = [], []
    for b, tokens in enumerate(rollout.tokens):
        for seq in _sequences(tokens):
            rows.append(seq)
            owner.append(b)
    if not rows:  # no turn ran at all (prompts too long): one placeholder row that trains nothing
        rows, owner = [([pad_token_id], [False], [0.0], [ENV_TURN])], [0]
    n, width = len(rows), max([len(r[0]) for r in rows] + [1])
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    model_mask = torch.zeros((n, width), dtype=torch.bool)
    logp = torch.zeros((n, width), dtype=torch.float32)
    turn_ids = torch.full((n, width), ENV_TURN, dtype=torch.long)
    for i, (ids, mask, lps, tids) in enumerate(rows):
        cut = slice(0, len(ids)) if padding_side == "right" else slice(width - len(ids), width)
        input_ids[i, cut] = torch.tensor(ids, dtype=torch.long)
        attention[i, cut] = 1
        model_mask[i, cut] = torch.tensor(mask, dtype=torch.bool)
        logp[i, cut] = torch.tensor(lps, dtype=torch.float32)
        turn_ids[i, cut] = torch.tensor(tids, dtype=torch.long)

    b, t = len(rollout.trajectories), rollout.max_turns
    rewards, speedup = torch.zeros(b, t), torch.full((b, t), float("nan"))
    coverage = torch.full((b, t), float("nan"))
    exists, correct, hacked = (torch.zeros(b, t, dtype=torch.bool) for _ in range(3))
    for i, traj in enumerate(rollout.trajectories):
        for turn in traj.turns:
            rewards[i, turn.index] = float(turn.reward)
            exists[i, turn.index] = True
            coverage[i, turn.index] = _nan_if_none(turn.result.coverage)
            speedup[i, turn.index] = _nan_if_none(turn.result.speedup)
            correct[i, turn.index] = turn.result.ok
            hacked[i, turn.index] = bool(turn.result.hacked or turn.result.error_kind == "hacked")
    return SequenceBatch(input_ids, attention, model_mask, logp, turn_ids, torch.tensor(owner, dtype=torch.long),
                         rewards, exists, coverage, correct, hacked, speedup,
                         torch.tensor(rollout.group, dtype=torch.long), padding_side)
