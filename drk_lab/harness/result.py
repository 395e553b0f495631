"""EvalResult: everything one evaluation found, as a JSON-friendly dataclass."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from drk_lab.hacks import catalogue

# The fixed set of failure classes (hacks/catalogue.py says what each means). None: nothing was wrong.
ERROR_KINDS = tuple(catalogue.ERROR_KINDS)


@dataclass
class EvalResult:
    compiled: bool = False
    correct: bool = False
    hacked: bool = False
    hack_reasons: list[str] = field(default_factory=list)
    error_kind: str | None = None
    error: str | None = None
    speedup: float | None = None  # eager reference median / candidate median
    speedup_compile: float | None = None  # torch.compile'd reference median / candidate median
    runtime_ms: float | None = None
    runtime_iqr_ms: float | None = None
    ref_runtime_ms: float | None = None
    ref_compile_runtime_ms: float | None = None
    coverage: float | None = None
    kernels: list[dict] = field(default_factory=list)
    trials: int = 0  # correctness trials that passed
    timing_trials: int = 0  # timed trials of the candidate that ran (timing stops early once its median is precise)
    seeds: list[int] = field(default_factory=list)
    device: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    timings_valid: bool = False
    timing_note: str | None = None  # why timings are missing or doubtful
    gpu_clock: dict = field(default_factory=dict)  # per timed model: SM clock (MHz) before and after its trials, slowdowns
    bandwidth_fraction: float | None = None  # bytes of inputs + outputs per second / measured copy bandwidth
    bottleneck: str | None = None  # the profile in a sentence, for feedback
    max_abs_error: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # the correctness trials' seconds by part, summed over the trials: inputs, poison (freed memory
    # filled), candidate (its call and a synchronize), checks, reference (call and synchronize), compare
    trial_seconds: dict[str, float] = field(default_factory=dict)
    eval_seconds: float | None = None
    worker_pid: int | None = None  # the worker process that ran it
    worker_job: int = 0  # which job of that worker: 1 is a fresh worker, more is a reused one (reuse.py)
    stdout: str = ""  # bounded head and tail of what the candidate printed
    notes: list[str] = field(default_factory=list)  # checks that were skipped, and why

    def __post_init__(self):
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"unknown error_kind {self.error_kind!r}")

    @property
    def ok(self) -> bool:
        return self.correct and not self.hacked and self.error_kind is None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EvalResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return cls.from_dict(json.loads(text))

    def summary(self) -> str:
        """One line for tables and logs."""
        if self.hacked:
            status = "HACKED " + ",".join(self.hack_reasons)
        elif self.error_kind:
            status = f"{self.error_kind}: {(self.error or '').splitlines()[0][:120] if self.error else ''}"
        else:
            status = "correct" if self.correct else "not evaluated"
        if self.speedup is not None:
            status += f"  speedup {self.speedup:.2f}x"
            if self.speedup_compile is not None:
                status += f" (vs compile {self.speedup_compile:.2f}x)"
        return status
