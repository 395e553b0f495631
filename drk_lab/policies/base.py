"""The policy interface every kernel writer implements.

A policy turns chat conversations into completions:

    policy.generate(messages_batch, n=1, **sampling) -> list[list[Completion]]

`messages_batch` is a list of conversations, each a list of {"role", "content"} dicts; the answer
holds `n` completions per conversation, in order. Backends that see tokens fill `token_ids` and
`logprobs` (one log-probability per generated token); the others leave them None.

A policy that learns from evaluations (the evolutionary search) also has
`observe(task_name, code, result)`; the episode runners call it after every evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Completion:
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"  # "stop" or "length" (cut off by the token limit)
    extra: dict = field(default_factory=dict)


class Policy(Protocol):
    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]: ...
