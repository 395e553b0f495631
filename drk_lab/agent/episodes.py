"""Which earlier turns a model sees, and the runners that drive a policy through KernelEnv.

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

run_many runs tasks x samples episodes in lockstep: one policy.generate call per turn for all
live episodes (the first turn asks for `samples` completions per task), then their evaluations
in parallel threads (each evaluation runs in its own worker process). Every finished episode is a
Trajectory; with jsonl_path each is appended to that file as one JSON line when it finishes.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drk_lab.agent.env import KernelEnv, messages_tokens
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import Task

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
class Turn:
    task: str
    index: int  # position in the trajectory, from 0
    iteration: int  # STTS iteration, from 0 (0 throughout a plain episode without a rolling window)
    context: list[int]  # indices of the earlier turns that this turn's prompt held
    prompt_tokens: int  # tokens of the prompt's message contents (about chars/4 without a tokenizer)
    prompt_chars: int
    response: str
    finish_reason: str
    extraction: str  # env.EXTRACTION_OUTCOMES
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


# -- schedules ---------------------------------------------------------------------------------
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


# -- runners -----------------------------------------------------------------------------------
@dataclass
class _Episode:
    env: KernelEnv
    trajectory: Trajectory
    context: list[int] = field(default_factory=list)


def run_many(tasks: list[Task], policy, schedule: ContextSchedule | None = None, *, samples: int = 1,
             reward_fn="drkernel", tokenizer=None, feedback_tokens: int = 2048,
             target_speedup: float | None = None, system_prompt: str | None = None,
             sampling: dict | None = None, max_workers: int | None = None, progress: bool = True,
             jsonl_path: str | Path | None = None, **eval_kwargs) -> list[Trajectory]:
    """Run `samples` episodes per task under `schedule` (default: 3 turns, full context).

    Returns the trajectories in task order, samples of a task together. `sampling` goes to
    policy.generate (temperature, max_tokens, ...), `eval_kwargs` to drk_lab.harness.evaluate. After every
    evaluation the policy's observe(task_name, code, result) is called, if it has one (replies
    without code are not evaluated and not observed). With jsonl_path each trajectory is appended
    to that file when its episode ends.
    """
    schedule = schedule or episode_schedule()
    sampling = sampling or {}
    episodes = []
    for task in tasks:
        for s in range(samples):
            env = KernelEnv(task, max_turns=schedule.turns, reward_fn=reward_fn, tokenizer=tokenizer,
                            feedback_tokens=feedback_tokens, target_speedup=target_speedup,
                            system_prompt=system_prompt, **eval_kwargs)
            prompt = env.reset()
            episodes.append(_Episode(env, Trajectory(task.name, prompt, sample=s, reward_fn=env.reward_name,
                                                     schedule=asdict(schedule), system_prompt=system_prompt)))
    observe = getattr(policy, "observe", None)
    workers = max_workers or max(1, min(len(episodes), os.cpu_count() or 2))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(episodes) * schedule.turns, desc="turns", unit="turn")
    with ThreadPoolExecutor(workers) as pool:
        for index in range(schedule.turns):
            live = [e for e in episodes if not e.env.done]
            if not live:
                break
            conversations = [build_messages(e.trajectory.prompt, e.trajectory.turns, e.context, system_prompt)
                             for e in live]
            completions = _generate(policy, live, conversations, samples if index == 0 else 1, sampling)
            steps = list(pool.map(lambda ec: ec[0].env.step(ec[1].text, ec[1].finish_reason),
                                  zip(live, completions)))
            for e, messages, completion, (feedback, reward, done, info) in zip(live, conversations, completions, steps):
                turn = Turn(task=e.env.task.name, index=index, iteration=schedule.iteration(index),
                            context=list(e.context), prompt_tokens=messages_tokens(messages, tokenizer),
                            prompt_chars=sum(len(m["content"]) for m in messages), response=completion.text,
                            finish_reason=completion.finish_reason, extraction=info["extraction"],
                            code=info["code"], result=info["result"], reward=reward, feedback=feedback,
                            token_ids=completion.token_ids, logprobs=completion.logprobs)
                e.trajectory.turns.append(turn)
                e.context = schedule.next_context(e.trajectory.turns, e.context)
                if observe is not None and info["evaluated"]:
                    observe(e.env.task.name, info["code"], info["result"])
                if bar is not None:
                    bar.update(1 + (schedule.turns - index - 1 if done else 0))
                if done and jsonl_path is not None:
                    write_jsonl([e.trajectory], jsonl_path)
    if bar is not None:
        bar.close()
    return [e.trajectory for e in episodes]


def _generate(policy, live: list[_Episode], conversations: list[list[dict]], n: int, sampling: dict) -> list:
    """One completion per live episode. With n > 1 (the first turn) the episodes come in runs of n
    samples of one task sharing one conversation, so each conversation is asked for n completions."""
    if n == 1:
        return [c[0] for c in policy.generate(conversations, n=1, **sampling)]
    answers = policy.generate(conversations[::n], n=n, **sampling)
    return [c for group in answers for c in group]


def run_episode(task: Task, policy, max_turns: int = 3, *, context_turns: int | None = None,
                strategy: str = "last_k", **kwargs) -> Trajectory:
    """One multi-turn episode; context_turns limits the earlier turns the prompt holds (by strategy).
    kwargs as for run_many (reward_fn, tokenizer, sampling, jsonl_path, device, ...)."""
    kwargs.setdefault("progress", False)
    return run_many([task], policy, episode_schedule(max_turns, context_turns, strategy), **kwargs)[0]


def run_stts(task: Task, policy, max_user_turns: int = 5, remain_turns: int = 4, iterations: int = 10,
             strategy: str = "best_window", jsonl_path: str | Path | None = None, **kwargs) -> Trajectory:
    """Sequential test-time scaling on one task (see the module docstring for the turn count)."""
    kwargs.setdefault("progress", False)
    schedule = stts_schedule(max_user_turns, remain_turns, iterations, strategy)
    return run_many([task], policy, schedule, jsonl_path=jsonl_path, **kwargs)[0]
