"""TRLOO, multi-turn GRPO and RLOO against hand-computed values (docs/formulas.md)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from drk_lab.rl.advantages import (
    grpo_multiturn,
    grpo_multiturn_token_level,
    returns_to_go,
    rloo,
    token_turn_ids,
    trloo,
    trloo_token_level,
)

NAN = float("nan")
T_ = True
F_ = False

# Seven samples, three turns. Group "A" (samples 0-3) has K = 4, 3, 2 valid samples at turns
# 0, 1, 2; group "B" (sample 4) is a group of one; group "C" (5, 6) has K = 2 then 1.
REWARDS = torch.tensor(
    [
        [1.0, 0.0, 1.0],
        [0.0, 1.0, NAN],
        [2.0, NAN, NAN],
        [0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0],
        [0.5, 0.5, NAN],
        [1.5, NAN, NAN],
    ],
    dtype=torch.float64,
)
VALID = torch.tensor(
    [[T_, T_, T_], [T_, T_, F_], [T_, F_, F_], [T_, T_, T_], [T_, T_, T_], [T_, T_, F_], [T_, F_, F_]]
)
GROUP = ["A", "A", "A", "A", "B", "C", "C"]
# G = returns to go (gamma = 1), by hand:
RETURNS = [[2, 1, 1], [1, 1, 0], [2, 0, 0], [0, 0, 0], [3, 2, 1], [1, 0.5, 0], [1.5, 0, 0]]
# A(i,t) = G(i,t) - mean of the others' G at turn t. Group A, turn 0: G = 2, 1, 2, 0 (sum 5):
# 2 - 3/3 = 1, 1 - 4/3 = -1/3, 2 - 3/3 = 1, 0 - 5/3 = -5/3. Turn 1: G = 1, 1, 0 (sum 2):
# 1 - 1/2, 1 - 1/2, 0 - 2/2. Turn 2: G = 1, 0: 1 - 0, 0 - 1. Group B: K = 1, A = G.
# Group C, turn 0: 1 - 1.5, 1.5 - 1; turn 1: sample 5 alone, A = G = 0.5.
TRLOO = [[1, 0.5, 1], [-1 / 3, 0.5, 0], [1, 0, 0], [-5 / 3, -1, -1], [3, 2, 1], [-0.5, 0.5, 0], [0.5, 0, 0]]
# Same with single="zero": the groups of one get 0.
TRLOO_ZERO = [[1, 0.5, 1], [-1 / 3, 0.5, 0], [1, 0, 0], [-5 / 3, -1, -1], [0, 0, 0], [-0.5, 0, 0], [0.5, 0, 0]]
# GRPO: G - mean over S_t including i. Group A means: 5/4, 2/3, 1/2; group C turn 0: 5/4.
GRPO = [
    [0.75, 1 / 3, 0.5],
    [-0.25, 1 / 3, 0],
    [0.75, 0, 0],
    [-1.25, -2 / 3, -0.5],
    [0, 0, 0],
    [-0.25, 0, 0],
    [0.25, 0, 0],
]


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


def test_returns_to_go_hand_values_with_gamma_and_invalid_middle_turn():
    rewards = torch.tensor([[1.0, 2.0, 4.0], [3.0, NAN, 1.0]], dtype=torch.float64)
    valid = torch.tensor([[T_, T_, T_], [T_, F_, T_]])
    # row 0: 4, 2 + 0.5*4 = 4, 1 + 0.5*4 = 3; row 1: the rejected turn's reward is ignored but
    # keeps its place in time: G0 = 3 + 0.25*1.
    close(returns_to_go(rewards, valid, gamma=0.5), [[3, 4, 4], [3.25, 0, 1]])
    close(returns_to_go(REWARDS, VALID), RETURNS)


def test_trloo_hand_values_groups_shrinking_from_turn_to_turn():
    close(trloo(REWARDS, GROUP, VALID), TRLOO)
    close(trloo(REWARDS, GROUP, VALID, single="zero"), TRLOO_ZERO)
    # integer group ids in a tensor give the same result
    close(trloo(REWARDS, torch.tensor([7, 7, 7, 7, 3, 9, 9]), VALID), TRLOO)


def test_trloo_equals_scaled_centered_form():
    # A = K/(K-1) * (G - mean over S_t), on the hand example's group A, turn 0 (K = 4, mean 5/4)
    a = trloo(REWARDS, GROUP, VALID)[:4, 0]
    close(a, [4 / 3 * (g - 1.25) for g in (2.0, 1.0, 2.0, 0.0)])


def test_grpo_hand_values_and_group_of_one_flag():
    close(grpo_multiturn(REWARDS, GROUP, VALID), GRPO)
    with_return = grpo_multiturn(REWARDS, GROUP, VALID, single="return")
    close(with_return[4], [3, 2, 1])
    close(with_return[5], [-0.25, 0.5, 0])
    with pytest.raises(ValueError):
        trloo(REWARDS, GROUP, VALID, single="mean")


def test_grpo_is_trloo_times_k_minus_one_over_k_on_random_batches():
    gen = torch.Generator().manual_seed(0)
    b, t = 40, 4
    rewards = torch.rand(b, t, generator=gen, dtype=torch.float64) * 3 - 1
    # trajectories of random length, plus a few rejected turns in the middle
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    valid = torch.arange(t)[None, :] < lengths[:, None]
    valid &= torch.rand(b, t, generator=gen) > 0.15
    group = torch.randint(0, 8, (b,), generator=gen)
    for gamma in (1.0, 0.7):
        tr = trloo(rewards, group, valid, gamma)
        gr = grpo_multiturn(rewards, group, valid, gamma)
        k = torch.zeros(b, t, dtype=torch.float64)
        for i in range(b):
            for s in range(t):
                k[i, s] = float(((group == group[i]) & valid[:, s]).sum()) if valid[i, s] else 1.0
        torch.testing.assert_close(gr, (k - 1) / k * tr, rtol=0, atol=1e-12)
        assert (tr[~valid] == 0).all() and (gr[~valid] == 0).all()


def test_trloo_gamma_changes_the_baselines():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    valid = torch.ones(2, 2, dtype=torch.bool)
    # gamma 0.5: G = [2, 2] and [5, 4]; gamma 1: G = [3, 2] and [7, 4]
    close(trloo(rewards, [0, 0], valid, gamma=0.5), [[-3, -2], [3, 2]])
    close(trloo(rewards, [0, 0], valid), [[-4, -2], [4, 2]])


def test_std_normalisation_is_optional():
    rewards = torch.tensor([[0.0], [0.0], [3.0]], dtype=torch.float64)
    valid = torch.ones(3, 1, dtype=torch.bool)
    close(trloo(rewards, [0, 0, 0], valid), [[-1.5], [-1.5], [3.0]])
    # unbiased std of (0, 0, 3) is sqrt(3)
    s = math.sqrt(3) + 1e-6
    close(trloo(rewards, [0, 0, 0], valid, std_normalize=True), [[-1.5 / s], [-1.5 / s], [3 / s]])
    close(grpo_multiturn(rewards, [0, 0, 0], valid, std_normalize=True), [[-1 / s], [-1 / s], [2 / s]])


def test_rloo_single_turn():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 7.0], dtype=torch.float64)
    g = ["a", "a", "a", "b", "c", "c"]
    close(rloo(r, g), [-1.5, 0, 1.5, 4, -2, 2])
    close(rloo(r, g, single="zero"), [-1.5, 0, 1.5, 0, -2, 2])
    assert rloo([1, 0], [0, 0]).tolist() == [1.0, -1.0]  # plain lists work too


# ---- token layout ----


def tokens_from_turns(rewards, valid, turn_lengths, env_len=2, length=24, keep_rejected_slot=True):
    """Lay [B, T] turns out on tokens: model tokens, then env tokens, reward on each turn's last token."""
    b, t = valid.shape
    tok_r = torch.zeros(b, length, dtype=torch.float64)
    mask = torch.zeros(b, length, dtype=torch.bool)
    turn_ids = torch.full((b, length), -1)
    where = {}  # (i, s) -> token positions of that turn
    for i in range(b):
        pos = 0
        last = int(valid[i].nonzero().max()) if valid[i].any() else -1
        for s in range(last + 1):
            n = turn_lengths[(i + s) % len(turn_lengths)]
            span = list(range(pos, pos + n))
            turn_ids[i, pos : pos + n] = s
            if valid[i, s]:
                mask[i, span] = True
                tok_r[i, span[-1]] = rewards[i, s]
                where[(i, s)] = span
            else:
                tok_r[i, span[-1]] = 100.0  # a rejected turn's reward, which must be ignored
            pos += n + env_len
    return tok_r, mask, turn_ids, where


