"""The RL loss on crafted tensors (hand-computed values), and the trainer on the tiny random transformer:
weights move, environment tokens stay out of the gradient, resuming a checkpoint repeats the next step,
the run log holds the documented keys."""

from __future__ import annotations

import csv
import json
import math
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("trl")

import torch  # noqa: E402

from drk_lab.agent.context import episode_schedule  # noqa: E402
from drk_lab.agent.trajectory import read_jsonl  # noqa: E402
from drk_lab.policies.huggingface import TransformersPolicy  # noqa: E402
from drk_lab.rl.batch import build_batch  # noqa: E402
from drk_lab.rl.loss import clipped_policy_loss  # noqa: E402
from drk_lab.rl.rollout import collect_rollouts  # noqa: E402
from drk_lab.rl.runlog import RunLog, read_log  # noqa: E402
from drk_lab.rl.logprobs import sequence_logprobs  # noqa: E402
from drk_lab.rl.trainer import RLTrainer, lr_factor  # noqa: E402
from drk_lab.rl.tiny_model import load_tiny  # noqa: E402

EVAL = {"device": "cpu", "correctness_trials": 1}


# -- the loss on crafted tensors ---------------------------------------------------------------
def crafted():
    """Two sequences of 6 positions. Row 0: position 0 is environment, then ratios 1.5 (A=+1: clipped
    high), 0.5 (A=-1: clipped low), 4.0 (A=-1: dual clip), 1.1 (A=+2: inside), and an environment
    token. Row 1: one model token with ratio 1 and A=0.5."""
    ratio = torch.tensor([[1.0, 1.5, 0.5, 4.0, 1.1, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    old = torch.full((2, 6), -2.0)
    logp = (old + ratio.log()).requires_grad_(True)
    adv = torch.tensor([[0.0, 1.0, -1.0, -1.0, 2.0, 0.0], [0.0, 0.0, 0.5, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    return logp, old, adv, mask


def test_clipped_loss_matches_hand_computed_values():
    logp, old, adv, mask = crafted()
    loss, m = clipped_policy_loss(logp, old, adv, mask)
    # row 0: -1.28 (1 + 0.28) + 0.8 (1 - 0.2 kept by the max) + 3.0 (dual clip) - 2.2 = 0.32; row 1: -0.5
    assert loss.item() == pytest.approx((0.32 - 0.5) / 2, abs=1e-6)
    assert float(m["tokens"]) == 5 and float(m["sequences"]) == 2
    assert float(m["clip_high"]) == pytest.approx(1 / 5) and float(m["clip_low"]) == pytest.approx(1 / 5)
    assert float(m["clip_dual"]) == pytest.approx(1 / 5)
    kl = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 4.0, 1.1)) / 5
    assert float(m["approx_kl"]) == pytest.approx(kl, rel=1e-5)
    loss.backward()
    grad = logp.grad
    # d(-A r)/dlogp = -A r where the ratio is inside its clip range, 0 where clipped; / 2 sequences
    expected = torch.zeros(2, 6)
    expected[0, 4] = -2.0 * 1.1 / 2
    expected[1, 2] = -0.5 / 2
    assert torch.allclose(grad, expected, atol=1e-6)

    # the aggregation is a sum over each sequence's tokens, then a mean over num_sequences
    loss4, _ = clipped_policy_loss(logp, old, adv, mask, num_sequences=4)
    assert loss4.item() == pytest.approx(loss.item() / 2)
    no_dual, _ = clipped_policy_loss(logp, old, adv, mask, dual_clip=None)
    assert no_dual.item() == pytest.approx((0.32 - 3.0 + 4.0 - 0.5) / 2, abs=1e-6)


def test_kl_penalty_to_the_reference_matches_hand_computed_values():
    """beta * k3 per model token, k3 = exp(d) - d - 1 with d = ref_logp - logp: its gradient beta * (1 - exp(d))
    lowers a token the policy likes more than the reference and raises one it likes less; environment
    positions (a NaN reference there) add nothing."""
    logp, old, adv, mask = crafted()
    d = torch.tensor([[0.0, 0.5, -0.5, 0.0, 1.0, 0.0], [0.0, 0.0, -1.0, 0.0, 0.0, 0.0]])
    ref = torch.where(mask, logp.detach() + d, torch.full_like(d, float("nan")))
    plain, _ = clipped_policy_loss(logp, old, adv, mask)
    (plain_grad,) = torch.autograd.grad(plain, logp)
    with_kl, m = clipped_policy_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    (kl_grad,) = torch.autograd.grad(with_kl, logp)
    k3 = torch.where(mask, d.exp() - d - 1, torch.zeros_like(d))
    assert with_kl.item() == pytest.approx(plain.item() + 0.1 * float(k3.sum()) / 2, abs=1e-6)
    assert float(m["ref_kl"]) == pytest.approx(float(k3.sum()) / 5, rel=1e-5)
    expected = torch.where(mask, 0.1 * (1 - d.exp()) / 2, torch.zeros_like(d))
    assert torch.allclose(kl_grad - plain_grad, expected, atol=1e-6)
    assert expected[0, 4] < 0 < expected[0, 2]  # the reference likes token 4 more, token 2 less
    unused, m0 = clipped_policy_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.0)  # measured, not trained
    assert unused.item() == pytest.approx(plain.item()) and float(m0["ref_kl"]) == float(m["ref_kl"])


def test_environment_positions_change_nothing():
    logp, old, adv, mask = crafted()
    loss, _ = clipped_policy_loss(logp, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    env = ~mask
    noisy_logp = torch.where(env, torch.full_like(logp, float("nan")), logp.detach()).requires_grad_(True)
    noisy_old = torch.where(env, torch.full_like(old, float("-inf")), old)
    noisy_adv = torch.where(env, torch.full_like(adv, 1e9), adv)
    loss2, _ = clipped_policy_loss(noisy_logp, noisy_old, noisy_adv, mask)
    (grad2,) = torch.autograd.grad(loss2, noisy_logp)
    assert loss2.item() == loss.item()
    assert torch.equal(grad2, grad) and (grad2[env] == 0).all()


def test_lr_schedule_warmup_and_cosine():
    cosine = [lr_factor(s, "cosine", warmup_steps=2, total_steps=6, min_lr_ratio=0.1) for s in range(7)]
    assert [round(f, 4) for f in cosine] == [0.5, 1.0, 1.0, 0.8682, 0.55, 0.2318, 0.1]
    assert lr_factor(10, "constant", 0, None, 0.0) == 1.0
    with pytest.raises(ValueError):
        lr_factor(0, "cosine", 0, None, 0.0)
    with pytest.raises(ValueError):
        lr_factor(0, "linear", 0, 10, 0.0)


# -- the trainer on the tiny model ----------------------------------------------------------------


@pytest.mark.slow
def test_gradient_reaches_only_logits_that_predict_model_tokens(tiny_path, relu_small):
    model, tokenizer = load_tiny(tiny_path)
    policy = TransformersPolicy(model, tokenizer, device="cpu", max_new_tokens=6)
    rollout = collect_rollouts(policy, [relu_small], samples=1, schedule=episode_schedule(2), seed=0, **EVAL)
    batch = build_batch(rollout, tokenizer.pad_token_id)
    rows = batch.rows(torch.arange(batch.num_sequences))
    logp, logits = sequence_logprobs(model, rows, return_logits=True)
    logits.retain_grad()
    adv = batch.token_values(torch.tensor([[1.0, -1.0]]))
    loss, _ = clipped_policy_loss(logp, logp.detach(), adv, rows["model_mask"])
    loss.backward()
    per_position = logits.grad.abs().sum(-1)[0]  # logits at position j predict token j + 1
    predicts_model_token = torch.zeros_like(rows["model_mask"][0])
    predicts_model_token[:-1] = rows["model_mask"][0][1:]
    assert (per_position[~predicts_model_token] == 0).all()
    assert (per_position[predicts_model_token] > 0).all()


def force_solution(solution):
    """Sample 0's first reply is the known-good kernel, so each group has a reward to compare."""
    def force(task, sample, turn):
        return f"```python\n{solution}```" if (sample, turn) == (0, 0) else None
    return force


def settings(tmp_path, **kwargs):
    """RLTrainer's keyword arguments for a small run, with overrides."""
    small = dict(prompts_per_step=1, samples=2, turns=2, max_new_tokens=8, lr=1e-3, micro_batch_size=1,
                 eval_kwargs=EVAL, log_dir=str(tmp_path / "log"), checkpoint_dir=str(tmp_path / "ckpt"))
    return {**small, **kwargs}


def weights(trainer):
    return {k: v.detach().cpu().clone() for k, v in trainer.accelerator.unwrap_model(trainer.model).named_parameters()}


REQUIRED = ["step", "lr", "loss", "reward_mean", "reward_mean/turn_1", "reward_mean/turn_2", "fast@1/turn_1",
            "fast@1/turn_2", "entropy", "grad_norm", "clip_low", "clip_high", "clip_dual", "approx_kl",
            "mrs/rejected_frac", "mrs/weight_mean", "mrs/log_ratio_abs_max", "prs/rejected_frac", "tokens_per_s",
            "time/generation_s", "time/evaluation_s", "time/training_s"]


@pytest.mark.slow
def test_steps_change_weights_log_and_resume_repeats_the_next_step(tiny_path, relu_small, relu_solution, tmp_path):
    force = force_solution(relu_solution)
    first = RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path, checkpoint_every=1), force_responses=force)
    assert first.settings.rollouts.samples == 2 and first.settings.filters.mrs_upper == 1.001  # given and default settings
    start = weights(first)
    rows = first.train(num_steps=2)
    end = weights(first)
    assert [r["step"] for r in rows] == [1, 2]
    assert max(float((end[k] - start[k]).abs().max()) for k in start) > 0
    row = rows[0]
    assert row["reward_mean/turn_1"] == 0.25 and row["reward_mean/turn_2"] == 0.0  # one correct reply of two
    assert row["correct/turn_1"] == 0.5 and row["mrs/rejected_frac"] == 0.0 and row["advantage_abs_mean"] > 0
    assert row["zero_advantage_frac"] == 0.5  # turn 2: both replies earned 0, so neither trains
    assert row["trained_sequences"] == 2 and row["optimizer_steps"] == 1 and row["grad_norm"] > 0
    # how the 4 replies ended: the forced kernel is correct, the tiny model's 8 tokens hold no code
    assert row["outcome/correct"] == 0.25 and row["outcome/no_code"] == 0.75
    assert sum(v for k, v in row.items() if k.startswith("outcome/")) == pytest.approx(1.0)

    logged = read_log(tmp_path / "log")
    assert [r["step"] for r in logged] == [1, 2] and all(key in logged[0] for key in REQUIRED)
    with open(tmp_path / "log" / "metrics.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 2 and float(table[1]["loss"]) == pytest.approx(rows[1]["loss"])
    traj = read_jsonl(tmp_path / "log" / "rollouts" / "step_000002.jsonl")
    assert len(traj) == 2 and traj[0].turns[0].result.correct
    assert not (tmp_path / "log" / "wandb").exists()  # no wandb run unless asked for (it writes there)
    saved = json.loads((tmp_path / "ckpt" / "step_000001" / "trainer.json").read_text())
    assert saved["step"] == 1
    assert saved["settings"]["rollouts"]["samples"] == 2 and saved["settings"]["loss"]["betas"] == [0.9, 0.999]
    assert "force_responses" not in saved["settings"] and "accelerator" not in saved["settings"]

    resumed = RLTrainer(str(tiny_path), [relu_small],
                        **settings(tmp_path / "b", resume_from=str(tmp_path / "ckpt" / "step_000001")),
                        force_responses=force)
    assert resumed.state.step == 1
    (again,) = resumed.train(num_steps=2)
    for key in ("loss", "grad_norm", "entropy", "reward_mean", "trained_tokens", "sequence_tokens"):
        assert again[key] == pytest.approx(rows[1][key], rel=1e-6, abs=1e-9), key
    final = weights(resumed)
    assert all(torch.allclose(final[k], end[k], atol=1e-7) for k in end)


@pytest.mark.slow
def test_one_optimizer_step_moves_each_turn_the_way_its_advantage_points(tiny_path, relu_small, relu_solution,
                                                                       tmp_path):
    """Through the trainer's own pipeline (rollout, batch, filters, advantages, loss, AdamW): after one
    optimizer step, each turn's log-probability rises when its advantage is positive and falls when it is
    negative. A sign slip anywhere from the reward to the token mask would reverse one of them."""
    trainer = RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path, lr=1e-4, mini_batches=1, save_rollouts=False),
                        force_responses=force_solution(relu_solution))
    trainer._ensure_scheduler(1)
    batch = build_batch(trainer.rollout(0), trainer.pad_token_id, trainer.settings.loss.padding_side)
    before = trainer.recompute_logprobs(batch)
    valid, _ = trainer.select(batch, before, 0)
    adv = trainer.advantages(batch, valid)
    trainer.optimize(batch, before, adv, valid)
    after = trainer.recompute_logprobs(batch)
    moved = 0
    for b, t in (adv != 0).nonzero().tolist():
        turn = torch.zeros_like(adv)
        turn[b, t] = 1.0
        tokens = (batch.token_values(turn) > 0) & batch.model_mask
        change = float((after - before)[tokens].sum())
        assert change * float(adv[b, t]) > 0, (b, t, float(adv[b, t]), change)
        moved += 1
    assert moved >= 2 and (adv > 0).any() and (adv < 0).any()  # the forced good reply and a sampled bad one


def test_an_unknown_advantage_is_refused(tiny_path, relu_small, relu_solution, tmp_path):
    trainer = RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path, samples=4, save_rollouts=False),
                        force_responses=force_solution(relu_solution))
    batch = build_batch(trainer.rollout(0), trainer.pad_token_id, trainer.settings.loss.padding_side)
    valid, _ = trainer.select(batch, trainer.recompute_logprobs(batch), 0)
    assert trainer.advantages(batch, valid)[valid].any()
    trainer.settings = trainer.settings.changed(advantage="ppo")
    with pytest.raises(ValueError, match="advantage must be one of"):
        trainer.advantages(batch, valid)


