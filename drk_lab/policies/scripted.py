"""ScriptedPolicy: replays answer files, one per turn (tests, demos, and `drk eval --policy scripted:FOLDER`)."""

from __future__ import annotations

from pathlib import Path

from drk_lab.policies.base import Completion


class ScriptedPolicy:
    """Replays per-turn answer files from a folder: turn k of an episode gets the k-th file.

    Files are taken in name order (turn_1.md, turn_2.py, ...). A `.py` file is the code alone and is
    wrapped in a fenced python block; any other file is the whole answer text. Past the last file
    the last one is repeated. The turn of a conversation is the number of earlier generate() calls
    that held its first user message (the task's prompt), so trimmed contexts do not confuse it;
    run one episode per task at a time.
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
        self.prompt_calls: dict[str, int] = {}  # first user message -> generate() calls that held it

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]:
        prompts = [next((m["content"] for m in messages if m["role"] == "user"), "") for messages in messages_batch]
        turns = {p: self.prompt_calls.get(p, 0) for p in prompts}
        for p in turns:
            self.prompt_calls[p] = turns[p] + 1
        return [[Completion(self.answers[min(turns[p], len(self.answers) - 1)]) for _ in range(n)] for p in prompts]
