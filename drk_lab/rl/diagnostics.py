"""Training-run diagnostics on run-log rows (runlog.read_log): series, smoothing, warning flags, a summary.

    rows = read_log("runs/a")
    steps, values = series(rows, "entropy")
    for f in flags(rows):
        print(f.kind, f.step, f.message)

Pure functions on lists of dicts, no plotting (viz.plots draws these series). The flags look for four
failure patterns of multi-turn RL on kernels:

- entropy_collapse: the policy's entropy falls below a fraction of its early level and stays there;
  the policy has stopped exploring.
- grad_norm_spike: a step's gradient norm is many times its recent median; often the first sign of a
  mismatch between the rollout and training engines, or of a bad batch.
- broken_replies: the share of replies that do not even load (outcome/syntax + outcome/load) climbs
  to several times its early level; a policy coming apart, often at one token of a line most replies
  share, before entropy or reward show it clearly.
- lazy_optimisation: reward rises while Fast@1.2 falls. Dr. Kernel's "lazy optimisation": the policy
  learns to write correct but trivial kernels (most of the work left to PyTorch) that earn the
  correctness reward but are not faster.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

MAIN_KEYS = ("reward_mean", "fast@1/best", "entropy", "grad_norm", "loss", "approx_kl", "mrs/rejected_frac",
             "prs/rejected_frac", "valid_turn_frac", "time/step_s")
HEALTH_KEYS = ("reward_mean", "entropy", "grad_norm", "loss", "approx_kl", "clip_low", "clip_high", "clip_dual",
               "mrs/rejected_frac", "prs/rejected_frac", "mrs/log_ratio_abs_max", "valid_turn_frac")
TURN_KEY = re.compile(r"^(.+)/turn_(\d+)$")


@dataclass
class Flag:
    kind: str  # "entropy_collapse", "grad_norm_spike", "broken_replies" or "lazy_optimisation"
    step: int  # the step where it shows (the first step of the collapse, the spiking step, the last step)
    message: str


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def series(rows: list[dict], key: str) -> tuple[list, list[float]]:
    """(steps, values) of one key, skipping rows where it is missing, None or not finite. A row without
    "step" counts by its position from 1."""
    steps, values = [], []
    for i, row in enumerate(rows):
        value = _number(row.get(key))
        if value is not None:
            steps.append(row.get("step", i + 1))
            values.append(value)
    return steps, values


def smooth(values: list[float], alpha: float = 0.6) -> list[float]:
    """Exponential moving average; alpha is the weight of the past (0: no smoothing, near 1: very smooth),
    as TensorBoard's smoothing slider. The average starts at the first value."""
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    out = []
    for v in values:
        out.append(v if not out else alpha * out[-1] + (1 - alpha) * v)
    return out


def _fast_turn_keys(rows: list[dict], p: float) -> list[str]:
    pattern = re.compile(rf"^fast@{re.escape(f'{p:g}')}/turn_(\d+)$")
    found = {k for row in rows for k in row if pattern.match(k)}
    return sorted(found, key=lambda k: int(pattern.match(k).group(1)))


def fast_series(rows: list[dict], p: float = 1.2, turn: str = "mean") -> tuple[list, list[float]]:
    """(steps, Fast@p) from the "fast@{p}/turn_t" keys: their mean over the turns a row has (turn="mean")
    or the last turn's value (turn="last"). Empty when the rows have no such keys."""
    keys = _fast_turn_keys(rows, p)
    if turn not in ("mean", "last"):
        raise ValueError(f"turn must be 'mean' or 'last', got {turn!r}")
    steps, values = [], []
    for i, row in enumerate(rows):
        present = [v for v in (_number(row.get(k)) for k in keys) if v is not None]
        if present:
            steps.append(row.get("step", i + 1))
            values.append(sum(present) / len(present) if turn == "mean" else present[-1])
    return steps, values


def entropy_collapse(rows: list[dict], fraction: float = 0.2, early_steps: int = 10,
                     patience: int = 3) -> Flag | None:
    """Entropy below `fraction` of its median over the first `early_steps` logged steps for `patience`
    steps in a row; the flag is at the first of them."""
    steps, values = series(rows, "entropy")
    if len(values) < early_steps + patience:
        return None
    early = statistics.median(values[:early_steps])
    if early <= 0:
        return None
    floor = fraction * early
    run = 0
    for i, v in enumerate(values):
        run = run + 1 if v < floor else 0
        if run == patience:
            start = i - patience + 1
            below = next((j for j in range(start, len(values)) if values[j] >= floor), len(values)) - start
            return Flag("entropy_collapse", steps[start],
                        f"entropy fell to {values[start]:.3g} at step {steps[start]}, below {fraction:.0%} of its "
                        f"early median {early:.3g}, and stayed there for {below} steps")
    return None


def grad_norm_spikes(rows: list[dict], factor: float = 5.0, window: int = 20, min_history: int = 5) -> list[Flag]:
    """Steps whose grad_norm is above `factor` times the median of the `window` steps before it (once
    `min_history` steps are known). A spike stays in later steps' windows: one value barely moves a median."""
    steps, values = series(rows, "grad_norm")
    found = []
    for i in range(min_history, len(values)):
        median = statistics.median(values[max(0, i - window):i])
        if median > 0 and values[i] > factor * median:
            found.append(Flag("grad_norm_spike", steps[i],
                              f"grad_norm {values[i]:.3g} at step {steps[i]} is {values[i] / median:.1f}x its "
                              f"running median {median:.3g}"))
    return found


BROKEN_KEYS = ("outcome/syntax", "outcome/load")