@pytest.mark.slow
def test_kl_penalty_pulls_a_drifted_policy_back_when_every_advantage_is_zero(tiny_path, relu_small, tmp_path):
    """A group whose samples all fail alike has zero advantages: the policy gradient holds nothing then, and
    only the KL penalty moves the policy, towards the model the run started from (a frozen copy, kept
    as loaded when the trainer resumes from a checkpoint)."""
    trainer = RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path, kl_coef=1.0, lr=1e-3, mini_batches=1,
                                                                 save_rollouts=False))
    start = weights(trainer)
    reference = {k: p.detach().cpu() for k, p in trainer.reference.named_parameters()}
    assert all(torch.equal(reference[k], start[k]) for k in start)
    assert not any(p.requires_grad for p in trainer.reference.parameters())
    with torch.no_grad():  # the policy drifts away from its reference
        generator = torch.Generator().manual_seed(0)
        for p in trainer.params:
            p.add_(0.05 * torch.randn(p.shape, generator=generator).to(p.device))
    trainer._ensure_scheduler(1)
    batch = build_batch(trainer.rollout(0), trainer.pad_token_id, trainer.settings.loss.padding_side)
    old, ref = trainer.recompute_logprobs(batch), trainer.recompute_logprobs(batch, trainer.reference)
    valid = batch.exists.clone()
    zero = torch.zeros(valid.shape)
    drifted = weights(trainer)
    trainer.optimize(batch, old, zero, valid)  # no reference given: nothing to learn from
    assert all(torch.equal(v, drifted[k]) for k, v in weights(trainer).items())
    opt = trainer.optimize(batch, old, zero, valid, ref)
    assert opt["sums"]["ref_kl"] > 0
    after = trainer.recompute_logprobs(batch)
    tokens = batch.model_mask
    assert float((after - ref)[tokens].abs().mean()) < float((old - ref)[tokens].abs().mean())
    assert all(torch.equal(p.cpu(), start[k]) for k, p in trainer.reference.named_parameters())  # never trained

    trainer.save_checkpoint()
    resumed = RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path, kl_coef=1.0, resume_from="latest"))
    assert all(torch.equal(p.cpu(), start[k]) for k, p in resumed.reference.named_parameters())
    assert any(not torch.equal(v, start[k]) for k, v in weights(resumed).items())
    assert "ref_kl" in resumed.step() and RLTrainer(str(tiny_path), [relu_small], **settings(tmp_path)).reference is None


