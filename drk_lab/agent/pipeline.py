"""Pipelined episodes: the same generate calls as the synchronous driver, overlapped with the evaluations.

    stats = run_episodes(episodes, turns, schedule, waves=2, pipelined=True)      # agent/episodes.py

The synchronous driver (episodes.py) runs each turn phase by phase: every wave's generate call, then all
the turn's evaluations, then the next turn. Here the generator (this thread) never waits for evaluations
it does not need:

- a reply goes to an evaluation thread as soon as it is complete: when the turns object streams rows as
  they finish (rl/rollout.py's token policies call `on_complete` per finished row), while the rest of its
  batch is still decoding; otherwise when its generate call returns;
- a wave (whole groups, episodes.wave_slices) generates its next turn as soon as all its evaluations of
  this turn are back, while other waves' evaluations still run; among the waves that are ready, the
  earliest turn goes first, then the first wave.

What runs is decided by the episodes, the waves and the seeds, never by the clock: each wave's turn is one
generate call over the same live episodes with the same seed as in the synchronous driver, so both modes
sample the same tokens and the evaluations (pure functions of the code, apart from timing noise on a GPU)
give the same rewards (tests/agent/test_pipeline.py). Only the order in time differs.

Why a generation guard: correctness trials may share the GPU with the sampler, but an evaluation's timing
must not (its kernels would be timed beside the sampler's). rl/rollout.py passes the harness's shared GPU
lock, held through each generate call, so timing (the exclusive lock) waits for the call to end.
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass

from drk_lab.agent.context import ContextSchedule, build_messages
from drk_lab.agent.feedback import messages_tokens
from drk_lab.agent.trajectory import Turn
from drk_lab.harness.evaluate import thread_pool


def record_turn(e, index: int, schedule: ContextSchedule, messages: list[dict], completion, step: tuple,
                turns, tokenizer=None) -> bool:
    """Append one evaluated reply to its episode as a Turn, tell the turns object, move the context on;
    returns whether the episode is done."""
    feedback, reward, done, info = step
    e.trajectory.turns.append(Turn(
        task=e.env.task.name, index=index, iteration=schedule.iteration(index), context=list(e.context),
        prompt_tokens=messages_tokens(messages, tokenizer),
        prompt_chars=sum(len(m["content"]) for m in messages), response=completion.text,
        finish_reason=completion.finish_reason, extraction=info["extraction"], code=info["code"],
        result=info["result"], reward=reward, feedback=feedback,
        token_ids=None if completion.token_ids is None else list(completion.token_ids),
        logprobs=None if completion.logprobs is None else list(completion.logprobs)))
    turns.record(e, completion, info, done)
    e.context = schedule.next_context(e.trajectory.turns, e.context)
    return done


def wave_slices(episodes: list, waves: int) -> list[list]:
    """The episodes in `waves` runs of whole groups (a group: the samples of one task, which start at sample 0),
    as even as the groups allow. Each wave is generated in its own calls, in both modes."""
    groups: list[list] = []
    for e in episodes:
        if not groups or e.trajectory.sample == 0:
            groups.append([])
        groups[-1].append(e)
    count = max(1, min(waves, len(groups)))
    return [[e for g in groups[w * len(groups) // count:(w + 1) * len(groups) // count] for e in g]
            for w in range(count)]


def progress_bar(progress: bool, total: int):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="turns", unit="turn")


@dataclass
class Wave:
    """Whole groups generated together: the turn they generate next, and their evaluations still out."""

    episodes: list
    turn: int = 0
    in_flight: int = 0
    waiting: bool = False  # this turn is generated; its evaluations are not all back
    finished: bool = False


def next_wave(waves: list[Wave]) -> int | None:
    """The wave to generate now: of those ready (not finished, not waiting), the earliest turn, then the first."""
    ready = [(w.turn, k) for k, w in enumerate(waves) if not w.finished and not w.waiting]
    return min(ready)[1] if ready else None


def timed_step(episode, completion) -> tuple:
    started = time.perf_counter()
    step = episode.env.step(completion.text, completion.finish_reason)
    return step, started, time.perf_counter()


def run_pipelined(episodes: list, turns, schedule: ContextSchedule, *, tokenizer=None,
                  max_workers: int | None = None, progress: bool = True, waves: int = 1,
                  generation_guard=None) -> dict:
    """run_episodes(pipelined=True): see the module docstring. Returns the same stats as the synchronous
    driver, evaluation_s being the wall time with at least one evaluation running, plus `timeline`:
    (kind, start, end) of every generate call and evaluation (time_split reads it)."""
    stats = {"generation_s": 0.0, "evaluation_s": 0.0, "turns": 0, "timeline": []}
    guard = generation_guard or contextlib.nullcontext
    state = [Wave(wave) for wave in wave_slices(episodes, waves)]
    workers = max_workers or max(1, min(len(episodes), os.cpu_count() or 2))
    bar = progress_bar(progress, len(episodes) * schedule.turns)
    futures: dict = {}  # future -> (wave index, episode, messages, completion, turn)
    with thread_pool(workers) as pool:
        def submit(wave: int, item: tuple) -> None:
            e, messages, completion = item
            futures[pool.submit(timed_step, e, completion)] = (wave, e, messages, completion, state[wave].turn)

        while True:
            k = next_wave(state)
            if k is not None:
                generate_wave(k, state, turns, stats, guard, submit)
            elif futures:
                wait(list(futures), return_when=FIRST_COMPLETED)
            else:
                break
            for future in [f for f in futures if f.done()]:
                k, e, messages, completion, index = futures.pop(future)
                step, started, ended = future.result()
                stats["timeline"].append(("evaluation", started, ended))
                done = record_turn(e, index, schedule, messages, completion, step, turns, tokenizer)
                stats["turns"] += 1
                if bar is not None:
                    bar.update(1 + (schedule.turns - index - 1 if done else 0))
                wave = state[k]
                wave.in_flight -= 1
                if wave.in_flight == 0:
                    wave.waiting, wave.turn = False, wave.turn + 1
                    wave.finished = wave.turn >= schedule.turns
    if bar is not None:
        bar.close()
    stats["evaluation_s"] = busy_seconds([(a, b) for kind, a, b in stats["timeline"] if kind == "evaluation"])
    return stats


def generate_wave(k: int, state: list[Wave], turns, stats: dict, guard, submit) -> None:
    """Wave k's generate call for its next turn; each finished reply is handed to `submit` at once."""
    wave, index = state[k], state[k].turn
    live = [e for e in wave.episodes if e.live and turns.admit(e, index)]
    if not live:
        wave.finished = True
        return
    conversations = [build_messages(e.trajectory.prompt, e.trajectory.turns, e.context,
                                    e.trajectory.system_prompt) for e in live]
    sent = set()

    def on_complete(row: int, completion) -> None:
        sent.add(row)
        submit(k, (live[row], conversations[row], completion))

    wave.waiting, wave.in_flight = True, len(live)
    started = time.perf_counter()
    with guard():
        completions = turns.generate(live, conversations, index, wave=k, on_complete=on_complete)
    ended = time.perf_counter()
    stats["generation_s"] += ended - started
    stats["timeline"].append(("generation", started, ended))
    for row, item in enumerate(zip(live, conversations, completions)):
        if row not in sent:
            submit(k, item)


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def time_split(timeline: list[tuple[str, float, float]], start: float, end: float) -> dict:
    """Where the wall time from start to end went: seconds generating, evaluating and training (each the
    union of its intervals), both generating and evaluating at once (overlap_s), and none of them (idle_s)."""
    by_kind: dict[str, list] = {}
    for kind, a, b in timeline:
        by_kind.setdefault(kind, []).append((max(a, start), min(b, end)))
    split = {f"{kind}_s": busy_seconds(by_kind.get(kind, [])) for kind in ("generation", "evaluation", "training")}
    busy = busy_seconds([i for kind in by_kind for i in by_kind[kind]])
    split["overlap_s"] = split["generation_s"] + split["evaluation_s"] - busy_seconds(
        by_kind.get("generation", []) + by_kind.get("evaluation", []))
    split["idle_s"] = max(0.0, (end - start) - busy)
    split["wall_s"] = end - start
    return split
