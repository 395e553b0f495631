"""The policy interface every kernel writer implements, and the scripted policy that replays files.

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
from pathlib import Path
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


def assistant_turns(messages: list[dict]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant")


class ScriptedPolicy:
    """Replays per-turn answer files from a folder: turn k of a conversation gets the k-th file.

    Files are taken in name order (turn_1.md, turn_2.py, ...). A `.py` file is the code alone and is
    wrapped in a fenced python block; any other file is the whole answer text. Past the last file
    the last one is repeated.
    """

    def __init__(self, folder: str | Path | None = None, answers: list[str] | None = None):
        if answers is None:
            if folder is None:
                raise ValueError("ScriptedPolicy needs a folder or a list of answers")
            files = sorted(p for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith("."))
            answers = [f"```python\n{p.read_text()}```" if p.suffix == ".py" else p.read_text() for p in files]
        if not answers:
            raise ValueError(f"ScriptedPolicy: no answers in {folder}")
        self.answers = answers

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]:
        out = []
        for messages in messages_batch:
            turn = min(assistant_turns(messages), len(self.answers) - 1)
            out.append([Completion(self.answers[turn]) for _ in range(n)])
        return out
