"""The arm's settings: one frozen dataclass per part, and named override files in config/ (as experiments/mini).

    settings = ArmRunSettings()                                         # the headline TRLOO arm
    settings = with_overrides(settings, read_config("control_sft"))     # config/control_sft.py
    settings = with_overrides(settings, {"update.lr": 1e-4})            # --set update.lr=1e-4
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from experiments.overrides import literal, read_overrides  # noqa: F401 (literal: the run scripts import it from here)

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(__file__).parent / "config"
RUN = "data/runs/2026-12-07_trloo_arm"


@dataclass(frozen=True)
class ModelSettings:
    """The SFT starting model (one packed file, rl/packed_model.py) and the LoRA adapter RL trains."""
    packed: str = "data/models/mini_sft.safetensors"
    # a LoRA adapter on every linear layer, attention and MLP ("all-linear": q, k, v, o, gate, up, down); RL
    # moves few bits per episode and LoRA matches full fine-tuning for policy gradients at small ranks with
    # about 10x the learning rate (LoRA Without Regret, Thinking Machines 2025, whose alpha of 32 is kept). Rank 4
    # keeps the state (adapter + Adam moments) near 3.7 MB: it is committed after every call, and the tree sent
    # to the GPU (64 MiB) also holds the packed SFT model (about 29 MB) beside the repository's 28 MB
    lora_r: int = 4
    lora_alpha: int = 32
    max_new_tokens: int = 1792
    max_context_tokens: int = 6144
    feedback_tokens: int = 512
    cuda_graph: bool = True


@dataclass(frozen=True)
class RolloutPart:
    """What each step samples (headline: fresh prompts, correctness reward, no timing)."""
    prompts: str = "data/rl_arm/prompts.jsonl.gz"  # experiments/rl_arm/prompts.py
    prompts_per_step: int = 16
    samples: int = 8
    turns: int = 2
    temperature: float = 1.0
    reward: str = "correct"  # 1 correct and honest, else 0 (agent/rewards.py); "drkernel" is the second arm
    correctness_trials: int = 2
    timing: bool = False  # the correctness reward reads no time: evaluations skip timing and profiling
    # each reply is evaluated as soon as it is complete, while the rest decode, and each half of the groups starts
    # turn 2 when its own evaluations are back (agent/pipeline.py: the same samples and rewards as one phase
    # after another, only sooner)
    waves: int = 2
    pipelined: bool = True


@dataclass(frozen=True)
class UpdatePart:
    """The update: shuffled mini-batches over the whole step, AdamW (0.9, 0.95) with a short warm-up."""
    advantage: str = "trloo"  # or "grpo"
    mini_batches: int = 4  # optimizer steps a step, each over a shuffled quarter of its sequences
    micro_batch_size: int = 16
    lr: float = 2e-4  # the mini run's full-model 2e-5, times 10 for LoRA
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 20  # optimizer steps: the first 5 RL steps
    # log the pre-clip norms of the first steps and set this above their median, so that it clips outliers
    grad_clip: float = 1.0
    kl_coef: float = 0.1  # to the SFT model (docs/mini_drkernel.md: a long arm broke on one token without it)
    drop_alike_groups: bool = True  # groups whose samples all score alike carry no advantage: out of the update
    prs: bool = False  # PRS reads the profile's coverage, which an untimed evaluation has not got
    mrs: bool = True


@dataclass(frozen=True)
class ArmPart:
    """Which arm, how long, and where its state lives."""
    kind: str = "rl"  # or "sft": the continued-SFT control, the same number of updates from the same model
    run: str = RUN  # run folder: state/, log/, eval/ (data/runs/<run>/)
    steps: int = 150  # the pre-registered endpoint is read at steps 0, 50, 100 and 150 (the verdict)
    seed: int = 0
    time_limit_s: float = 480.0  # a call stops (saving the state) before a step that would pass this
    eval_every: int = 50  # a call stops at these steps, so that the state there is the one evaluated
    sft_data: tuple[str, ...] = ("data/sft/sft.parquet", "data/sft/repairs.parquet")  # the control's rows
    sft_rows_per_update: int = 16  # the control: conversations an optimizer step (RL: 16 x 8 x 2 / 4 sequences)
    sft_max_length: int = 8192


@dataclass(frozen=True)
class EvalPart:
    """The pre-registered evaluation (the run's README): greedy, every held-out task and 512 fresh ones."""
    heldout: int | None = None  # None: all 1,279 held-out tasks of data/rl
    fresh: str = "data/rl_arm/fresh_eval.jsonl.gz"
    fresh_tasks: int | None = None  # None: all 512
    turns: int = 2
    correctness_trials: int = 2
    rl_data: str = "data/rl/prompts.jsonl.gz"
    # the SFT model's records that a step is paired with (None: this run's eval/sft.jsonl, made at step 0)
    sft_records: str | None = None


@dataclass(frozen=True)
class ArmRunSettings:
    model: ModelSettings = field(default_factory=ModelSettings)
    rollouts: RolloutPart = field(default_factory=RolloutPart)
    update: UpdatePart = field(default_factory=UpdatePart)
    arm: ArmPart = field(default_factory=ArmPart)
    eval: EvalPart = field(default_factory=EvalPart)

    def to_dict(self) -> dict:
        return asdict(self)


PARTS = ("model", "rollouts", "update", "arm", "eval")


def flat(settings: ArmRunSettings) -> dict:
    return {f"{part}.{f.name}": getattr(getattr(settings, part), f.name)
            for part in PARTS for f in fields(getattr(settings, part))}


def with_overrides(settings: ArmRunSettings, changes: dict) -> ArmRunSettings:
    """`settings` with {"part.name": value} applied; an unknown name raises KeyError naming it."""
    known = flat(settings)
    for name in changes:
        if name not in known:
            raise KeyError(f"{name!r} is not a setting (one of {', '.join(sorted(known))})")
    return replace(settings, **{part: replace(getattr(settings, part), **{
        name.partition(".")[2]: value for name, value in changes.items() if name.startswith(part + ".")})
        for part in PARTS})


def read_config(name_or_path: str) -> dict:
    """{"part.name": value} of config/<name>.py (or a path)."""
    return read_overrides(name_or_path, CONFIG_DIR)


def resolve(path: str) -> Path:
    """A settings path, relative to the repository unless absolute."""
    return Path(path) if Path(path).is_absolute() else REPO / path
