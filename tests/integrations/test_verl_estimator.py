"""TRLOO for verl: verl-shaped tensors give drk_lab's trloo numbers; registration in verl's real registry;
the rollout-correction settings reject exactly what mismatch_rejection rejects (verl's own code); the
recipe's overrides compose with verl's real config. The verl parts skip when verl is not importable
(it is not in the dev extra: its pinned dependencies clash with the rl extra); see docs/verl.md for
the few packages that make it importable without its dependencies."""

import inspect
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drk_lab.integrations.verl_estimator import (trloo_for_verl, turn_rewards_from_tokens,
                                                 turn_rewards_on_tokens)
from drk_lab.integrations.verl_recipe import drkernel_overrides, rollout_correction
from drk_lab.rl.advantages import returns_to_go, trloo
from drk_lab.rl.filters import mismatch_rejection

ROOT = Path(__file__).resolve().parents[2]
# what verl 0.9.1's compute_advantage passes a registered estimator (ray_trainer.py): these keywords
VERL_KWARGS = ("token_level_rewards", "response_mask", "config", "index", "reward_baselines")


def verl_core():
    return pytest.importorskip("verl.trainer.ppo.core_algos",
                               reason="verl is not importable here (optional: the verl extra, or docs/verl.md)")


def episode_mask(turn_lengths, env_length, width):
    """One row of verl's response_mask: model turns (1) separated by environment tokens (0), padded."""
    row = []
    for k, n in enumerate(turn_lengths):
        row += [1] * n + ([0] * env_length if k < len(turn_lengths) - 1 else [])
    return row + [0] * (width - len(row))


@pytest.fixture
def batch():
    """Two prompts x three samples, up to three turns; sample 5 stopped after one turn."""
    turns = [[3, 2, 4], [2, 2, 2], [4, 1, 3], [2, 3, 1], [1, 1, 1], [5]]
    mask = torch.tensor([episode_mask(t, 2, 16) for t in turns], dtype=torch.int64)
    rewards = torch.tensor([[0.5, 1.0, 2.0], [0.0, 0.5, 0.5], [1.0, 1.0, 0.0],
                            [0.0, 0.0, 1.5], [0.5, 0.5, 0.5], [2.0, math.nan, math.nan]])
    valid = torch.tensor([[True] * 3] * 5 + [[True, False, False]])
    uid = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    return mask, rewards, valid, uid


def test_per_turn_rewards_give_trloo_numbers_on_every_model_token(batch):
    mask, rewards, valid, uid = batch
    tokens = turn_rewards_on_tokens(torch.nan_to_num(rewards), mask)
    adv, ret = trloo_for_verl(token_level_rewards=tokens, response_mask=mask, index=uid, config={"gamma": 1.0})
    expected = trloo(rewards, [0, 0, 0, 1, 1, 1], valid)
    turn_of_token = turn_rewards_from_tokens(tokens, mask)[2]
    for i in range(6):
        for t in range(3):
            on = turn_of_token[i] == t
            if valid[i, t]:
                assert on.any() and torch.allclose(adv[i, on], expected[i, t].float().expand(int(on.sum())))
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()
    assert adv.dtype == tokens.dtype and adv.shape == mask.shape
    # A(0, 0): G = 3.5 against the mean of 1.0 and 2.0 (samples 1 and 2): 2.0
    assert adv[0, 0].item() == pytest.approx(2.0)
    assert ret[0, 0].item() == pytest.approx(3.5)


def test_one_final_reward_as_verls_agent_loop_writes_it(batch):
    """verl's stock loops put the episode's reward on the last response token (sometimes an observation
    token): every turn's return is that reward, baselines per turn over the samples that reached it."""
    mask, _, valid, uid = batch
    final = torch.tensor([1.0, 0.0, 0.5, 2.0, 1.0, 3.0])
    tokens = torch.zeros(mask.shape)
    last = mask.shape[1] - 1 - mask.flip(1).argmax(1)
    tokens[torch.arange(6), last + torch.tensor([0, 0, 1, 0, 2, 0])] = final  # two land after the last model token
    adv, ret = trloo_for_verl(tokens, mask, uid, None)
    per_turn = torch.zeros(6, 3)
    per_turn[torch.arange(6), valid.sum(1) - 1] = final
    expected = trloo(per_turn, uid, valid)
    assert torch.allclose(ret[:, 0], returns_to_go(per_turn, valid)[:, 0])
    assert torch.allclose(adv[:, 0], expected[:, 0])
    assert adv[5, 0].item() == pytest.approx(3.0 - 1.5)  # sample 5: 3.0 against (2.0 + 1.0) / 2