def broken_replies(rows: list[dict], factor: float = 2.5, early_steps: int = 10, patience: int = 2) -> Flag | None:
    """The share of replies that fail before running (BROKEN_KEYS summed) above `factor` times its median
    over the first `early_steps` steps for `patience` steps in a row; the flag is at the first of them."""
    steps, values = [], []
    for i, row in enumerate(rows):
        shares = [_number(row.get(key)) for key in BROKEN_KEYS]
        if any(share is not None for share in shares):
            steps.append(row.get("step", i + 1))
            values.append(sum(share or 0.0 for share in shares))
    if len(values) < early_steps + patience:
        return None
    early = statistics.median(values[:early_steps])
    ceiling = factor * early if early > 0 else 0.05  # none broken early: a twentieth of the replies is news
    for i in range(early_steps, len(values) - patience + 1):
        if all(v > ceiling for v in values[i:i + patience]):
            return Flag("broken_replies", steps[i],
                        f"{values[i]:.0%} of the replies failed to load at step {steps[i]} ({factor:g}x the early "
                        f"median {early:.1%} for {patience}+ steps): look for a line most replies share going wrong")
    return None


def _thirds_change(values: list[float]) -> tuple[float, float, float]:
    # Mean of the last third minus mean of the first third: each third's mean already averages the
    # step-to-step noise, and unlike an EMA it does not lag behind the end of the run.
    n = len(values) // 3
    first, last = sum(values[:n]) / n, sum(values[-n:]) / n
    return first, last, last - first


def lazy_optimisation(rows: list[dict], fast_ps=(1.2, 1.0), turn: str = "mean", min_steps: int = 9,
                      reward_rise: float = 0.05, fast_drop: float = 0.02) -> Flag | None:
    """Reward rising (last third's mean at least `reward_rise` above the first third's) while Fast@p
    falls (by at least `fast_drop`, a share of tasks; 0 also flags a Fast@p that stays flat). p is the
    first of `fast_ps` with "fast@p/turn_t" keys in the rows (the trainer may log only fast@1), averaged
    over turns (turn="mean") or the last turn's. Needs `min_steps` steps that have both."""
    reward = dict(zip(*series(rows, "reward_mean")))
    for p in fast_ps:
        steps, fast = fast_series(rows, p, turn)
        if steps:
            break
    else:
        return None
    pairs = [(s, reward[s], f) for s, f in zip(steps, fast) if s in reward]
    if len(pairs) < max(min_steps, 3):
        return None
    r0, r1, dr = _thirds_change([r for _, r, _ in pairs])
    f0, f1, df = _thirds_change([f for _, _, f in pairs])
    if dr >= reward_rise and df <= -fast_drop:
        return Flag("lazy_optimisation", pairs[-1][0],
                    f"reward_mean rose {r0:.3g} -> {r1:.3g} while Fast@{p:g} ({turn} over turns) fell {f0:.1%} -> "
                    f"{f1:.1%} (first vs last third of {len(pairs)} steps): correct but slow kernels are rewarded")
    return None


def flags(rows: list[dict], *, entropy_fraction: float = 0.2, entropy_early_steps: int = 10,
          entropy_patience: int = 3, grad_factor: float = 5.0, grad_window: int = 20, grad_min_history: int = 5,
          fast_ps=(1.2, 1.0), fast_turn: str = "mean", lazy_min_steps: int = 9, lazy_reward_rise: float = 0.05,
          lazy_fast_drop: float = 0.02, broken_factor: float = 2.5, broken_patience: int = 2) -> list[Flag]:
    """All warning flags of a run, in step order (see entropy_collapse, grad_norm_spikes, broken_replies and
    lazy_optimisation for what each threshold means)."""
    found = grad_norm_spikes(rows, grad_factor, grad_window, grad_min_history)
    for flag in (entropy_collapse(rows, entropy_fraction, entropy_early_steps, entropy_patience),
                 broken_replies(rows, broken_factor, entropy_early_steps, broken_patience),
                 lazy_optimisation(rows, fast_ps, fast_turn, lazy_min_steps, lazy_reward_rise, lazy_fast_drop)):
        if flag is not None:
            found.append(flag)
    return sorted(found, key=lambda f: (f.step, f.kind))


def present(rows: list[dict], keys) -> list[str]:
    """The keys, in order, that at least one row logged with a number."""
    return [k for k in keys if any(_number(row.get(k)) is not None for row in rows)]


def health_keys(rows: list[dict]) -> list[str]:
    """The training-health keys (HEALTH_KEYS: reward, entropy, gradient norm, clipping, rejection rates)
    that the rows have."""
    return present(rows, HEALTH_KEYS)


def turn_keys(rows: list[dict]) -> list[str]:
    """The per-turn keys the rows have ("reward_mean/turn_1", "fast@1/turn_2", ...), grouped by metric
    (in first-seen order) and then by turn."""
    found = {k: TURN_KEY.match(k) for row in rows for k in row if TURN_KEY.match(k)}
    metrics = list(dict.fromkeys(m.group(1) for m in found.values()))
    ordered = sorted(found, key=lambda k: (metrics.index(found[k].group(1)), int(found[k].group(2))))
    return present(rows, ordered)


def summary(rows: list[dict], keys=MAIN_KEYS) -> dict:
    """One flat row: "steps", "last_step", then "<key>/last" and "<key>/mean" for each of the keys the
    rows have (means over the steps that logged the key)."""
    out: dict = {"steps": len(rows), "last_step": rows[-1].get("step", len(rows)) if rows else None}
    for key in keys:
        _, values = series(rows, key)
        if values:
            out[f"{key}/last"] = values[-1]
            out[f"{key}/mean"] = sum(values) / len(values)
    return out
