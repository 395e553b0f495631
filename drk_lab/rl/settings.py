"""RLSettings: every setting of an RL run, in groups a notebook's parameters cell can hold.

    settings = RLSettings().changed(samples=16, turns=3, lr=1e-6, log_dir="runs/rl")   # by name, any group
    settings.rollouts.samples, settings.filters.prs, settings.loss.lr                   # read by group

RLTrainer takes one (or the same names as keyword arguments), and it is saved with every checkpoint
(trainer.json) and given to the run log and wandb as the run's config, so a run can always say how it was made.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace


@dataclass(frozen=True)
class RolloutSettings:
    """Which tasks each step draws, and how the policy's episodes are sampled and evaluated."""
    prompts_per_step: int = 2  # tasks per step over all processes (each gets `samples` episodes)
    samples: int = 4  # episodes per task: one group
    turns: int = 3
    context_turns: int | None = None  # None: full context; k: a rolling window of k earlier turns
    context_strategy: str = "last_k"
    stts: dict | None = None  # {"max_user_turns", "remain_turns", "iterations", ...} instead of turns
    reward_fn: str = "drkernel"
    temperature: float = 1.0  # the trainer scores the same tempered model (rl/logprobs.py)
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    max_prompt_tokens: int | None = None
    max_context_tokens: int | None = None
    feedback_tokens: int = 2048
    system_prompt: str | None = None
    chat_template_kwargs: dict | None = None
    generation_batch_size: int = 8
    sampler: str = "loop"  # "loop": TransformersPolicy's decode loop (any model); "static": rl/sampler.py (Qwen3-style, all rows at once)
    cuda_graph: bool = False  # with sampler="static": each decode step replays a CUDA graph (rl/sampler.py)
    eval_kwargs: dict | None = None  # to drk_lab.harness.evaluate (device, correctness_trials, ...)
    max_workers: int | None = None
    shuffle_tasks: bool = True
    # each turn generated in this many calls of whole groups, and generation overlapped with evaluation
    # (agent/pipeline.py); the same samples and rewards either way: both change only when things run
    waves: int = 1
    pipelined: bool = False


@dataclass(frozen=True)
class FilterSettings:
    """Mismatch (MRS) and profiling (PRS) rejection sampling (rl/filters.py)."""
    mrs: bool = True  # off: nothing is rejected, but what MRS would reject is still logged
    mrs_lower: float = 0.999
    mrs_upper: float = 1.001
    mrs_token_veto: float = 1e-4
    prs: bool = True
    prs_threshold: float = 0.3
    prs_width: float = 0.1
    prs_keep_if_speedup: float | None = None


@dataclass(frozen=True)
class LossSettings:
    """Advantages, the clipped-ratio loss and the optimizer."""
    advantage: str = "trloo"  # or "grpo" (multi-turn GRPO, for comparison)
    gamma: float = 1.0
    std_normalize: bool = False
    returns_include_rejected: bool = True  # a PRS-rejected turn's reward still counts in earlier returns
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: float | None = 3.0
    grad_clip: float = 1.0
    kl_coef: float = 0.0  # beta of the per-token KL penalty to the starting model (rl/loss.py); 0: no reference kept
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


GROUPS = {"rollouts": RolloutSettings, "filters": FilterSettings, "loss": LossSettings}


@dataclass(frozen=True)
class RLSettings:
    # model
    model_dtype: str | None = None  # when the model is loaded from a path: "bfloat16", "float32", ...
    lora: dict | None = None  # peft LoraConfig arguments, e.g. {"r": 16, "target_modules": "all-linear"}
    gradient_checkpointing: bool = False
    mixed_precision: str = "no"  # accelerate's: "no", "bf16", "fp16"
    seed: int = 0
    rollouts: RolloutSettings = field(default_factory=RolloutSettings)
    filters: FilterSettings = field(default_factory=FilterSettings)
    loss: LossSettings = field(default_factory=LossSettings)
    # checkpoints and logging
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0  # steps; 0: only when save_checkpoint() is called
    resume_from: str | None = None  # a checkpoint folder, or "latest" (in checkpoint_dir)
    log_dir: str | None = None
    save_rollouts: bool = True
    wandb: bool = False
    wandb_project: str = "drk_lab"
    wandb_mode: str = "offline"
    wandb_run_name: str | None = None

    def changed(self, **changes) -> RLSettings:
        """These settings with `changes` applied by name, in whichever group holds each (a whole group
        may be given too: rollouts=RolloutSettings(...)); an unknown name raises TypeError."""
        grouped: dict[str, dict] = {}
        own = {f.name for f in fields(self)}
        for name, value in changes.items():
            group = next((g for g, kind in GROUPS.items() if name in {f.name for f in fields(kind)}), None)
            if group is None and name not in own:
                raise TypeError(f"RLSettings has no setting {name!r}")
            grouped.setdefault(group, {})[name] = value
        top = replace(self, **grouped.pop(None, {}))
        return replace(top, **{g: replace(getattr(top, g), **values) for g, values in grouped.items()})

    def to_dict(self) -> dict:
        return asdict(self)