def test_token_level_equals_turn_form_mapped_onto_tokens():
    tok_r, mask, turn_ids, where = tokens_from_turns(REWARDS, VALID, turn_lengths=[3, 1, 2])
    index = np.array(GROUP, dtype=object)
    adv, ret = trloo_token_level(tok_r, mask, index)
    expected_adv = torch.zeros_like(adv)
    expected_ret = torch.zeros_like(ret)
    for (i, s), span in where.items():
        expected_adv[i, span] = TRLOO[i][s]
        expected_ret[i, span] = RETURNS[i][s]
    torch.testing.assert_close(adv, expected_adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, expected_ret, rtol=0, atol=1e-12)
    assert (adv[~mask] == 0).all()
    # explicit turn ids give the same; GRPO through the same path
    adv2, _ = trloo_token_level(tok_r, mask, index, turn_ids=turn_ids)
    torch.testing.assert_close(adv2, adv)
    gadv, _ = grpo_multiturn_token_level(tok_r, mask, index)
    for (i, s), span in where.items():
        assert torch.allclose(gadv[i, span], torch.tensor(GRPO[i][s], dtype=torch.float64))


def test_token_level_rejected_middle_turn_needs_turn_ids():
    # sample 0's turn 1 is rejected (masked out); its turn 2 must still meet the others' turn 2
    rewards = torch.tensor([[1.0, 5.0, 2.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    valid = torch.tensor([[T_, F_, T_], [T_, T_, T_], [T_, T_, T_]])
    group = [0, 0, 0]
    tok_r, mask, turn_ids, where = tokens_from_turns(rewards, valid, turn_lengths=[2, 3])
    adv, _ = trloo_token_level(tok_r, mask, group, turn_ids=turn_ids)
    turn_form = trloo(rewards, group, valid)
    for (i, s), span in where.items():
        assert torch.allclose(adv[i, span], turn_form[i, s].expand(len(span)))
    # by hand: turn 2, G = 2, 1, 0 -> 2 - 0.5, 1 - 1, 0 - 1.5
    close(turn_form[:, 2], [1.5, 0, -1.5])
    # without turn ids the run of model tokens after the gap would count as turn 1
    assert token_turn_ids(mask)[0, where[(0, 2)][0]] == 1
    assert token_turn_ids(mask, turn_ids)[0, where[(0, 2)][0]] == 2


def test_token_level_call_shape_of_verl_and_skyrl():
    tok_r, mask, _, where = tokens_from_turns(REWARDS, VALID, turn_lengths=[2])
    index = np.array(["u1", "u1", "u1", "u1", "u2", "u3", "u3"], dtype=object)
    # verl passes keywords and a config (its gamma is honoured); SkyRL adds values, lambd, ...
    config = SimpleNamespace(gamma=0.5, norm_adv_by_std_in_grpo=True)
    adv, ret = trloo_token_level(
        token_level_rewards=tok_r.float(), response_mask=mask.long(), index=index, config=config
    )
    assert adv.shape == ret.shape == mask.shape and adv.dtype == torch.float32
    expected = trloo(REWARDS, GROUP, VALID, gamma=0.5)
    for (i, s), span in where.items():
        assert torch.allclose(adv[i, span], expected[i, s].float().expand(len(span)))
    adv_kw, _ = trloo_token_level(
        token_level_rewards=tok_r, response_mask=mask, index=index, values=None, gamma=0.5, lambd=1.0,
        grpo_norm_by_std=True,
    )
    torch.testing.assert_close(adv_kw.float(), adv)
