"""Turn and Trajectory: what one episode produced, as JSON-friendly records (JSONL on disk)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from drk_lab.harness.result import EvalResult


@dataclass
class Turn:
    task: str
    index: int  # position in the trajectory, from 0
    iteration: int  # STTS iteration, from 0 (0 throughout a plain episode without a rolling window)
    context: list[int]  # indices of the earlier turns that this turn's prompt held
    prompt_tokens: int  # tokens of the prompt's message contents (about chars/4 without a tokenizer)
    prompt_chars: int
    response: str
    finish_reason: str
    extraction: str  # extraction.EXTRACTION_OUTCOMES
    code: str | None  # None when the reply had no usable code (nothing was evaluated)
    result: EvalResult
    reward: float
    feedback: str
    token_ids: list[int] | None = None  # the completion's tokens and log-probabilities when the
    logprobs: list[float] | None = None  # policy reports them

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "result"}
        d["result"] = self.result.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Turn:
        return cls(**{**d, "result": EvalResult.from_dict(d["result"])})


@dataclass
class Trajectory:
    task: str
    prompt: str  # the first user message
    turns: list[Turn] = field(default_factory=list)
    sample: int = 0  # which of a task's samples
    reward_fn: str = "drkernel"
    schedule: dict = field(default_factory=dict)  # ContextSchedule as a dict
    system_prompt: str | None = None

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def best(self) -> Turn | None:
        """The highest-reward turn (the earliest among equals)."""
        return max(self.turns, key=lambda t: (t.reward, -t.index)) if self.turns else None

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "turns"}
        d["turns"] = [t.to_dict() for t in self.turns]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Trajectory:
        return cls(**{**d, "turns": [Turn.from_dict(t) for t in d["turns"]]})


def write_jsonl(trajectories: list[Trajectory], path: str | Path, append: bool = True) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict()) + "\n")


def read_jsonl(path: str | Path) -> list[Trajectory]:
    with Path(path).open() as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]