def test_a_rejected_row_leaves_its_groups_baselines(batch):
    mask, rewards, valid, uid = batch
    tokens = turn_rewards_on_tokens(torch.nan_to_num(rewards), mask)
    rejected = mask.clone()
    rejected[2] = 0  # verl's sequence-level rollout rejection zeroes the row's mask
    adv, _ = trloo_for_verl(tokens, rejected, uid, {"gamma": 1.0})
    kept = valid.clone()
    kept[2] = False
    expected = trloo(rewards, uid, kept)
    assert (adv[2] == 0).all()
    assert adv[0, 0].item() == pytest.approx(expected[0, 0].item()) == pytest.approx(3.5 - 1.0)


def test_gamma_comes_from_verls_algorithm_config(batch):
    mask, rewards, valid, uid = batch
    tokens = turn_rewards_on_tokens(torch.nan_to_num(rewards), mask)

    class AlgoConfigLike:  # verl passes its AlgoConfig dataclass, which has .get like a dict
        gamma = 0.5

        def get(self, key, default=None):
            return getattr(self, key, default)

    adv, ret = trloo_for_verl(tokens, mask, uid, AlgoConfigLike())
    assert ret[0, 0].item() == pytest.approx(0.5 + 0.5 * 1.0 + 0.25 * 2.0)
    assert adv[0, 0].item() == pytest.approx(trloo(rewards, uid, valid, gamma=0.5)[0, 0].item())


def test_the_signature_takes_every_keyword_verl_passes(batch):
    mask, rewards, _, uid = batch
    params = inspect.signature(trloo_for_verl).parameters
    assert list(params)[:2] == ["token_level_rewards", "response_mask"]
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())
    tokens = turn_rewards_on_tokens(torch.nan_to_num(rewards), mask)
    adv, ret = trloo_for_verl(**dict(zip(VERL_KWARGS, (tokens, mask, {"gamma": 1.0}, uid, torch.zeros(6)))))
    assert adv.shape == ret.shape == mask.shape


def test_registered_in_verls_registry():
    core = verl_core()
    from drk_lab.integrations.verl_estimator import register_trloo

    assert register_trloo() is trloo_for_verl and register_trloo() is trloo_for_verl  # twice is fine
    assert core.get_adv_estimator_fn("trloo") is trloo_for_verl
    from verl.trainer.config import AlgoConfig

    mask = torch.tensor([episode_mask([2, 2], 1, 6), episode_mask([3, 1], 1, 6)])
    tokens = turn_rewards_on_tokens(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), mask)
    # the call verl's compute_advantage makes for a registered estimator
    adv, ret = core.get_adv_estimator_fn("trloo")(token_level_rewards=tokens, response_mask=mask,
                                                  config=AlgoConfig(gamma=1.0), index=np.array(["u", "u"], dtype=object))
    assert adv[0, 0].item() == pytest.approx(1.0 - 2.0) and adv[1, 0].item() == pytest.approx(1.0)


