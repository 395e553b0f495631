"""Multi-turn RL for kernel writers (DESIGN §9): a thin training loop on accelerate.

    trainer = RLTrainer("Qwen/Qwen3-8B", tasks=drk.builtin_tasks(level=1), config=RLConfig(samples=16, turns=3))
    trainer.train(num_steps=100)

One step: rollouts (collect_rollouts: the model itself, unwrapped, samples at temperature 1 against
KernelEnv; evaluations run concurrently) -> token batch -> log-probs recomputed by the trained model
(no gradient) -> MRS rejects trajectories whose rollout log-probs drifted -> PRS rejects lazy turns
-> turn-level TRLOO (or multi-turn GRPO) advantages over the valid turns, spread onto each turn's
model tokens -> clipped-ratio loss (rl/loss.py) in micro-batches -> gradient clip -> AdamW step and
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
import dataclasses
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from drk_lab.context import episode_schedule, stts_schedule, write_jsonl
from drk_lab.rl.advantages import advantages_from_returns, returns_to_go
from drk_lab.rl.config import LRSchedule, RLConfig
from drk_lab.rl.filters import mismatch_rejection, profiling_rejection_with_metrics
from drk_lab.rl.loss import clipped_policy_loss, masked_mean
from drk_lab.rl.rollout import SequenceBatch, TokenPolicy, build_batch, collect_rollouts
from drk_lab.rl.runlog import LOSS_METRICS, RunLog, step_row

CHECKPOINT_PREFIX = "step_"
GC_KWARGS = {"use_reentrant": False}


@dataclass
class TrainerState:
    step: int = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])


def sequence_logprobs(model, rows: dict, entropy: bool = False, return_logits: bool = False):
    """Log-probability of every token given the ones before it ([n, L]; 0 at position 0), optionally
    the entropy of each predictive distribution (no gradient) and the logits."""
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    logits = model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"],
                   position_ids=rows["position_ids"], use_cache=False).logits
    shifted = logits[:, :-1]
    logp = torch.nn.functional.pad(selective_log_softmax(shifted, rows["input_ids"][:, 1:]).float(), (1, 0))
    out = [logp]
    if entropy:
        with torch.no_grad():
            out.append(torch.nn.functional.pad(entropy_from_logits(shifted.detach()).float(), (1, 0)))
    if return_logits:
        out.append(logits)
    return out[0] if len(out) == 1 else tuple(out)


def _load_model(model, tokenizer, dtype: str | None):
    if isinstance(model, (str, Path)):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model, **kwargs)
    if tokenizer is None:
        raise ValueError("RLTrainer: pass the tokenizer along with a model object")
    return model, tokenizer


class RLTrainer:
    """See the module docstring. `force_responses(task, sample, turn) -> str | None` replaces replies
    (see collect_rollouts); `accelerator` defaults to one built from the config."""

    def __init__(self, model, tokenizer=None, tasks=(), config: RLConfig | None = None, *, accelerator=None,
                 force_responses=None):
        from accelerate import Accelerator
        from accelerate.utils import set_seed
        from trl.trainer.utils import disable_dropout_in_model

        self.config = config = config or RLConfig()
        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("RLTrainer needs at least one task")
        self.accelerator = accelerator or Accelerator(mixed_precision=config.mixed_precision)
        if config.prompts_per_step < self.accelerator.num_processes:
            raise ValueError(f"prompts_per_step={config.prompts_per_step} is fewer than the "
                             f"{self.accelerator.num_processes} processes")
        set_seed(config.seed)
        model, self.tokenizer = _load_model(model, tokenizer, config.model_dtype)
        if config.lora:
            from peft import LoraConfig, get_peft_model

            lora = config.lora
            if not isinstance(lora, LoraConfig):
                lora = LoraConfig(task_type="CAUSAL_LM", **lora)
            model = get_peft_model(model, lora)
        disable_dropout_in_model(model)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=GC_KWARGS)
            if config.lora:
                model.enable_input_require_grads()
        self.params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(self.params, lr=config.lr, betas=tuple(config.betas),
                                      weight_decay=config.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.scheduler = None
        self.state = TrainerState()
        self.force_responses = force_responses
        self.log: RunLog | None = None
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        if config.resume_from:
            self.load_checkpoint(config.resume_from)

    # -- schedule and checkpoints ----------------------------------------------------------------
    def _ensure_scheduler(self, num_steps: int | None, total: int | None = None) -> None:
        if self.scheduler is not None:
            return
        c = self.config
        total = total or c.total_steps or (num_steps * c.mini_batches if num_steps else None)
        self.schedule_total = total
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer.optimizer, LRSchedule(c.lr_schedule, c.warmup_steps, total, c.min_lr_ratio))
        self.accelerator.register_for_checkpointing(self.scheduler, self.state)

    def checkpoint_path(self, step: int) -> Path:
        if not self.config.checkpoint_dir:
            raise ValueError("set config.checkpoint_dir to save checkpoints")
        return Path(self.config.checkpoint_dir) / f"{CHECKPOINT_PREFIX}{step:06d}"

    def save_checkpoint(self) -> Path:
        self._ensure_scheduler(None)
        path = self.checkpoint_path(self.state.step)
        self.accelerator.save_state(str(path))
        if self.accelerator.is_main_process:
            (path / "trainer.json").write_text(json.dumps(
                {"step": self.state.step, "schedule_total": self.schedule_total,
                 "config": dataclasses.asdict(self.config)}, indent=1, default=str))
        self.accelerator.wait_for_everyone()
        return path

    def load_checkpoint(self, path: str) -> None:
        if path == "latest":
            found = sorted(Path(self.config.checkpoint_dir or ".").glob(f"{CHECKPOINT_PREFIX}*/trainer.json"))
            if not found:
                raise FileNotFoundError(f"no checkpoint in {self.config.checkpoint_dir}")
            path = str(found[-1].parent)
        saved = json.loads((Path(path) / "trainer.json").read_text())
        self._ensure_scheduler(None, saved.get("schedule_total"))
        self.accelerator.load_state(path)

    # -- one step --------------------------------------------------------------------------------
    def step_tasks(self, step: int) -> list:
        """This process's tasks for `step` (a pure function of the step and seed, so resuming repeats it)."""
        n, k = len(self.tasks), self.config.prompts_per_step
        chosen = []
        for j in range(step * k, (step + 1) * k):
            epoch, pos = divmod(j, n)
            order = list(range(n))
            if self.config.shuffle_tasks:
                random.Random(self.config.seed * 7919 + epoch).shuffle(order)
            chosen.append(self.tasks[order[pos]])
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        return chosen[rank * k // world:(rank + 1) * k // world]

    def schedule(self):
        c = self.config
        if c.stts:
            return stts_schedule(**c.stts)
        return episode_schedule(c.turns, c.context_turns, c.context_strategy)

    def _seed(self, step: int, salt: int) -> int:
        return ((self.config.seed * 1_000_003 + step) * 1009 + self.accelerator.process_index) * 7 + salt

    def rollout(self, step: int):
        from trl.models.utils import unwrap_model_for_generation

        c = self.config
        sampling = {"temperature": c.temperature, "top_p": c.top_p, "top_k": c.top_k,
                    "max_new_tokens": c.max_new_tokens}
        unwrapped_model = unwrap_model_for_generation(self.model, self.accelerator,
                                                      gradient_checkpointing_kwargs=GC_KWARGS)
        with unwrapped_model as unwrapped, self.accelerator.autocast():
            policy = TokenPolicy(unwrapped, self.tokenizer, device=self.accelerator.device,
                                 max_new_tokens=c.max_new_tokens, batch_size=c.generation_batch_size,
                                 chat_template_kwargs=c.chat_template_kwargs)
            return collect_rollouts(
                policy, self.step_tasks(step), samples=c.samples, schedule=self.schedule(), reward_fn=c.reward_fn,
                sampling=sampling, seed=self._seed(step, 1), feedback_tokens=c.feedback_tokens,
                max_prompt_tokens=c.max_prompt_tokens, max_context_tokens=c.max_context_tokens,
                system_prompt=c.system_prompt, force_responses=self.force_responses, max_workers=c.max_workers,
                **c.eval_kwargs)

    def _micro_batches(self, index: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(index, self.config.micro_batch_size)) or [index]

    @torch.no_grad()
    def recompute_logprobs(self, batch: SequenceBatch) -> torch.Tensor:
        """The trained model's log-probabilities of the batch's tokens, without gradient ([N, L], on CPU)."""
        out = torch.zeros_like(batch.rollout_logp)
        for index in self._micro_batches(torch.arange(batch.num_sequences)):
            rows = {k: v.to(self.accelerator.device) for k, v in batch.rows(index).items()}
            with self.accelerator.autocast():
                logp = sequence_logprobs(self.model, rows).cpu()
            width = logp.shape[1]
            if batch.padding_side == "right":
                out[index, :width] = logp
            else:
                out[index, out.shape[1] - width:] = logp
        return out

    def select(self, batch: SequenceBatch, old_logp: torch.Tensor, step: int) -> tuple[torch.Tensor, dict]:
        """valid[B, T]: turns that exist, in trajectories MRS keeps, not rejected by PRS; and their metrics."""
        c = self.config
        metrics = {}
        keep_traj = torch.ones(batch.rewards.shape[0], dtype=torch.bool)
        train_flat, mask = batch.per_trajectory(old_logp)
        rollout_flat, _ = batch.per_trajectory(batch.rollout_logp)
        keep, mrs_metrics = mismatch_rejection(train_flat, rollout_flat, mask, c.mrs_lower, c.mrs_upper,
                                               c.mrs_token_veto)
        metrics.update(mrs_metrics)
        if c.mrs:
            keep_traj = keep
        valid = batch.exists & keep_traj[:, None]
        if c.prs:
            generator = torch.Generator().manual_seed(self._seed(step, 2))
            keep_turn, prs_metrics = profiling_rejection_with_metrics(
                batch.coverage[batch.exists], batch.correct[batch.exists], c.prs_threshold, c.prs_width, generator,
                hacked=batch.hacked[batch.exists], speedup=batch.speedup[batch.exists],
                keep_if_speedup=c.prs_keep_if_speedup)
            prs_keep = torch.ones_like(valid)
            prs_keep[batch.exists] = keep_turn
            valid &= prs_keep
            metrics.update(prs_metrics)
        return valid, metrics

    def advantages(self, batch: SequenceBatch, valid: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.advantage not in ("trloo", "grpo"):
            raise ValueError(f"advantage must be 'trloo' or 'grpo', got {c.advantage!r}")
        returns = returns_to_go(batch.rewards, batch.exists if c.returns_include_rejected else valid, c.gamma)
        return advantages_from_returns(returns, batch.group, valid, leave_one_out=c.advantage == "trloo",
                                       single="return" if c.advantage == "trloo" else "zero",
                                       std_normalize=c.std_normalize)

    def _global_sum(self, value: float) -> float:
        return float(self.accelerator.reduce(torch.tensor([float(value)], device=self.accelerator.device), "sum"))

    def optimize(self, batch: SequenceBatch, old_logp: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor) -> dict:
        """Mini-batch optimizer steps over the batch; returns local metric sums and the grad norms."""
        c, acc = self.config, self.accelerator
        token_adv = batch.token_values(adv)
        loss_mask = batch.model_mask & (batch.token_values(valid.float()) > 0)
        trained = loss_mask.any(-1)
        sums = {name: 0.0 for name in ("loss", "entropy", "tokens", *LOSS_METRICS)}
        grad_norms, forward_tokens = [], 0
        self.model.train()
        for mini in torch.tensor_split(torch.arange(batch.num_sequences), c.mini_batches):
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
                        logp, entropy = sequence_logprobs(self.model, rows, entropy=True)
                        loss, m = clipped_policy_loss(
                            logp, old_logp[index][:, cut].to(acc.device), token_adv[index][:, cut].to(acc.device),
                            mask, eps_low=c.eps_low, eps_high=c.eps_high, dual_clip=c.dual_clip,
                            num_sequences=count / acc.num_processes)
                    acc.backward(loss)
                forward_tokens += int(rows["attention_mask"].sum())
                tokens = float(m["tokens"])
                sums["loss"] += float(loss.detach())  # summed over processes, divided by their number: the global mean
                sums["tokens"] += tokens
                sums["entropy"] += float(masked_mean(entropy, mask)) * tokens
                for name in LOSS_METRICS:
                    sums[name] += float(m[name]) * tokens
            grad_norms.append(float(acc.clip_grad_norm_(self.params, c.grad_clip)))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {"sums": sums, "grad_norms": grad_norms, "forward_tokens": forward_tokens,
                "trained_sequences": float(trained.sum())}

    def step(self) -> dict:
        """One RL step (rollouts, filters, advantages, optimizer steps); returns the logged row."""
        c, acc = self.config, self.accelerator
        self._ensure_scheduler(None)
        step = self.state.step
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        rollout = self.rollout(step)
        rollout_s = time.perf_counter() - started
        batch = build_batch(rollout, self.pad_token_id, c.padding_side)
        train_started = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]  # what this step's (first) optimizer step uses
        old_logp = self.recompute_logprobs(batch)
        valid, filter_metrics = self.select(batch, old_logp, step)
        adv = self.advantages(batch, valid)
        opt = self.optimize(batch, old_logp, adv, valid)
        training_s = time.perf_counter() - train_started
        self.state.step += 1
        row = step_row(acc, self.state.step, lr, rollout, batch, valid, adv,
                       filter_metrics, opt, {"rollout_s": rollout_s, "training_s": training_s,
                                             "step_s": time.perf_counter() - started})
        if c.log_dir and acc.is_main_process:
            if self.log is None:
                self.log = RunLog(c.log_dir, wandb=c.wandb, wandb_project=c.wandb_project, wandb_mode=c.wandb_mode,
                                  wandb_run_name=c.wandb_run_name, config=dataclasses.asdict(c))
            self.log.write(row)
        if c.log_dir and c.save_rollouts:
            suffix = f"_rank{acc.process_index}" if acc.num_processes > 1 else ""
            name = f"step_{self.state.step:06d}{suffix}.jsonl"
            write_jsonl(rollout.trajectories, Path(c.log_dir) / "rollouts" / name, append=False)
        if c.checkpoint_every and self.state.step % c.checkpoint_every == 0:
            self.save_checkpoint()
        return row

    def train(self, num_steps: int) -> list[dict]:
        """Steps until state.step reaches num_steps (so a resumed run continues where it stopped)."""
        self._ensure_scheduler(num_steps)
        rows = []
        while self.state.step < num_steps:
            rows.append(self.step())
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
