"""Settings of an RL run (RLConfig) and its learning-rate schedule (LRSchedule); see rl/trainer.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RLConfig:
    # rollouts
    prompts_per_step: int = 2  # tasks per step over all processes (each gets `samples` episodes)
    samples: int = 4  # episodes per task: one group
    turns: int = 3
    context_turns: int | None = None  # None: full context; k: a rolling window of k earlier turns
    context_strategy: str = "last_k"
    stts: dict | None = None  # {"max_user_turns", "remain_turns", "iterations", ...} instead of turns
    reward_fn: str = "drkernel"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    max_prompt_tokens: int | None = None
    max_context_tokens: int | None = None
    feedback_tokens: int = 2048
    system_prompt: str | None = None
    chat_template_kwargs: dict | None = None
    generation_batch_size: int = 8
    eval_kwargs: dict = field(default_factory=dict)  # to drk_lab.evaluate (device, correctness_trials, ...)
    max_workers: int | None = None
    shuffle_tasks: bool = True
    # estimator and filters
    advantage: str = "trloo"  # or "grpo" (multi-turn GRPO, for comparison)
    gamma: float = 1.0
    std_normalize: bool = False
    returns_include_rejected: bool = True  # a PRS-rejected turn's reward still counts in earlier returns
    mrs: bool = True  # off: nothing is rejected, but what MRS would reject is still logged
    mrs_lower: float = 0.999
    mrs_upper: float = 1.001
    mrs_token_veto: float = 1e-4
    prs: bool = True
    prs_threshold: float = 0.3
    prs_width: float = 0.1
    prs_keep_if_speedup: float | None = None
    # loss and optimisation
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: float | None = 3.0
    grad_clip: float = 1.0
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: str = "constant"  # or "cosine"
    warmup_steps: int = 0
    total_steps: int | None = None  # optimizer steps the cosine spans (default: train()'s num_steps)
    min_lr_ratio: float = 0.0
    micro_batch_size: int = 1  # sequences per forward/backward
    mini_batches: int = 1  # optimizer steps per rollout batch (PPO-style; >1 makes the ratio clip bite)
    padding_side: str = "right"
    gradient_checkpointing: bool = False
    mixed_precision: str = "no"  # accelerate's: "no", "bf16", "fp16"
    model_dtype: str | None = None  # when the model is loaded from a path: "bfloat16", "float32", ...
    lora: dict | None = None  # peft LoraConfig arguments, e.g. {"r": 16, "target_modules": "all-linear"}
    seed: int = 0
    # logging and checkpoints
    log_dir: str | None = None
    save_rollouts: bool = True
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0  # steps; 0: only when save_checkpoint() is called
    resume_from: str | None = None  # a checkpoint folder, or "latest" (in checkpoint_dir)
    wandb: bool = False
    wandb_project: str = "drk_lab"
    wandb_mode: str = "offline"
    wandb_run_name: str | None = None


class LRSchedule:
    """Multiplier of the base LR per optimizer step: linear warmup, then constant or cosine to min_ratio."""

    def __init__(self, kind: str, warmup: int, total: int | None, min_ratio: float):
        if kind not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {kind!r}")
        if kind == "cosine" and not total:
            raise ValueError("a cosine schedule needs total_steps (or train(num_steps))")
        self.kind, self.warmup, self.total, self.min_ratio = kind, warmup, total, min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.kind == "constant":
            return 1.0
        progress = min((step - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
