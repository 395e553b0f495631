"""The one episode driver: a policy, many KernelEnv episodes, several turns, in lockstep.

    trajectories = run_many(tasks, policy, episode_schedule(3), samples=4, device="cpu")

Each turn: the live episodes' conversations go to the policy in one generate call (the first turn
asks for `samples` completions per task), their evaluations run concurrently in threads (each in its
own worker process), and every reply becomes a Turn of its episode's Trajectory; the context schedule
then decides which turns the next prompt holds. `drk eval` and RL rollouts both run this loop. What
differs is behind a `turns` object: ChatTurns (here) talks to any chat policy; rl/rollout.py's
TokenTurns feeds token ids, samples with per-turn seeds and keeps the per-token records RL trains on.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from drk_lab.agent.context import ContextSchedule, build_messages, episode_schedule, stts_schedule
from drk_lab.agent.env import KernelEnv
from drk_lab.agent.pipeline import progress_bar, record_turn, run_pipelined, wave_slices
from drk_lab.agent.trajectory import Trajectory, write_jsonl
from drk_lab.harness.evaluate import thread_pool
from drk_lab.harness.task import Task


@dataclass
class Episode:
    """One episode in flight: its environment, its trajectory so far and the turns its next prompt holds."""

    env: KernelEnv
    trajectory: Trajectory
    context: list[int]
    stopped: bool = False  # ended early by the turns object (a prompt or context too long)

    @property
    def live(self) -> bool:
        return not self.env.done and not self.stopped


def new_episode(task: Task, schedule: ContextSchedule, sample: int, *, reward_fn="drkernel", tokenizer=None,
                feedback_tokens: int = 2048, target_speedup: float | None = None, system_prompt: str | None = None,
                **eval_kwargs) -> Episode:
    env = KernelEnv(task, max_turns=schedule.turns, reward_fn=reward_fn, tokenizer=tokenizer,
                    feedback_tokens=feedback_tokens, target_speedup=target_speedup, system_prompt=system_prompt,
                    **eval_kwargs)
    prompt = env.reset()
    return Episode(env, Trajectory(task.name, prompt, sample=sample, reward_fn=env.reward_name,
                                   schedule=asdict(schedule), system_prompt=system_prompt), context=[])


class ChatTurns:
    """How the driver talks to a chat policy: conversations in, completions out.

    The driver calls admit() before each turn, generate() once per turn, record() after each new turn.
    After every evaluation the policy's observe(task_name, code, result) is called, if it has one
    (replies without code are not evaluated and not observed); with jsonl_path each trajectory is
    appended to that file when its episode ends."""

    def __init__(self, policy, samples: int = 1, sampling: dict | None = None, jsonl_path: str | Path | None = None):
        self.policy, self.samples, self.sampling, self.jsonl_path = policy, samples, sampling or {}, jsonl_path
        self.observe = getattr(policy, "observe", None)

    def admit(self, episode: Episode, index: int) -> bool:
        return True

    def generate(self, live: list[Episode], conversations: list[list[dict]], index: int, wave: int = 0,
                 on_complete=None) -> list:
        """One completion per live episode. On the first turn the episodes come in runs of `samples`
        of one task sharing one conversation, so each conversation is asked for that many. (`wave` and
        `on_complete` are for token policies, rl/rollout.py: here every completion comes at the end.)"""
        n = self.samples if index == 0 else 1
        if n == 1:
            return [c[0] for c in self.policy.generate(conversations, n=1, **self.sampling)]
        answers = self.policy.generate(conversations[::n], n=n, **self.sampling)
        return [c for group in answers for c in group]

    def record(self, episode: Episode, completion, info: dict, done: bool) -> None:
        if self.observe is not None and info["evaluated"]:
            self.observe(episode.env.task.name, info["code"], info["result"])
        if done and self.jsonl_path is not None:
            write_jsonl([episode.trajectory], self.jsonl_path)


def run_episodes(episodes: list[Episode], turns, schedule: ContextSchedule, *, tokenizer=None,
                 max_workers: int | None = None, progress: bool = True, waves: int = 1, pipelined: bool = False,
                 generation_guard=None) -> dict:
    """Drive the episodes to their end (see the module docstring); returns seconds spent generating and
    evaluating, and the number of turns taken. `waves` > 1 generates each turn in that many calls of whole
    groups; `pipelined` overlaps generation and evaluation (agent/pipeline.py: the same calls, the same
    samples, another order in time); `generation_guard()` is entered around each generate call there."""
    if pipelined:
        return run_pipelined(episodes, turns, schedule, tokenizer=tokenizer, max_workers=max_workers,
                             progress=progress, waves=waves, generation_guard=generation_guard)
    stats = {"generation_s": 0.0, "evaluation_s": 0.0, "turns": 0, "timeline": []}
    workers = max_workers or max(1, min(len(episodes), os.cpu_count() or 2))
    bar = progress_bar(progress, len(episodes) * schedule.turns)
    with thread_pool(workers) as pool:  # Ctrl-C or a Jupyter interrupt ends the evaluations in flight
        for index in range(schedule.turns):
            calls = []  # (live, conversations, completions) of each wave's generate call
            for w, wave in enumerate(wave_slices(episodes, waves)):
                live = [e for e in wave if e.live and turns.admit(e, index)]
                if not live:
                    continue
                conversations = [build_messages(e.trajectory.prompt, e.trajectory.turns, e.context,
                                                e.trajectory.system_prompt) for e in live]
                started = time.perf_counter()
                completions = turns.generate(live, conversations, index, wave=w)
                stats["generation_s"] += time.perf_counter() - started
                stats["timeline"].append(("generation", started, time.perf_counter()))
                calls.append((live, conversations, completions))
            if not calls:
                break
            items = [item for live, conversations, completions in calls
                     for item in zip(live, conversations, completions)]
            started = time.perf_counter()
            steps = list(pool.map(lambda item: item[0].env.step(item[2].text, item[2].finish_reason), items))
            stats["evaluation_s"] += time.perf_counter() - started
            stats["timeline"].append(("evaluation", started, time.perf_counter()))
            for (e, messages, completion), step in zip(items, steps):
                done = record_turn(e, index, schedule, messages, completion, step, turns, tokenizer)
                stats["turns"] += 1
                if bar is not None:
                    bar.update(1 + (schedule.turns - index - 1 if done else 0))
    if bar is not None:
        bar.close()
    return stats


def run_many(tasks: list[Task], policy, schedule: ContextSchedule | None = None, *, samples: int = 1,
             reward_fn="drkernel", tokenizer=None, feedback_tokens: int = 2048,
             target_speedup: float | None = None, system_prompt: str | None = None,
             sampling: dict | None = None, max_workers: int | None = None, progress: bool = True,
             jsonl_path: str | Path | None = None, timings: dict | None = None, **eval_kwargs) -> list[Trajectory]:
    """Run `samples` episodes per task under `schedule` (default: 3 turns, full context) with any chat
    policy. Returns the trajectories in task order, samples of a task together. `sampling` goes to
    policy.generate (temperature, max_tokens, ...), `eval_kwargs` to drk_lab.evaluate. A `timings` dict
    receives run_episodes' seconds spent generating and evaluating."""
    schedule = schedule or episode_schedule()
    episodes = [new_episode(task, schedule, s, reward_fn=reward_fn, tokenizer=tokenizer,
                            feedback_tokens=feedback_tokens, target_speedup=target_speedup,
                            system_prompt=system_prompt, **eval_kwargs)
                for task in tasks for s in range(samples)]
    stats = run_episodes(episodes, ChatTurns(policy, samples, sampling, jsonl_path), schedule, tokenizer=tokenizer,
                         max_workers=max_workers, progress=progress)
    if timings is not None:
        timings.update(stats)
    return [e.trajectory for e in episodes]


def run_episode(task: Task, policy, max_turns: int = 3, *, context_turns: int | None = None,
                strategy: str = "last_k", **kwargs) -> Trajectory:
    """One multi-turn episode; context_turns limits the earlier turns the prompt holds (by strategy).
    kwargs as for run_many (reward_fn, tokenizer, sampling, jsonl_path, device, ...)."""
    kwargs.setdefault("progress", False)
    return run_many([task], policy, episode_schedule(max_turns, context_turns, strategy), **kwargs)[0]


def run_stts(task: Task, policy, max_user_turns: int = 5, remain_turns: int = 4, iterations: int = 10,
             strategy: str = "best_window", jsonl_path: str | Path | None = None, **kwargs) -> Trajectory:
    """Sequential test-time scaling on one task (context.py explains the turn count)."""
    kwargs.setdefault("progress", False)
    schedule = stts_schedule(max_user_turns, remain_turns, iterations, strategy)
    return run_many([task], policy, schedule, jsonl_path=jsonl_path, **kwargs)[0]
