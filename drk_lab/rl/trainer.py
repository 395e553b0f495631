"""Multi-turn RL for kernel writers: a thin training loop on accelerate.

    trainer = RLTrainer("Qwen/Qwen3-8B", drk.builtin_tasks(level=1), samples=16, turns=3, lr=1e-6)
    trainer.train(num_steps=100)

Settings are one frozen RLSettings (rl/settings.py), given whole or as keyword arguments of the same
names; `trainer.settings` holds them (saved in each checkpoint's trainer.json and given to the run log
and wandb as the run's config).

One step: rollouts (collect_rollouts: the model itself, unwrapped, samples at `temperature` against
KernelEnv; evaluations run concurrently) -> token batch -> log-probs recomputed by the trained model
(no gradient; like every log-prob here, of the model at that temperature: the policy that sampled)
-> MRS rejects trajectories whose rollout log-probs drifted -> PRS rejects lazy turns
-> turn-level TRLOO (or multi-turn GRPO) advantages over the valid turns, spread onto each turn's
model tokens -> clipped-ratio loss (rl/loss.py; with kl_coef, plus a KL penalty towards the starting
model, whose log-probs a frozen copy computes) in micro-batches -> gradient clip -> AdamW step and
LR schedule. Each step appends one row to the run log (rl/runlog.py) and, at the interval, saves a
checkpoint (accelerate's save_state: weights or adapter, optimizer, scheduler, RNG states, step).

Why not TRL's GRPOTrainer (checked against trl 1.16): it takes one scalar reward per completion from
its reward functions and computes group-normalised advantages of shape [B] inside
`_generate_and_score_completions` (a private method of some 500 lines); `rollout_func` (experimental)
can return a multi-turn completion with an `env_mask`, but not per-turn rewards. TRLOO needs
per-turn returns with a leave-one-out baseline over the samples whose turn t is still valid, and the
validity itself comes from MRS (trajectories, decided from the trainer's own log-probs before any
advantage, since rejected samples must leave the group baselines) and PRS (single turns): neither
fits its hooks without rewriting that method. Its nearest piece, the vLLM importance-sampling
correction (`vllm_importance_sampling_mode="sequence_mask"`), runs only with vLLM rollouts, masks
sequences after the advantages were computed and has no per-token veto. So the loop is written out
here (about 300 lines); TRL is used where it fits:
`selective_log_softmax` and `entropy_from_logits` (memory-frugal log-probs and entropy),
`unwrap_model_for_generation` (generation from a DDP/DeepSpeed-wrapped model), and
`disable_dropout_in_model` (so trainer and rollout log-probs agree). For reference, its loss pieces
match ours: `loss_type="luspo"` aggregates the same "sum per sequence, mean over sequences", and its
`delta` clamp of the ratio acts as the dual clip for negative advantages.

Multi-GPU: `accelerate launch --num_processes K script.py` runs K copies; each takes its share of
the step's tasks (all samples of a task stay together, so the group baselines are local), the model
is wrapped by accelerate (DDP), the loss is normalised by the global count of trained sequences so
that the averaged gradient is the global sequence mean, and metrics are summed over processes.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from drk_lab.agent.context import episode_schedule, stts_schedule
from drk_lab.agent.trajectory import write_jsonl
from drk_lab.rl.advantages import batch_advantages, returns_to_go
from drk_lab.rl.batch import SequenceBatch, build_batch
from drk_lab.rl.filters import mismatch_rejection, profiling_rejection_with_metrics
from drk_lab.rl.logprobs import batch_logprobs, sequence_logprobs
from drk_lab.rl.loss import clipped_policy_loss, masked_mean
from drk_lab.rl.rollout import TokenPolicy, collect_rollouts, tasks_of_step
from drk_lab.rl.sampler import StaticCachePolicy
from drk_lab.rl.settings import RLSettings
from drk_lab.rl.runlog import LOSS_METRICS, RunLog, step_row

CHECKPOINT_PREFIX = "step_"
GC_KWARGS = {"use_reentrant": False}


def lr_factor(step: int, schedule: str, warmup_steps: int, total_steps: int | None, min_lr_ratio: float) -> float:
    """Multiplier of the base LR at optimizer step `step`: linear warmup, then constant, or cosine to min_lr_ratio."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {schedule!r}")
    if schedule == "cosine" and not total_steps:
        raise ValueError("a cosine schedule needs total_steps (or train(num_steps))")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class TrainerState:
    step: int = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])


