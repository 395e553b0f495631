"""Teacher trajectories through KernelEnv, and the SFT rows made from them.

    stats = run_teacher(items, "out/sft", turns=3, device="cuda", jobs=16, time_limit=540)
    rows = sft_rows(read_trajectories("out/sft"), specs)

The teacher is a Policy (TeacherPolicy): asked for turn t of a task's episode, it answers with the
teacher's turn-t reply. Each episode runs on the one episode driver (agent/episodes.run_many), so every
turn is evaluated by the harness and each user message between turns is exactly KernelEnv's feedback.
The episodes run in a continuous pool: `jobs` trajectories at once (so `jobs` evaluations in flight),
and as soon as one ends it is appended to trajectories.jsonl (one file per GPU with several) and the
next task starts; nothing waits for the slowest trajectory of a group. On a GPU each task's reference
is timed once, before its first turn (measure_baseline). A rerun skips the tasks already there, and
`time_limit` starts no trajectory that would end after it (judged by the mean duration so far), so a
cut-short run keeps its work.

The SFT rule: an assistant turn is kept only if it is correct and not flagged; a trajectory keeps its
turns up to the first one that is not (the feedback after a failed turn is about that turn), then,
where speedups were measured, ends at its fastest kept turn (a slower turn stays only when a later
turn recovers). Trajectories with no kept turn give no row. The one exception is a repair trajectory
(run_teacher(repairs=True), drk_lab/data/bugs.py): its planted, failed first turn is kept when the
repair after it is correct, marked "train": False so that SFT reads it as context only.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from drk_lab.agent.prompts import initial_prompt
from drk_lab.agent.trajectory import write_jsonl
from drk_lab.common import models
from drk_lab.data.bugs import PlantedBug, plant_bug
from drk_lab.data.spec import TaskSpec
from drk_lab.data.teacher import REPAIR_PLAN, answer, repair_answer
from drk_lab.policies.base import Completion

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


class TeacherPolicy:
    """Answers turn t (1 + the assistant messages so far) of the conversation whose first user message is
    a known task's prompt with answer(spec, t). A task with a planted bug (bugs_by_prompt) is a repair
    trajectory: turn 1 answers the bug's slightly different task, turn 2 fixes it (repair_answer), and
    turn t >= 3 is the teacher's turn t - 1."""

    def __init__(self, specs_by_prompt: dict[str, TaskSpec], bugs_by_prompt: dict[str, PlantedBug] | None = None):
        self.specs_by_prompt = specs_by_prompt
        self.bugs_by_prompt = bugs_by_prompt or {}

    def reply(self, prompt: str, turn: int) -> str:
        spec, bug = self.specs_by_prompt[prompt], self.bugs_by_prompt.get(prompt)
        if bug is None:
            return answer(spec, turn)
        if turn == 1:
            return answer(bug.spec, 1)
        return repair_answer(spec, bug.what) if turn == 2 else answer(spec, turn - 1)

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]:
        out = []
        for messages in messages_batch:
            prompt = next(m["content"] for m in messages if m["role"] == "user")
            turn = 1 + sum(m["role"] == "assistant" for m in messages)
            out.append([Completion(self.reply(prompt, turn)) for _ in range(n)])
        return out


def trajectory_files(out_dir) -> list[Path]:
    """The JSONL files of a run folder: trajectories.jsonl, and one per GPU when spread over several."""
    return sorted(Path(out_dir).glob("trajectories*.jsonl"))


def done_tasks(out_dir) -> set[str]:
    """Task names of the trajectories already in a run folder (a torn last line is ignored)."""
    return {traj.task for traj in read_trajectories(out_dir)}


