"""The arm's trainer: RLTrainer with shuffled mini-batches and all-alike groups left out, and the continued-SFT
control's step on the same adapter, optimizer and state files.

    trainer = build_trainer(settings, model, tokenizer, tasks)    # an ArmTrainer, LoRA on every linear layer
    row = trainer.train(trainer.state.step + 1)[-1] | trainer.extra  # RL: one step, its log row
    row = trainer.sft_step(conversations)                         # control: the same number of updates

What RLTrainer already does and is kept: AdamW with the settings' betas and a linear warm-up (lr_factor),
pre-clip gradient norms (clip_grad_norm_'s return), the count of turns without advantage. What this adds,
without touching rl/trainer.py: (1) the step's sequences shuffled before they are cut into mini-batches
(RLTrainer cuts them in rollout order, so one update saw two prompts' groups), from a generator seeded by
the step, so a resumed run draws the same order; (2) groups whose every valid turn has zero advantage are
no longer counted in the update's sequence mean (they add no gradient, but diluted the others'), and
their number is logged; (3) every update's pre-clip norm, not only their mean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import torch

from drk_lab.rl.rollout import tasks_of_step
from drk_lab.rl.trainer import RLTrainer


class ArmTrainer(RLTrainer):
    """RLTrainer with the changes of the module docstring; `extra` holds the last step's added metrics."""

    drop_alike_groups = True
    extra: dict = {}

    def select(self, batch, old_logp, step):
        valid, metrics = super().select(batch, old_logp, step)
        adv = self.advantages(batch, valid)
        alike = torch.zeros(batch.rewards.shape[0], dtype=torch.bool)
        groups = batch.group.unique()
        for g in groups:
            rows = batch.group == g
            alike |= rows & bool((adv[rows][valid[rows]].abs() < 1e-8).all())
        n_alike = int(batch.group[alike].unique().numel())
        solved = [float(batch.correct[batch.group == g].any(-1).float().mean()) for g in groups]
        self.extra = {"groups": len(groups), "groups_all_alike": n_alike,
                      "groups_all_alike_frac": n_alike / max(len(groups), 1),
                      "groups_all_solved": sum(s == 1.0 for s in solved), "groups_none_solved": sum(s == 0.0 for s in solved)}
        if self.drop_alike_groups:
            valid = valid & ~alike[:, None]
        return valid, metrics

    def update_order(self) -> torch.Generator:
        """The generator of this step's shuffles: seeded by the step, so a resumed run draws the same order."""
        return torch.Generator().manual_seed(self._seed(self.state.step, 3))

    @contextlib.contextmanager
    def generation_policy(self):
        """As RLTrainer's, but the static-cache sampler gets the model inside peft's wrapper (its own layers, the
        LoRA modules in place): it walks model.model.layers, which a PeftModel does not have."""
        from trl.models.utils import unwrap_model_for_generation

        from drk_lab.rl.sampler import StaticCachePolicy

        r = self.settings.rollouts
        if r.sampler != "static":
            with super().generation_policy() as policy:
                yield policy
            return
        unwrapped_model = unwrap_model_for_generation(self.model, self.accelerator,
                                                      gradient_checkpointing_kwargs={"use_reentrant": False})
        with unwrapped_model as unwrapped, self.accelerator.autocast():
            inner = unwrapped.get_base_model() if hasattr(unwrapped, "get_base_model") else unwrapped
            yield StaticCachePolicy(inner, self.tokenizer, device=self.accelerator.device, max_new_tokens=r.max_new_tokens,
                                    batch_size=r.generation_batch_size, chat_template_kwargs=r.chat_template_kwargs,
                                    cuda_graph=r.cuda_graph)

    def optimize(self, batch, old_logp, adv, valid, ref_logp=None):
        order = torch.randperm(batch.num_sequences, generator=self.update_order())
        shuffled = dataclasses.replace(batch, **{name: getattr(batch, name)[order] for name in batch.PER_SEQUENCE})
        opt = super().optimize(shuffled, old_logp[order], adv, valid, None if ref_logp is None else ref_logp[order])
        self.extra |= norm_metrics(opt["grad_norms"], self.settings.loss.grad_clip)
        return opt

    # -- the continued-SFT control -----------------------------------------------------------------
    def sft_step(self, conversations: list[tuple[list[int], list[bool]]]) -> dict:
        """One control step: `conversations` (token ids, trained mask) shuffled into `mini_batches` updates, each
        the mean loss over its assistant tokens; the same AdamW, schedule and clip as an RL step."""
        started, loss_settings = time.perf_counter(), self.settings.loss
        self._ensure_scheduler(None)
        lr = self.scheduler.get_last_lr()[0]
        order = torch.randperm(len(conversations), generator=self.update_order()).tolist()
        losses, norms, device = [], [], self.accelerator.device
        self.model.train()
        for mini in torch.tensor_split(torch.tensor(order), loss_settings.mini_batches):
            rows = [conversations[i] for i in mini.tolist()]
            tokens = sum(sum(mask[1:]) for _, mask in rows)
            if not tokens:
                continue
            total = 0.0
            for chunk in range(0, len(rows), loss_settings.micro_batch_size):
                ids, mask = padded(rows[chunk:chunk + loss_settings.micro_batch_size], self.pad_token_id, device)
                with self.accelerator.autocast():
                    logits = self.model(input_ids=ids, attention_mask=(mask >= 0).long()).logits[:, :-1].float()
                    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
                    loss = (nll * (mask[:, 1:] > 0)).sum() / tokens
                self.accelerator.backward(loss)
                total += float(loss.detach())
            norms.append(float(self.accelerator.clip_grad_norm_(self.params, loss_settings.grad_clip)))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(total)
        self.state.step += 1
        return {"step": self.state.step, "lr": lr, "sft_loss": sum(losses) / max(len(losses), 1),
                "optimizer_steps": len(norms), "grad_norm": sum(norms) / len(norms) if norms else math.nan,
                **norm_metrics(norms, loss_settings.grad_clip), "time/step_s": time.perf_counter() - started}


