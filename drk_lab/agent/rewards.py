"""Reward functions: pure functions of one EvalResult, `fn(result, **weights) -> float`.

`get_reward(name, **weights)` binds the weights and returns `callable(result) -> float`.

Shared rules:
- A hacked result (`hacked` set or `error_kind == "hacked"`) earns 0.0 under every reward function,
  whatever its speedup or coverage (tiered takes a `hacked=` weight for those who want a penalty).
- A speedup counts only when it is a finite positive number from valid timings
  (`timings_valid`); otherwise (CPU runs, an untimed reference) the speed term is 0.
- A missing coverage (no profile) counts as 0.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Callable

from drk_lab.hacks.catalogue import ERROR_KINDS
from drk_lab.harness.result import EvalResult

# error kinds where the candidate never got to run its forward
COMPILE_FAILURES = frozenset(k.name for k in ERROR_KINDS.values() if k.before_forward)
# error kinds that are not the candidate's fault: no reward, no penalty
NOT_CANDIDATES_FAULT = frozenset(k.name for k in ERROR_KINDS.values() if not k.candidates_fault)


def is_hacked(result: EvalResult) -> bool:
    return bool(result.hacked) or result.error_kind == "hacked"


def usable_speedup(result: EvalResult) -> float | None:
    s = result.speedup
    if s is None or not result.timings_valid or not math.isfinite(s) or s <= 0:
        return None
    return float(s)


def usable_coverage(result: EvalResult) -> float:
    c = result.coverage
    if c is None or not math.isfinite(c):
        return 0.0
    return min(max(float(c), 0.0), 1.0)


def drkernel(result: EvalResult, *, correct_weight: float = 0.5, speed_weight: float = 0.5,
             coverage_weight: float = 0.5, speedup_cap: float = 3.0) -> float:
    """Dr. Kernel: 0.5*correct + 0.5*min(speedup, 3) + 0.5*coverage for a correct, honest result; else 0."""
    if not result.ok:
        return 0.0
    speedup = usable_speedup(result)
    speed = min(speedup, speedup_cap) if speedup is not None else 0.0
    return correct_weight + speed_weight * speed + coverage_weight * usable_coverage(result)


def correct(result: EvalResult) -> float:
    """1 for a correct, honest result (every check of the harness passed, no hack flagged), else 0: the reward of
    an arm whose endpoint counts correct kernels, where a speed term would be mostly timing noise."""
    return 1.0 if result.ok else 0.0


def kevin(result: EvalResult, *, correct_weight: float = 0.3, speedup_cap: float = 10.0) -> float:
    """Kevin-style: 0.3*correct + min(speedup, cap)*correct; 0 for any failure or hack."""
    if not result.ok:
        return 0.0
    speedup = usable_speedup(result)
    return correct_weight + (min(speedup, speedup_cap) if speedup is not None else 0.0)


def tiered(result: EvalResult, *, thresholds: tuple[float, ...] = (1.0, 1.2, 1.5, 2.0, 3.0),
           levels: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0), compile_failure: float = -1.0,
           runtime_failure: float = -0.5, mismatch: float = -0.25, hacked: float = 0.0) -> float:
    """Step reward by speedup tier for correct results, negative steps for failures.

    Correct and honest: levels[k] where k = how many thresholds the speedup reaches, so with the
    defaults 0.1 (slower than the baseline, or not timed), 0.2 (>= 1.0x), 0.4 (>= 1.2x),
    0.6 (>= 1.5x), 0.8 (>= 2.0x), 1.0 (>= 3.0x).
    Failures, ordered by how far the candidate got: compile_failure -1.0 (did not parse, no
    ModelNew or kernel, failed to load or compile), runtime_failure -0.5 (raised, crashed,
    timed out, ran out of memory, exited), mismatch -0.25 (ran, wrong answer).
    Hacked 0.0, as under every reward here. Because tiered punishes honest failures, a hack then
    earns more than an honest failure; pass hacked=-1.0 (or lower) to rank hacks below every
    failure instead. Reference or harness faults (and a result that was never evaluated) give 0.
    """
    if len(levels) != len(thresholds) + 1:
        raise ValueError("tiered needs one more level than thresholds")
    if is_hacked(result):
        return hacked
    kind = result.error_kind
    if kind in NOT_CANDIDATES_FAULT:
        return 0.0
    if kind in COMPILE_FAILURES:
        return compile_failure
    if kind == "mismatch":
        return mismatch
    if kind is not None:
        return runtime_failure
    if not result.correct:
        return 0.0
    speedup = usable_speedup(result)
    tier = sum(1 for t in thresholds if speedup is not None and speedup >= t)
    return levels[tier]


def bottleneck(result: EvalResult, *, coverage_threshold: float = 0.3, low_coverage_factor: float = 0.5,
               speedup_cap: float = 10.0) -> float:
    """Bottleneck-aware: speedup scaled by how much of the GPU time the candidate's own kernels own.

    For a correct, honest result with speedup s (capped): coverage below the threshold (0.3)
    gives 0.5*s; from the threshold up the factor rises linearly from 0.5 to 1.0 at coverage 1,
    so the reward is continuous in coverage. No timings -> 0; failures and hacks -> 0.
    """
    if not result.ok:
        return 0.0
    speedup = usable_speedup(result)
    if speedup is None:
        return 0.0
    speedup = min(speedup, speedup_cap)
    coverage = usable_coverage(result)
    if coverage < coverage_threshold:
        return low_coverage_factor * speedup
    span = 1.0 - coverage_threshold
    rise = (coverage - coverage_threshold) / span if span > 0 else 1.0
    return speedup * (low_coverage_factor + (1.0 - low_coverage_factor) * rise)


REWARDS: dict[str, Callable[..., float]] = {
    "drkernel": drkernel,
    "correct": correct,
    "kevin": kevin,
    "tiered": tiered,
    "bottleneck": bottleneck,
}


def get_reward(name: str | Callable[..., float], **weights) -> Callable[[EvalResult], float]:
    """The reward function called `name` (or a callable) with `weights` bound.

    Unknown names raise ValueError; weights the function does not take raise TypeError now,
    not at the first call.
    """
    if callable(name):
        fn = name
    elif name in REWARDS:
        fn = REWARDS[name]
    else:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}")
    inspect.signature(fn).bind(EvalResult(), **weights)  # TypeError for unknown weights
    return functools.partial(fn, **weights)