def read_trajectories(out_dir) -> list:
    """Every complete trajectory of a run folder, the first of each task where one appears twice (a folder
    restored from an earlier run's combined file beside that run's own files)."""
    from drk_lab.agent.trajectory import Trajectory

    out, seen = [], set()
    for path in trajectory_files(out_dir):
        for line in path.read_text().splitlines():
            try:
                traj = Trajectory.from_dict(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line torn by a run that was killed
            if traj.task not in seen:
                seen.add(traj.task)
                out.append(traj)
    return out


def run_teacher(items: list[tuple[TaskSpec, object]], out_dir, *, turns: int = 3, jobs: int = 16,
                time_limit: float | None = None, progress: bool = True, devices: list[str] | None = None,
                repairs: bool = False, seed: int = 0, **eval_kwargs) -> dict:
    """Teacher episodes for (spec, task) pairs, appended to out_dir/trajectories.jsonl (module docstring).
    A continuous pool: `jobs` trajectories run at once, each turn by turn, and when one ends (written at
    once) the next starts, so no slot waits for another trajectory. devices: several GPUs ("cuda:0",
    "cuda:1", ...): the tasks are dealt out round-robin, a pool of `jobs` on each, one JSONL file per GPU.
    repairs: every trajectory is a repair (TeacherPolicy) with a bug planted from `seed` and the task's
    name; tasks with no pointwise operator to change are left out.
    eval_kwargs go to the harness (device, timing_trials, correctness_trials, ...). Returns counts and
    seconds, the most trajectories seen in flight at once ("peak_in_flight") and the share of slot-seconds
    that had a trajectory in them ("slots_busy_share")."""
    from concurrent.futures import ThreadPoolExecutor

    from drk_lab.agent.context import episode_schedule
    from drk_lab.agent.episodes import run_many

    started = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = done_tasks(out_dir)
    todo = [(spec, task) for spec, task in items if task.name not in done]
    skipped_done = len(items) - len(todo)
    bugs = {task.name: plant_bug(spec, random.Random(f"{seed}:{task.name}")) for spec, task in todo} if repairs else {}
    todo = [(spec, task) for spec, task in todo if not repairs or bugs[task.name] is not None]
    device = eval_kwargs.pop("device", None)
    if devices and len(devices) > 1:
        lanes = [(d, out_dir / f"trajectories-{i}.jsonl") for i, d in enumerate(devices)]
    else:
        lanes = [(devices[0] if devices else device, out_dir / "trajectories.jsonl")]
    queues = [deque(todo[i::len(lanes)]) for i in range(len(lanes))]
    schedule = episode_schedule(turns)
    stats = {"skipped_done": skipped_done, "no_bug_to_plant": len(items) - skipped_done - len(todo), "run": 0,
             "stopped_at_time_limit": False, "peak_in_flight": 0}
    guard = threading.Lock()  # the queues, the stats, the durations and the JSONL files
    durations: list[float] = []  # of finished trajectories, for the time limit's estimate
    in_flight = [0]
    occupancy = [0.0, started]  # trajectory-seconds in flight so far, and when in_flight last changed

    def count(change: int) -> None:  # under the guard
        now = time.monotonic()
        occupancy[0] += in_flight[0] * (now - occupancy[1])
        occupancy[1] = now
        in_flight[0] += change

    def stop_starting() -> None:
        with guard:
            for queue in queues:
                queue.clear()

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="trajectories", unit="traj")

    def next_item(queue: deque):
        with guard:
            if not queue:
                return None
            # a trajectory that would end after the time limit is not started (estimate: the mean so far)
            expected = statistics.fmean(durations) if durations else 0.0
            if time_limit is not None and time.monotonic() - started + expected > time_limit:
                stats["stopped_at_time_limit"] = True
                queue.clear()
                return None
            count(+1)
            stats["peak_in_flight"] = max(stats["peak_in_flight"], in_flight[0])
            return queue.popleft()

    def slot(lane: int) -> None:
        device, path = lanes[lane]
        while (item := next_item(queues[lane])) is not None:
            spec, task = item
            begun = time.monotonic()
            try:
                if device not in (None, "cpu") and eval_kwargs.get("timing", True):
                    measure_baseline(task, device, eval_kwargs)
                prompt = initial_prompt(task)
                policy = TeacherPolicy({prompt: spec}, {prompt: bugs[task.name]} if repairs else None)
                trajectory = run_many([task], policy, schedule, max_workers=1, progress=False, device=device,
                                      **eval_kwargs)[0]
            except BaseException:
                stop_starting()  # the other slots start nothing more; the error reaches the caller
                raise
            finally:
                with guard:
                    count(-1)
            with guard:
                write_jsonl([trajectory], path)
                durations.append(time.monotonic() - begun)
                stats["run"] += 1
                if bar is not None:
                    bar.update(1)

    with ThreadPoolExecutor(jobs * len(lanes)) as pool:
        slots = [pool.submit(slot, lane) for lane in range(len(lanes)) for _ in range(jobs)]
        try:
            for future in slots:
                future.result()
        except BaseException:  # an error or Ctrl-C: the trajectories in flight end (and are kept), no new one starts
            stop_starting()
            raise
    if bar is not None:
        bar.close()
    stats["seconds"] = round(time.monotonic() - started, 1)
    count(0)
    # the share of the run's slot-seconds with a trajectory in them (below 1: slots idle, e.g. at the end)
    stats["slots_busy_share"] = round(occupancy[0] / max(1e-9, (occupancy[1] - started) * jobs * len(lanes)), 3)
    return stats