def norm_metrics(norms: list[float], clip: float) -> dict:
    """Every update's pre-clip gradient norm, their largest and the share the clip cut."""
    return {"grad_norms": norms, "grad_norm_max": max(norms, default=math.nan),
            "clipped_frac": sum(n > clip for n in norms) / len(norms) if norms else math.nan}


def padded(rows, pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) right-padded: mask 1 on trained tokens, 0 on context, -1 on padding."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, (row_ids, row_mask) in enumerate(rows):
        ids[i, :len(row_ids)] = torch.tensor(row_ids)
        mask[i, :len(row_mask)] = torch.tensor(row_mask, dtype=torch.long)
    return ids.to(device), mask.to(device)


def assistant_tokens(tokenizer, messages: list[dict], max_length: int) -> tuple[list[int], list[bool]]:
    """A conversation's chat-template tokens and which are trained: the assistant replies (not one marked
    "train": False, a repair row's planted bug), found as the tokens each reply adds to the rendered prefix."""
    def encode(upto: int, generation: bool) -> list[int]:
        text = tokenizer.apply_chat_template([dict(role=m["role"], content=m["content"]) for m in messages[:upto]],
                                             tokenize=False, add_generation_prompt=generation)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    ids = encode(len(messages), False)
    mask = [False] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("train") is not False:
            start, end = len(encode(i, True)), len(encode(i + 1, False))
            mask[start:end] = [True] * (end - start)
    return ids[:max_length], mask[:max_length]


def control_rows(conversations: list, step: int, per_step: int, seed: int) -> list:
    """The control's conversations of `step`: passes over the set, each in a seeded order (as RL's prompts)."""
    return tasks_of_step(conversations, step, per_step, seed)


def rl_settings(settings, on_cpu: bool):
    """RLSettings of the arm's settings (experiments/rl_arm/settings.py)."""
    from drk_lab.rl.settings import RLSettings

    m, r, u, a = settings.model, settings.rollouts, settings.update, settings.arm
    evaluation = {"device": "cpu"} if on_cpu else {}
    evaluation |= {"correctness_trials": r.correctness_trials}
    if not r.timing:
        evaluation |= {"timing": False, "profile": False}
    elif not on_cpu:
        evaluation |= {"compile_baseline": False}
    return RLSettings().changed(
        lora={"r": m.lora_r, "lora_alpha": m.lora_alpha, "lora_dropout": 0.0, "target_modules": "all-linear"},
        seed=a.seed, prompts_per_step=r.prompts_per_step, samples=r.samples, turns=r.turns,
        temperature=r.temperature, reward_fn=r.reward, max_new_tokens=m.max_new_tokens,
        max_context_tokens=m.max_context_tokens, feedback_tokens=m.feedback_tokens,
        sampler="static", cuda_graph=m.cuda_graph and not on_cpu, generation_batch_size=4096,
        waves=r.waves, pipelined=r.pipelined,
        eval_kwargs=evaluation, advantage=u.advantage, mini_batches=u.mini_batches,
        micro_batch_size=u.micro_batch_size, lr=u.lr, betas=tuple(u.betas), warmup_steps=u.warmup_steps,
        grad_clip=u.grad_clip, kl_coef=u.kl_coef, prs=u.prs, mrs=u.mrs, save_rollouts=False)


def build_trainer(settings, model, tokenizer, tasks, force_responses=None) -> ArmTrainer:
    on_cpu = not torch.cuda.is_available()
    trainer = ArmTrainer(model, tasks, rl_settings(settings, on_cpu), tokenizer=tokenizer,
                         force_responses=force_responses)
    trainer.drop_alike_groups = settings.update.drop_alike_groups
    return trainer
