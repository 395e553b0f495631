"""The mini run's settings: one frozen dataclass per part of the pipeline, and named override files.

    settings = MiniSettings()                                    # the recipe of LOG.md's latest runs
    settings = with_overrides(settings, read_config("smoke"))     # experiments/mini/config/smoke.py
    settings = with_overrides(settings, {"rl.lr": 4e-5})         # --set rl.lr=4e-5

A config file (as nanoGPT's config/) holds one `part.name = literal` a line, with comments saying what the
recipe is for; run.py applies it, then each --set, and writes the result to the run's settings.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from experiments.overrides import literal, read_overrides  # noqa: F401 (literal: the run scripts import it from here)

CONFIG_DIR = Path(__file__).parent / "config"


@dataclass(frozen=True)
class ModelSettings:
    """The tokenizer, a Qwen3-style model trained from scratch (about 27M parameters), and how it generates."""
    vocab_size: int = 8192
    hidden_size: int = 512
    num_layers: int = 8
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int = 64
    intermediate_size: int = 1536
    max_positions: int = 8192
    tokenizer_prompts: int = 2000  # RL prompts (train split) added to the tokenizer's corpus
    # the teacher's first replies are 1,270 tokens at the median and 1,955 at most with this tokenizer
    max_new_tokens: int = 1792
    max_context_tokens: int = 6144  # first prompt (<= 967) + reply + feedback (<= 512) + reply
    feedback_tokens: int = 512
    # the sampler's one-token steps replayed as a CUDA graph (rl/sampler.py), in RL and the evaluations; on a
    # CPU the same fixed-shape step runs without a graph
    cuda_graph: bool = True


@dataclass(frozen=True)
class PretrainSettings:
    """Next-token pretraining (rl/pretrain.py) on whole texts packed into rows, drawn with replacement."""
    steps: int = 2000  # 0: no pretraining
    # the teacher's first replies to at most this many train-split tasks outside the SFT set (0: none),
    first_turns: int = 5000
    # and to tasks sampled afresh whose operator combinations are train-side: more combinations than the RL
    # set's, so that the model reads the task instead of memorising texts
    new_tasks: int = 12000
    # drills: a task's forward lines beside the kernel's lines for the same operators, one per fresh
    # train-side task; in a whole reply the tokens naming an operator are a few of 1,300
    drills: int = 70_000
    # drills in the form of the GEMM or conv epilogue, where the second reply fuses the chain
    # (operator_drill's `epilogue`; experiments/drills/learnability.py measures why both forms are needed)
    epilogue_drills: int = 30_000
    batch: int = 8
    length: int = 4096  # a whole first prompt and reply (<= 3,300 tokens) fit in one row
    lr: float = 1e-3
    # stop (saving the state) before a step that would pass this many seconds of the call, and resume in
    # the next (None: no limit); device.sh sets it to what is left of the call, as for SFT and RL
    time_limit_s: float | None = None


@dataclass(frozen=True)
class SFTSettings:
    """Cold-start SFT (rl/sft.py on TRL, loss on assistant tokens) over the SFT and repair sets."""
    epochs: float = 1.0  # pretraining already saw the trajectories
    batch: int = 8
    lr: float = 3e-4
    max_length: int = 8192
    max_steps: int = -1  # -1: epochs decide
    # at most this many rows of the SFT and repair sets, drawn at random (None: all): TRL tokenizes every row
    # before its first step, which a smoke run of two steps need not wait for
    rows: int | None = None
    time_limit_s: float | None = None  # as PretrainSettings.time_limit_s (TRL's checkpoint, resumed)


@dataclass(frozen=True)
class ArmSettings:
    """Multi-turn RL (rl/trainer.py with the static-cache sampler) from the SFT model, one arm per tag."""
    steps: int = 50  # a ceiling: budget_s decides
    budget_s: float | None = 300.0  # seconds of RL steps per arm, across calls
    prompts_per_step: int = 16
    # None: prompts drawn from the whole train split; N: only from the split's first N in the evaluation's
    # order, so the same prompts return every step (with N <= eval.seen the seen evaluation holds them all)
    prompts: int | None = None
    samples: int = 8
    turns: int = 2
    lr: float = 2e-5
    kl_coef: float = 0.0  # beta of the KL penalty to the SFT model, 0: none (docs/mini_drkernel.md)
    temperature: float = 1.0  # of the rollouts; the trainer scores the same tempered model
    micro_batch_size: int = 16
    mini_batches: int = 8
    advantage: str = "trloo"  # or "grpo", the ablation
    prs: bool = True
    mrs: bool = True
    time_limit_s: float = 330.0  # this call's RL phase stops (and checkpoints) before a step that would pass it
    snapshot_step: int = 0  # also export the model after this step to rl_<tag>_step<N>/model (0: none)
    probe_every: int = 0  # held-out probes at the arm's start and every N steps, paired with its first (0: none)
    probe_tasks: int = 256  # the evaluation's first held-out tasks; a probe costs about one RL step
    seed: int = 0  # sampling and prompt order; another seed from the same SFT model is rl_<advantage>_seed<N>


@dataclass(frozen=True)
class EvalSettings:
    """The evaluation of a checkpoint: held-out and seen tasks of the RL set, the built-in suite, STTS."""
    heldout: int = 64  # held-out tasks (operator combinations never seen in training)
    seen: int = 32  # train-split tasks, whose teacher replies pretraining saw: the gap to held-out is generalisation
    builtin_levels: tuple[int, ...] = (1, 2)
    builtin_max: int | None = None  # at most this many built-in tasks (None: all of those levels)
    turns: int = 2
    temperature: float = 0.7
    # episodes per task (not STTS), each a draw of its own: more narrow the chance difference between two
    # checkpoints' counts, at the cost of rows and evaluations
    samples: int = 1
    stts_tasks: int = 16
    stts: tuple[int, int, int] = (3, 2, 2)  # max_user_turns, remain_turns, iterations: 4 turns
    correctness_trials: int = 2
    timing_trials: int = 10
    genbench_rows: int = 256
    genbench_tokens: int = 512


@dataclass(frozen=True)
class MiniSettings:
    model: ModelSettings = field(default_factory=ModelSettings)
    pretrain: PretrainSettings = field(default_factory=PretrainSettings)
    sft: SFTSettings = field(default_factory=SFTSettings)
    rl: ArmSettings = field(default_factory=ArmSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    seed: int = 0  # the model's initialisation, the texts and the evaluation's sampling

    def to_dict(self) -> dict:
        return asdict(self)


PARTS = ("model", "pretrain", "sft", "rl", "eval")


def flat(settings: MiniSettings) -> dict:
    """{"part.name": value} for every setting, and "seed" (the names a --set or a config file uses)."""
    out = {}
    for part in PARTS:
        group = getattr(settings, part)
        out.update({f"{part}.{f.name}": getattr(group, f.name) for f in fields(group)})
    return out | {"seed": settings.seed}


def with_overrides(settings: MiniSettings, changes: dict) -> MiniSettings:
    """`settings` with {"part.name" or "seed": value} applied; an unknown name raises KeyError naming it."""
    known = flat(settings)
    for name in changes:
        if name not in known:
            raise KeyError(f"{name!r} is not a setting (one of {', '.join(sorted(known))})")
    groups = {part: replace(getattr(settings, part), **{name.partition(".")[2]: value
                                                         for name, value in changes.items() if name.startswith(part + ".")})
              for part in PARTS}
    return replace(settings, **groups, seed=changes.get("seed", settings.seed))


def read_config(name_or_path: str) -> dict:
    """The overrides of a config file, {"part.name": value}: `name` is config/<name>.py, or give a path."""
    return read_overrides(name_or_path, CONFIG_DIR)