def mismatched_logprobs(n=64, length=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    rollout = -torch.rand(n, length, generator=g, dtype=torch.float64) * 3
    # per-sequence mean log ratio spread around the band's edges (log 0.999, log 1.001), plus small noise
    shift = torch.linspace(-0.0015, 0.0015, n, dtype=torch.float64)[:, None]
    noise = torch.randn(n, length, generator=g, dtype=torch.float64) * 1e-4
    noise -= noise.mean(1, keepdim=True)
    train = rollout + shift + noise
    mask = torch.ones(n, length, dtype=torch.bool)
    mask[::5, length // 2:] = False
    train[7, 3] = rollout[7, 3] + math.log(5e-5)  # vetoed token (rho = 5e-5)
    train[7, 4] = rollout[7, 4] - math.log(5e-5)  # ... balanced, so the mean stays inside the band
    train[9, 5] = rollout[9, 5] + math.log(2e-4)  # rho = 2e-4: not vetoed, the mean leaves the band
    return train, rollout, mask


def test_rollout_correction_rejects_what_mrs_rejects():
    verl_core()
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    train, rollout, mask = mismatched_logprobs()
    keep_mrs, _ = mismatch_rejection(train, rollout, mask)
    settings = rollout_correction()
    new_mask, metrics = compute_rollout_rejection_mask((train - rollout).float(), mask.float(), settings["rollout_rs"],
                                                       settings["rollout_rs_threshold"])
    keep_verl = (new_mask.bool() | ~mask).all(1)
    assert 10 < int(keep_mrs.sum()) < 54 and not keep_mrs[7]
    assert torch.equal(keep_verl, keep_mrs)
    # w = 0.9990005 is inside MRS's band; verl's own Geo-RS preset "0.999_1.001" is the band
    # [1/1.001, 1/0.999] = [0.999001, 1.001001] and rejects it, the reciprocal thresholds keep it
    edge = torch.full((1, 20), math.log(0.9990005))
    ones = torch.ones(1, 20)
    assert mismatch_rejection(edge, torch.zeros(1, 20), ones.bool())[0].item()
    assert not compute_rollout_rejection_mask(edge, ones, "seq_mean_k1", "0.999_1.001")[0].bool().any()
    assert compute_rollout_rejection_mask(edge, ones, settings["rollout_rs"], settings["rollout_rs_threshold"])[0].bool().all()


def test_the_recipe_composes_with_verls_config(tmp_path):
    verl_core()
    pytest.importorskip("hydra")
    import verl
    from hydra import compose, initialize_config_dir

    printed = subprocess.run([sys.executable, "-m", "drk_lab.integrations.verl_recipe", "command", "--model",
                              "Qwen/Qwen3-8B", "--data", str(tmp_path), "--nodes", "4", "--service-url",
                              "http://10.0.0.2:8000"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    lines = shlex.split(printed.replace("\\\n", " "))[3:]  # the arguments the shell gives `python3 -m verl.trainer.main_ppo`
    assert lines == drkernel_overrides("Qwen/Qwen3-8B", str(tmp_path), nodes=4, service_url="http://10.0.0.2:8000")
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=lines)  # an unknown key would raise here
    assert cfg.algorithm.adv_estimator == "trloo" and cfg.actor_rollout_ref.rollout.n == 16
    assert cfg.data.train_batch_size == 16 and cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.algorithm.rollout_correction.rollout_rs == "seq_mean_k1,seq_max_k2"
    assert cfg.reward.custom_reward_function.reward_kwargs.url == "http://10.0.0.2:8000"


def test_rollout_correction_thresholds_in_numbers():
    s = rollout_correction()
    band, veto = s["rollout_rs_threshold"].split(",")
    lo, hi = (float(x) for x in band.split("_"))
    assert lo == 1 / 1.001 and hi == 1 / 0.999 and float(veto) == pytest.approx(0.5 * math.log(1e-4) ** 2)
    assert s["rollout_is"] is None and s["bypass_mode"] is False
    with pytest.raises(ValueError, match="lower"):
        rollout_correction(lower=1.1)


@pytest.mark.slow
def test_recipe_command_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "drk_lab.integrations.verl_recipe"]
    out = subprocess.run([*run, "command", "--model", "/m/Qwen3-8B", "--data", "/d", "--nodes", "4"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    for line in ("algorithm.adv_estimator=trloo", "actor_rollout_ref.rollout.n=16", "data.train_batch_size=16",
                 "actor_rollout_ref.actor.optim.lr=1e-06", "actor_rollout_ref.rollout.temperature=1.0",
                 "trainer.nnodes=4", "actor_rollout_ref.actor.clip_ratio_high=0.28"):
        assert line in out.stdout
    data = subprocess.run([*run, "data", "--tasks", "builtin:1", "--val-tasks", "data/tasks/level1/01_relu.py",
                           "--out", str(tmp_path / "d")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert data.returncode == 0, data.stderr
    import pandas as pd

    train = pd.read_parquet(tmp_path / "d" / "train.parquet")
    assert len(train) == 18 and train.iloc[0]["reward_model"]["ground_truth"].startswith(("import", '"""', "#"))
    assert train.iloc[0]["prompt"][0]["role"] == "user" and "ModelNew" in train.iloc[0]["prompt"][0]["content"]
    bad = subprocess.run([*run, "data", "--tasks", str(tmp_path / "missing"), "--out", str(tmp_path / "e")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "missing" in bad.stderr


@pytest.mark.slow
def test_the_recipes_ray_hook_registers_trloo_in_every_worker():
    """The hook line of the recipe, in a real local Ray cluster: a fresh worker process (as verl's trainer
    actor is) finds TRLOO in verl's registry without importing drk_lab itself."""
    verl_core()
    ray = pytest.importorskip("ray")
    hook = next(line for line in drkernel_overrides("m", "d") if "worker_process_setup_hook" in line).split("=", 1)[1]
    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": hook,
                          "env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}})
    try:
        @ray.remote
        def registered() -> str:
            from verl.trainer.ppo.core_algos import get_adv_estimator_fn

            fn = get_adv_estimator_fn("trloo")
            return f"{fn.__module__}.{fn.__name__}"

        assert ray.get(registered.remote(), timeout=120) == "drk_lab.integrations.verl_estimator.trloo_for_verl"
    finally:
        ray.shutdown()