def measure_baseline(task, device: str, eval_kwargs: dict) -> None:
    """The task's reference timings, measured and cached before its first turn, through the harness's
    ensure_baselines: its workers never profile, so they skip the profiler's start-up, and a baseline job
    (after which its worker retires) does not empty the pool of warm workers the evaluations use.
    The first turn's evaluation then reads the cached timings."""
    from drk_lab.common.timing import FLUSH_BYTES
    from drk_lab.harness.evaluate import ensure_baselines

    ensure_baselines([task], device=device, max_in_flight=1, progress=False, warmup=eval_kwargs.get("warmup", 3),
                     timing_trials=eval_kwargs.get("timing_trials", 100),
                     flush_bytes=eval_kwargs.get("flush_bytes", FLUSH_BYTES),
                     isolation=eval_kwargs.get("isolation", "fork"),
                     compile_baseline=eval_kwargs.get("compile_baseline", True))


def _speed(result) -> float | None:
    return float(result.speedup) if result.ok and result.speedup is not None and result.timings_valid else None


def is_repair(reply: str) -> bool:
    return reply.startswith(REPAIR_PLAN.partition("{")[0])


def kept_turns(traj) -> tuple[list, int]:
    """(the turns an SFT row keeps, the 1-based best turn among them); ([], 0) when none is kept. A failed
    turn is kept only when the next turn is a repair that is correct (the row then teaches the fix; the
    failed turn's reply gets no loss, see sft_rows). A repair after a correct turn (a planted bug that
    the checks did not catch) makes the trajectory useless: nothing is kept."""
    kept = []
    for i, turn in enumerate(traj.turns):
        after = traj.turns[i + 1] if i + 1 < len(traj.turns) else None
        if after is not None and is_repair(after.response) and turn.result.ok:
            return [], 0
        if not turn.result.ok and not (after is not None and is_repair(after.response) and after.result.ok):
            break
        kept.append(turn)
    if not any(t.result.ok for t in kept):
        return [], 0
    speeds = [_speed(t.result) if t.result.ok else 0.0 for t in kept]
    if all(s is not None for s in speeds):
        best = max(range(len(kept)), key=lambda i: (speeds[i], -i))
        kept = kept[: best + 1]
    return kept, len(kept)


def harness_version(traj) -> str:
    """The harness's version (its release and a hash of its sources) and the torch and triton that ran."""
    versions = next((t.result.versions for t in traj.turns if t.result.versions), {})
    return (f"drk_lab {models.harness_version()}; torch {versions.get('torch', '?')}; "
            f"triton {versions.get('triton', '?')}")