def _load_model(model_or_path, tokenizer, dtype: str | None):
    model = model_or_path
    if isinstance(model_or_path, (str, Path)):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_or_path)
        model = AutoModelForCausalLM.from_pretrained(model_or_path, **kwargs)
    if tokenizer is None:
        raise ValueError("RLTrainer: pass the tokenizer along with a model object")
    return model, tokenizer


class RLTrainer:
    """See the module docstring. `model_or_path`: a model folder or hub name (loaded with its tokenizer), or a
    model object along with `tokenizer`."""

    def __init__(self, model_or_path, tasks, settings: RLSettings | None = None, *, tokenizer=None, accelerator=None,
                 force_responses=None, **changes):
        """`settings` (default RLSettings()) with `changes` applied by name; `accelerator` defaults to
        Accelerator(mixed_precision=settings.mixed_precision), accelerate's global state started afresh if an
        earlier trainer here (TRL's bf16 SFT on a GPU) set another precision, which Accelerator cannot change;
        `force_responses(task, sample, turn)` may replace replies by given text (see collect_rollouts)."""
        self.settings = s = (settings or RLSettings()).changed(**changes)
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState
        from accelerate.utils import set_seed
        from trl.trainer.utils import disable_dropout_in_model

        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("RLTrainer needs at least one task")
        if (accelerator is None and AcceleratorState._shared_state
                and AcceleratorState().mixed_precision != s.mixed_precision):
            AcceleratorState._reset_state()
        self.accelerator = accelerator or Accelerator(mixed_precision=s.mixed_precision)
        r = s.rollouts
        if r.temperature <= 0 or (r.temperature != 1 and (r.top_p < 1 or r.top_k)):
            # the trainer scores softmax(logits / T): a truncated or greedy sampler draws from another policy
            raise ValueError(f"temperature={r.temperature} with top_p={r.top_p}, top_k={r.top_k}: RL samples at a "
                             "temperature above 0, and away from 1 without top-p or top-k truncation")
        if r.prompts_per_step < self.accelerator.num_processes:
            raise ValueError(f"prompts_per_step={r.prompts_per_step} is fewer than the "
                             f"{self.accelerator.num_processes} processes")
        set_seed(s.seed)
        model, self.tokenizer = _load_model(model_or_path, tokenizer, s.model_dtype)
        # the KL penalty's reference: the model as it starts, copied before LoRA and before a checkpoint is
        # loaded, so that a resumed run is still pulled towards where the whole run began
        self.reference = (copy.deepcopy(model).requires_grad_(False).eval().to(self.accelerator.device)
                          if s.loss.kl_coef else None)
        if s.lora:
            from peft import LoraConfig, get_peft_model

            lora = s.lora if isinstance(s.lora, LoraConfig) else LoraConfig(task_type="CAUSAL_LM", **s.lora)
            model = get_peft_model(model, lora)
        disable_dropout_in_model(model)
        if s.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=GC_KWARGS)
            if s.lora:
                model.enable_input_require_grads()
        self.params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(self.params, lr=s.loss.lr, betas=tuple(s.loss.betas),
                                      weight_decay=s.loss.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.scheduler = self.last_rollout = None  # last_rollout: the latest step's, for metrics a caller adds
        self.state = TrainerState()
        self.force_responses = force_responses
        self.log: RunLog | None = None
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        if s.resume_from:
            self.load_checkpoint(s.resume_from)

    # -- schedule and checkpoints ----------------------------------------------------------------
    def _ensure_scheduler(self, num_steps: int | None, total: int | None = None) -> None:
        if self.scheduler is not None:
            return
        loss = self.settings.loss
        total = total or loss.total_steps or (num_steps * loss.mini_batches if num_steps else None)
        self.schedule_total = total
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer.optimizer, lambda step: lr_factor(
            step, loss.lr_schedule, loss.warmup_steps, total, loss.min_lr_ratio))
        self.accelerator.register_for_checkpointing(self.scheduler, self.state)

    def checkpoint_path(self, step: int) -> Path:
        if not self.settings.checkpoint_dir:
            raise ValueError("pass checkpoint_dir to save checkpoints")
        return Path(self.settings.checkpoint_dir) / f"{CHECKPOINT_PREFIX}{step:06d}"

    def save_checkpoint(self) -> Path:
        self._ensure_scheduler(None)
        path = self.checkpoint_path(self.state.step)
        self.accelerator.save_state(str(path))
        if self.accelerator.is_main_process:
            (path / "trainer.json").write_text(json.dumps(
                {"step": self.state.step, "schedule_total": self.schedule_total,
                 "settings": self.settings.to_dict()}, indent=1, default=str))
        self.accelerator.wait_for_everyone()
        return path

    def load_checkpoint(self, path: str) -> None:
        if path == "latest":
            found = sorted(Path(self.settings.checkpoint_dir or ".").glob(f"{CHECKPOINT_PREFIX}*/trainer.json"))
            if not found:
                raise FileNotFoundError(f"no checkpoint in {self.settings.checkpoint_dir}")
            path = str(found[-1].parent)
        saved = json.loads((Path(path) / "trainer.json").read_text())
        self._ensure_scheduler(None, saved.get("schedule_total"))
        self.accelerator.load_state(path)

    # -- one step --------------------------------------------------------------------------------
    def step_tasks(self, step: int) -> list:
        """This process's share of the tasks of `step` (rollout.tasks_of_step)."""
        k = self.settings.rollouts.prompts_per_step
        chosen = tasks_of_step(self.tasks, step, k, self.settings.seed, self.settings.rollouts.shuffle_tasks)
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        return chosen[rank * k // world:(rank + 1) * k // world]

    def schedule(self):
        r = self.settings.rollouts
        return stts_schedule(**r.stts) if r.stts else episode_schedule(r.turns, r.context_turns, r.context_strategy)

    def _seed(self, step: int, salt: int) -> int:
        return ((self.settings.seed * 1_000_003 + step) * 1009 + self.accelerator.process_index) * 7 + salt

    @contextlib.contextmanager
    def generation_policy(self):
        """The model as it is now as a policy (rollouts, evaluations between steps); no gradient checkpointing inside."""
        from trl.models.utils import unwrap_model_for_generation

        unwrapped_model = unwrap_model_for_generation(self.model, self.accelerator,
                                                      gradient_checkpointing_kwargs=GC_KWARGS)
        r = self.settings.rollouts
        with unwrapped_model as unwrapped, self.accelerator.autocast():
            static = r.sampler == "static"
            policy_class, extra = (StaticCachePolicy, {"cuda_graph": r.cuda_graph}) if static else (TokenPolicy, {})
            yield policy_class(unwrapped, self.tokenizer, device=self.accelerator.device, max_new_tokens=r.max_new_tokens,
                               batch_size=r.generation_batch_size, chat_template_kwargs=r.chat_template_kwargs, **extra)

    def rollout(self, step: int):
        r = self.settings.rollouts
        sampling = {"temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k, "max_new_tokens": r.max_new_tokens}
        with self.generation_policy() as policy:
            return collect_rollouts(
                policy, self.step_tasks(step), samples=r.samples, schedule=self.schedule(), reward_fn=r.reward_fn,
                sampling=sampling, seed=self._seed(step, 1), feedback_tokens=r.feedback_tokens,
                max_prompt_tokens=r.max_prompt_tokens, max_context_tokens=r.max_context_tokens,
                system_prompt=r.system_prompt, force_responses=self.force_responses, max_workers=r.max_workers,
                waves=r.waves, pipelined=r.pipelined, **(r.eval_kwargs or {}))

    def _micro_batches(self, index: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(index, self.settings.loss.micro_batch_size)) or [index]

    def recompute_logprobs(self, batch: SequenceBatch, model=None) -> torch.Tensor:
        """The trained model's (or `model`'s: the reference) log-probabilities of the batch's tokens, without
        gradient ([N, L], on CPU)."""
        return batch_logprobs(self.model if model is None else model, batch,
                              micro_batch_size=self.settings.loss.micro_batch_size,
                              device=self.accelerator.device, autocast=self.accelerator.autocast,
                              temperature=self.settings.rollouts.temperature)

    def select(self, batch: SequenceBatch, old_logp: torch.Tensor, step: int) -> tuple[torch.Tensor, dict]:
        """valid[B, T]: turns that exist, in trajectories MRS keeps, not rejected by PRS; and their metrics."""
        f = self.settings.filters
        metrics = {}
        keep_traj = torch.ones(batch.rewards.shape[0], dtype=torch.bool)
        train_flat, mask = batch.per_trajectory(old_logp)
        rollout_flat, _ = batch.per_trajectory(batch.rollout_logp)
        keep, mrs_metrics = mismatch_rejection(train_flat, rollout_flat, mask, f.mrs_lower, f.mrs_upper, f.mrs_token_veto)
        metrics.update(mrs_metrics)
        if f.mrs:
            keep_traj = keep
        valid = batch.exists & keep_traj[:, None]
        if f.prs:
            generator = torch.Generator().manual_seed(self._seed(step, 2))
            keep_turn, prs_metrics = profiling_rejection_with_metrics(
                batch.coverage[batch.exists], batch.correct[batch.exists], f.prs_threshold, f.prs_width, generator,
                hacked=batch.hacked[batch.exists], speedup=batch.speedup[batch.exists],
                keep_if_speedup=f.prs_keep_if_speedup)
            prs_keep = torch.ones_like(valid)
            prs_keep[batch.exists] = keep_turn
            valid &= prs_keep
            metrics.update(prs_metrics)
        return valid, metrics

    def advantages(self, batch: SequenceBatch, valid: torch.Tensor) -> torch.Tensor:
        loss = self.settings.loss
        returns = returns_to_go(batch.rewards, batch.exists if loss.returns_include_rejected else valid, loss.gamma)
        return batch_advantages(returns, batch.group, valid, loss.advantage, std_normalize=loss.std_normalize)

    def _global_sum(self, value: float) -> float:
        return float(self.accelerator.reduce(torch.tensor([float(value)], device=self.accelerator.device), "sum"))

    def optimize(self, batch: SequenceBatch, old_logp: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor,
                 ref_logp: torch.Tensor | None = None) -> dict:
        """Mini-batch optimizer steps over the batch (with the KL penalty towards `ref_logp` when given);
        returns local metric sums and the grad norms."""
        acc, settings = self.accelerator, self.settings.loss
        token_adv = batch.token_values(adv)
        loss_mask = batch.model_mask & (batch.token_values(valid.float()) > 0)
        trained = loss_mask.any(-1)
        names = (*LOSS_METRICS, "ref_kl") if ref_logp is not None else LOSS_METRICS
        sums = {name: 0.0 for name in ("loss", "entropy", "tokens", *names)}
        grad_norms, forward_tokens = [], 0
        self.model.train()
        for mini in torch.tensor_split(torch.arange(batch.num_sequences), settings.mini_batches):
            count = self._global_sum(float(trained[mini].sum()))
            if count == 0:
                continue
            dummy = mini.numel() == 0  # this process has no rows here: a zero-loss pass keeps DDP in step
            micro = self._micro_batches(mini if not dummy else torch.arange(1))
            for i, index in enumerate(micro):
                rows = {k: v.to(acc.device) for k, v in batch.rows(index).items()}
                width = rows["input_ids"].shape[1]
                cut = slice(None, width) if batch.padding_side == "right" else slice(-width, None)
                mask = loss_mask[index][:, cut].to(acc.device) & (not dummy)
                # gradients are all-reduced on the last micro-batch only
                with acc.no_sync(self.model) if i < len(micro) - 1 else contextlib.nullcontext():
                    with acc.autocast():
                        logp, entropy = sequence_logprobs(self.model, rows, entropy=True,
                                                          temperature=self.settings.rollouts.temperature)
                        loss, m = clipped_policy_loss(
                            logp, old_logp[index][:, cut].to(acc.device), token_adv[index][:, cut].to(acc.device),
                            mask, eps_low=settings.eps_low, eps_high=settings.eps_high, dual_clip=settings.dual_clip,
                            num_sequences=count / acc.num_processes, kl_coef=settings.kl_coef,
                            ref_logp=None if ref_logp is None else ref_logp[index][:, cut].to(acc.device))
                    acc.backward(loss)
                forward_tokens += int(rows["attention_mask"].sum())
                tokens = float(m["tokens"])
                sums["loss"] += float(loss.detach())  # summed over processes, divided by their number: the global mean
                sums["tokens"] += tokens
                sums["entropy"] += float(masked_mean(entropy, mask)) * tokens
                for name in names:
                    sums[name] += float(m[name]) * tokens
            grad_norms.append(float(acc.clip_grad_norm_(self.params, settings.grad_clip)))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {"sums": sums, "grad_norms": grad_norms, "forward_tokens": forward_tokens,
                "trained_sequences": float(trained.sum())}

    def step(self) -> dict:
        """One RL step (rollouts, filters, advantages, optimizer steps); returns the logged row."""
        acc = self.accelerator
        self._ensure_scheduler(None)
        step = self.state.step
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        rollout = self.last_rollout = self.rollout(step)
        rollout_s = time.perf_counter() - started
        batch = build_batch(rollout, self.pad_token_id, self.settings.loss.padding_side)
        train_started = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]  # what this step's (first) optimizer step uses
        old_logp = self.recompute_logprobs(batch)
        valid, filter_metrics = self.select(batch, old_logp, step)
        adv = self.advantages(batch, valid)
        ref_logp = self.recompute_logprobs(batch, self.reference) if self.reference is not None else None
        opt = self.optimize(batch, old_logp, adv, valid, ref_logp)
        training_s = time.perf_counter() - train_started
        self.state.step += 1
        row = step_row(acc, self.state.step, lr, rollout, batch, valid, adv,
                       filter_metrics, opt, {"rollout_s": rollout_s, "training_s": training_s,
                                             "step_s": time.perf_counter() - started})
        s = self.settings
        if s.log_dir and acc.is_main_process:
            if self.log is None:
                self.log = RunLog(s.log_dir, wandb=s.wandb, wandb_project=s.wandb_project, wandb_mode=s.wandb_mode,
                                  wandb_run_name=s.wandb_run_name, settings=s.to_dict())
            self.log.write(row)
        if self.settings.log_dir and self.settings.save_rollouts:
            suffix = f"_rank{acc.process_index}" if acc.num_processes > 1 else ""
            name = f"step_{self.state.step:06d}{suffix}.jsonl"
            write_jsonl(rollout.trajectories, Path(self.settings.log_dir) / "rollouts" / name, append=False)
        if self.settings.checkpoint_every and self.state.step % self.settings.checkpoint_every == 0:
            self.save_checkpoint()
        return row

    def train(self, num_steps: int, on_step=None) -> list[dict]:
        """Steps until state.step reaches num_steps (so a resumed run continues where it stopped);
        on_step(row) is called after each step (a notebook's live table, for instance)."""
        self._ensure_scheduler(num_steps)
        rows = []
        while self.state.step < num_steps:
            rows.append(self.step())
            if on_step is not None:
                on_step(rows[-1])
        if self.log is not None:
            self.log.close()
            self.log = None
        return rows

    def export(self, path: str | Path) -> None:
        """The trained model (or LoRA adapter) and tokenizer in Hugging Face format."""
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.accelerator.unwrap_model(self.model).save_pretrained(path)
            self.tokenizer.save_pretrained(path)
