"""Per-step training logs: a JSONL file and a CSV file that the diagnostics notebook reads, and wandb.

    log = RunLog("runs/a", wandb=False)
    log.write({"step": 1, "reward_mean": 0.25, ...})
    rows = read_log("runs/a")                     # list of dicts, one per step

Keys are flat strings ("reward_mean/turn_1", "mrs/rejected_frac", "time/generation_s"); non-finite
numbers are written as null (JSONL) and empty cells (CSV). The CSV's columns are those of the first
row written (kept when a resumed run appends; a step written twice then has two rows, and read_log
keeps the last). wandb is imported only when asked for; its mode is
"offline" by default (sync later with `wandb sync`).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLog:
    def __init__(self, log_dir: str | Path, *, wandb: bool = False, wandb_project: str = "drk_lab",
                 wandb_mode: str = "offline", wandb_run_name: str | None = None, settings: dict | None = None):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / JSONL_NAME
        self.csv = self.dir / CSV_NAME
        self.columns: list[str] | None = None
        if self.csv.exists() and self.csv.stat().st_size:
            with self.csv.open(newline="") as f:
                self.columns = next(csv.reader(f), None)
        self.wandb_run = None
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as exc:
                raise RuntimeError("wandb logging was asked for (wandb=True) but wandb is not installed: "
                                   "pip install wandb, or turn it off") from exc
            self.wandb_run = wandb_module.init(project=wandb_project, name=wandb_run_name, mode=wandb_mode,
                                               dir=str(self.dir), config=settings or {}, resume="allow")

    def write(self, row: dict) -> None:
        row = {k: _clean(v) for k, v in row.items()}
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row) + "\n")
        new_file = self.columns is None
        if new_file:
            self.columns = list(row)
        with self.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore", restval="")
            if new_file:
                writer.writeheader()
            writer.writerow(row)
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in row.items() if v is not None and k != "step"}, step=row.get("step"))

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def read_log(log_dir: str | Path) -> list[dict]:
    """The JSONL rows in step order; when a resumed run wrote a step again, its last row wins."""
    with (Path(log_dir) / JSONL_NAME).open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    by_step = {row.get("step"): row for row in rows}
    return [by_step[k] for k in sorted(by_step, key=lambda k: (k is None, k or 0))]


# -- what one RL step logs ---------------------------------------------------------------------
# the shares of a step's replies logged as outcome/<kind> (the harness's other error kinds count as "other")
OUTCOMES = ("correct", "no_code", "syntax", "load", "compile", "runtime", "mismatch", "hacked", "other")
LOSS_METRICS = ("clip_low", "clip_high", "clip_dual", "ratio_mean", "approx_kl")
MRS_STATS = ("mrs/weight_mean", "mrs/weight_min", "mrs/weight_max", "mrs/log_ratio_abs_mean", "mrs/log_ratio_abs_max",
             "mrs/k3_kl", "mrs/token_ratio_min", "mrs/vetoed_tokens")


def step_row(accelerator, step: int, lr: float, rollout, batch, valid, adv, filter_metrics: dict, opt: dict,
             seconds: dict) -> dict:
    """The logged row of one trainer step. Rates and means are over all processes (numerators and
    denominators summed before dividing); the MRS weight statistics and the times are this process's.

    Keys: step, lr; reward_mean, reward_mean/turn_t, fast@1/turn_t, fast@1.2/turn_t, correct/turn_t, fast@1/best (any turn
    fast); valid_turn_frac, advantage_abs_mean, zero_advantage_frac (valid turns with no advantage: their
    group earned one return), cut_off_frac (sampled replies that hit max_new_tokens);
    outcome/<kind> (the share of the step's replies that ended correct or in that error kind, OUTCOMES);
    mrs/rejected_frac (trajectories MRS rejects, logged even with MRS off), prs/rejected_frac (of all
    turns), prs/rejected_frac_of_judged; entropy, clip_low,
    clip_high, clip_dual, ratio_mean, approx_kl, ref_kl with a KL penalty (per trained token); loss (the sequence-mean loss, mean
    over optimizer steps), grad_norm (before clipping), optimizer_steps; token and sequence counts; MRS
    weight and log-ratio statistics; time/generation_s, time/evaluation_s, time/rollout_s,
    time/training_s, time/step_s; tokens_per_s (sequence tokens / step time), generation_tokens_per_s,
    training_tokens_per_s; peak_memory_gb on CUDA.
    """
    import torch

    from drk_lab.agent.metrics import fast_p, is_fast, outcome

    stats = rollout.stats
    b, turns = batch.rewards.shape
    exists = float(batch.exists.sum())
    pairs = {}  # name -> (numerator, denominator)
    for t in range(turns):
        results = [traj.turns[t].result if len(traj.turns) > t else None for traj in rollout.trajectories]
        pairs[f"reward_mean/turn_{t + 1}"] = (float(batch.rewards[:, t][batch.exists[:, t]].sum()),
                                              float(batch.exists[:, t].sum()))
        pairs[f"fast@1/turn_{t + 1}"] = (fast_p(results, p=1.0) * b, b)
        pairs[f"fast@1.2/turn_{t + 1}"] = (fast_p(results, p=1.2) * b, b)  # falling while reward rises: lazy kernels
        pairs[f"correct/turn_{t + 1}"] = (float(batch.correct[:, t].sum()), b)
    pairs["fast@1/best"] = (sum(any(is_fast(x.result, 1.0) for x in traj.turns) for traj in rollout.trajectories), b)
    pairs["reward_mean"] = (float(batch.rewards[batch.exists].sum()), exists)
    valid_adv, n_valid = adv[valid].abs(), float(valid.sum())
    pairs["valid_turn_frac"] = (n_valid, exists)
    pairs["advantage_abs_mean"] = (float(valid_adv.sum()), n_valid)
    # turns whose group all earned the same return: they train nothing, however large the batch looks
    pairs["zero_advantage_frac"] = (float((valid_adv < 1e-8).sum()), n_valid)
    # replies that hit max_new_tokens: when most are cut off, rewards are sparse whatever the model knows
    pairs["cut_off_frac"] = (float(stats["cut_off_replies"]), float(stats["sampled_replies"]))
    # how the step's replies ended: a rising syntax share is a policy coming apart before its reward shows it
    ended = [outcome(turn.result) for traj in rollout.trajectories for turn in traj.turns]
    ended = [kind if kind in OUTCOMES else "other" for kind in ended]
    for kind in OUTCOMES:
        pairs[f"outcome/{kind}"] = (float(ended.count(kind)), float(len(ended)))
    pairs["mrs/rejected_frac"] = (filter_metrics["mrs/rejected"], b)
    if "prs/rejected" in filter_metrics:
        pairs["prs/rejected_frac"] = (filter_metrics["prs/rejected"], exists)
        pairs["prs/rejected_frac_of_judged"] = (filter_metrics["prs/rejected"], filter_metrics["prs/judged"])
    sums = opt["sums"]
    for name in ("entropy", *LOSS_METRICS, "ref_kl"):
        if name in sums:  # ref_kl only with a KL penalty's reference
            pairs[name] = (sums[name], sums["tokens"])
    counts = {"loss": sums["loss"], "trained_tokens": sums["tokens"], "trained_sequences": opt["trained_sequences"],
              "sequences": float(batch.num_sequences), "trajectories": float(b),
              "sequence_tokens": float(batch.attention_mask.sum()), "model_tokens": float(batch.model_mask.sum()),
              "generated_tokens": float(stats["generated_tokens"]), "forced_replies": float(stats["forced_replies"]),
              "context_full": float(stats["context_full"]), "prompt_too_long": float(stats["prompt_too_long"])}
    names = list(pairs)
    local = torch.tensor([v for n in names for v in pairs[n]] + list(counts.values()), dtype=torch.float64)
    total = accelerator.reduce(local.to(accelerator.device), "sum").cpu().tolist()
    row = {"step": step, "lr": lr}
    for i, name in enumerate(names):
        num, den = total[2 * i], total[2 * i + 1]
        row[name] = num / den if den else float("nan")
    row.update(zip(counts, total[2 * len(names):]))
    n_opt = len(opt["grad_norms"])
    row["loss"] = row["loss"] / accelerator.num_processes / max(n_opt, 1)
    row["grad_norm"] = sum(opt["grad_norms"]) / n_opt if n_opt else float("nan")
    row["optimizer_steps"] = n_opt
    row.update({key: filter_metrics[key] for key in MRS_STATS})
    row["time/generation_s"] = stats["generation_s"]
    row["time/evaluation_s"] = stats["evaluation_s"]
    row.update({f"time/{k}": v for k, v in seconds.items()})
    row["tokens_per_s"] = row["sequence_tokens"] / max(seconds["step_s"], 1e-9)
    row["generation_tokens_per_s"] = stats["generated_tokens"] / max(stats["generation_s"], 1e-9)
    row["training_tokens_per_s"] = opt["forward_tokens"] / max(seconds["training_s"], 1e-9)
    if torch.cuda.is_available():
        row["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return row
