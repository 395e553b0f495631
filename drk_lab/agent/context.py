"""Which earlier turns a model sees: context strategies and schedules (plain episodes, STTS).

Context strategies (select_turns), each choosing k of the turns so far, kept in their order:
- "top_k": the k turns with the highest reward (ties: the later turn);
- "best_window": the k consecutive turns with the highest summed reward (ties: the latest window);
- "last_k": the k most recent turns.

A ContextSchedule says how many turns an episode has and when its context is rebuilt: whenever the
context holds `limit` turns, it is replaced by select_turns(all turns so far, keep, strategy).
- A plain episode keeps every earlier turn (limit None), or a rolling k (limit k+1, keep k).
- Sequential test-time scaling (STTS, Dr. Kernel's evaluation): limit = max_user_turns,
  keep = remain_turns. The first iteration fills the context with max_user_turns turns; each later
  iteration starts from remain_turns kept turns and adds max_user_turns - remain_turns new ones
  until the context is full again. So
      total turns = max_user_turns + (iterations - 1) * (max_user_turns - remain_turns),
  which is 5 + 9 * 1 = 14 for Dr. Kernel's (5, 4, 10).
"""

from __future__ import annotations

from dataclasses import dataclass

from drk_lab.agent.trajectory import Turn

STRATEGIES = ("top_k", "best_window", "last_k")


def select_turns(turns: list, k: int, strategy: str) -> list[int]:
    """Indices (ascending) of the k turns to keep; `turns` holds Turn records or plain rewards."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown context strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    rewards = [float(t.reward) if isinstance(t, Turn) else float(t) for t in turns]
    n = len(rewards)
    k = min(max(k, 0), n)
    if k == 0:
        return []
    if strategy == "last_k":
        return list(range(n - k, n))
    if strategy == "top_k":
        return sorted(sorted(range(n), key=lambda i: (rewards[i], i), reverse=True)[:k])
    best_start = max(range(n - k + 1), key=lambda s: (sum(rewards[s:s + k]), s))
    return list(range(best_start, best_start + k))


@dataclass
class ContextSchedule:
    turns: int  # turns per episode
    limit: int | None = None  # rebuild the context when it holds this many turns; None: never
    keep: int = 0  # turns kept by a rebuild
    strategy: str = "best_window"

    def __post_init__(self):
        if self.turns < 1:
            raise ValueError("a schedule needs at least one turn")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown context strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        if self.limit is not None and not 0 <= self.keep < self.limit:
            raise ValueError(f"need 0 <= keep < limit, got keep={self.keep}, limit={self.limit}")

    def next_context(self, turns: list[Turn], context: list[int]) -> list[int]:
        """The context after turns[-1] was added to it."""
        grown = context + [len(turns) - 1]
        if self.limit is not None and len(grown) >= self.limit:
            return select_turns(turns, self.keep, self.strategy)
        return grown

    def iteration(self, index: int) -> int:
        """Which iteration turn `index` (from 0) belongs to: the context was rebuilt that many times."""
        if self.limit is None or index < self.limit:
            return 0
        return 1 + (index - self.limit) // (self.limit - self.keep)


def stts_total_turns(max_user_turns: int, remain_turns: int, iterations: int) -> int:
    return max_user_turns + (iterations - 1) * (max_user_turns - remain_turns)


def episode_schedule(max_turns: int = 3, context_turns: int | None = None, strategy: str = "last_k") -> ContextSchedule:
    """A plain episode: every earlier turn in the context, or at most `context_turns` of them."""
    if context_turns is None:
        return ContextSchedule(turns=max_turns, strategy=strategy)
    return ContextSchedule(turns=max_turns, limit=context_turns + 1, keep=context_turns, strategy=strategy)


def stts_schedule(max_user_turns: int = 5, remain_turns: int = 4, iterations: int = 10,
                  strategy: str = "best_window") -> ContextSchedule:
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    if not 0 <= remain_turns < max_user_turns:
        raise ValueError(f"need 0 <= remain_turns < max_user_turns, got {remain_turns}, {max_user_turns}")
    return ContextSchedule(turns=stts_total_turns(max_user_turns, remain_turns, iterations),
                           limit=max_user_turns, keep=remain_turns, strategy=strategy)


def build_messages(initial_prompt: str, turns: list[Turn], kept: list[int],
                   system_prompt: str | None = None) -> list[dict]:
    """The conversation a policy sees: the prompt, then each kept turn's reply and feedback."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": initial_prompt})
    for i in kept:
        messages.append({"role": "assistant", "content": turns[i].response})
        messages.append({"role": "user", "content": turns[i].feedback})
    return messages