def test_lora_trains_only_the_adapter(tiny_path, relu_small, relu_solution, tmp_path):
    trainer = RLTrainer(str(tiny_path), [relu_small], force_responses=force_solution(relu_solution),
                        **settings(tmp_path, turns=1, lora={"r": 4, "target_modules": ["q_proj", "v_proj"]}))
    start = weights(trainer)
    trainer.step()
    end = weights(trainer)
    changed = {k for k in start if not torch.equal(start[k], end[k])}
    assert changed and all("lora_" in k for k in changed)


def test_rl_after_a_trainer_at_another_precision_in_the_same_process(tiny_path, relu_small, relu_solution, tmp_path):
    """SFT (TRL's trainer, bf16 on a GPU) and then RL in one process, as in a notebook's kernel or the
    mini run's phases in one call: the RL trainer starts accelerate's state afresh instead of refusing it."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()  # as in a fresh process (earlier tests here set it up already)...
    assert Accelerator(mixed_precision="bf16", cpu=True).mixed_precision == "bf16"  # ...where SFT came first
    trainer = RLTrainer(str(tiny_path), [relu_small], force_responses=force_solution(relu_solution),
                        **settings(tmp_path, turns=1))
    assert trainer.accelerator.mixed_precision == "no"
    start = weights(trainer)
    trainer.step()
    assert any(not torch.equal(start[k], v) for k, v in weights(trainer).items())


def test_run_log_keeps_the_last_row_of_a_step_and_wandb_needs_its_package(tmp_path, monkeypatch):
    log = RunLog(tmp_path)
    for step, loss in ((1, 0.5), (2, float("nan")), (2, 0.25)):  # step 2 written again after a resume
        log.write({"step": step, "loss": loss})
    assert read_log(tmp_path) == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}]
    with open(tmp_path / "metrics.csv", newline="") as f:
        assert [r["loss"] for r in csv.DictReader(f)] == ["0.5", "", "0.25"]
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails, installed or not
    with pytest.raises(RuntimeError, match="wandb is not installed"):
        RunLog(tmp_path / "w", wandb=True)