def sft_rows(trajectories, specs: dict[str, TaskSpec], splits: dict[str, str] | None = None) -> list[dict]:
    """Cold-start rows (drk_lab.rl.sft's layout) plus: level, ops, combination, dtype, split, harness_version,
    device, teacher turns evaluated and correct. `specs` maps task names to their TaskSpec."""
    from drk_lab.data.cold_start import trajectories_to_cold_start

    rows = []
    for traj in trajectories:
        kept, best_round = kept_turns(traj)
        if not kept:
            continue
        row = trajectories_to_cold_start([replace(traj, turns=kept)], start_uuid=len(rows))[0]
        replies = [m for m in row["messages"] if m["role"] == "assistant"]
        for message, turn in zip(replies, kept):
            if not turn.result.ok:  # a planted bug's reply: context for the repair, never a training target
                message["train"] = False
        spec = specs[traj.task]
        row.update({"best_round": best_round, "level": spec.level, "ops": spec.ops,
                    "combination": spec.combination, "dtype": spec.dtype,
                    "split": (splits or {}).get(traj.task, "train"), "harness_version": harness_version(traj),
                    "device": kept[-1].result.device, "turns_evaluated": len(traj.turns),
                    "turns_correct": sum(t.result.ok for t in traj.turns)})
        rows.append(row)
    return rows


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {}
    values = sorted(values)
    pick = {f"p{int(q * 100)}": values[min(len(values) - 1, int(q * len(values)))] for q in QUANTILES}
    return {**{k: round(v, 3) for k, v in pick.items()}, "geomean": round(statistics.geometric_mean(values), 3),
            "share_ge_1": round(sum(v >= 1.0 for v in values) / len(values), 3)}


def summarize(trajectories, specs: dict[str, TaskSpec]) -> dict:
    """Per level: trajectories, the share whose teacher reached a correct kernel (any turn), correct share
    per turn, and the quantiles of the best measured speedup among correct turns."""
    by_level: dict[str, list] = {}
    for traj in trajectories:
        by_level.setdefault(str(specs[traj.task].level), []).append(traj)
    by_level["all"] = list(trajectories)
    out = {}
    for level, trajs in sorted(by_level.items()):
        turns = max((len(t.turns) for t in trajs), default=0)
        best = [max(s for s in map(_speed, (x.result for x in t.turns)) if s is not None) for t in trajs
                if any(_speed(x.result) is not None for x in t.turns)]
        out[level] = {
            "trajectories": len(trajs),
            "correct_share": round(sum(any(x.result.ok for x in t.turns) for t in trajs) / max(1, len(trajs)), 3),
            "correct_share_per_turn": [round(sum(len(t.turns) > i and t.turns[i].result.ok for t in trajs)
                                             / max(1, len(trajs)), 3) for i in range(turns)],
            "timed": len(best),
            "best_speedup": _quantiles(best),
        }
    return out


def summary_table(by_level: dict) -> str:
    """summarize()'s result as a markdown table (data/README.md, the card, uses it)."""
    head = ("| level | trajectories | teacher correct | correct by turn | timed | best speedup p10 / p25 / p50 / p75 / p90 "
            "| geomean | share >= 1x |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for level, s in by_level.items():
        q = s["best_speedup"]
        quantiles = " / ".join(f"{q[k]:.2f}" for k in ("p10", "p25", "p50", "p75", "p90")) if q else "-"
        per_turn = ", ".join(f"{100 * x:.0f}%" for x in s["correct_share_per_turn"])
        faster = f"{100 * q['share_ge_1']:.0f}%" if q else "-"
        lines.append(f"| {level} | {s['trajectories']} | {100 * s['correct_share']:.1f}% | {per_turn} | {s['timed']} | "
                     f"{quantiles} | {q.get('geomean', '-')} | {faster} |")
    return "\n".join(lines)
