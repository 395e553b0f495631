"""Issue-4 evidence: the evolutionary launch-parameter policy on every built-in task that has a plain kernel.

    python experiments/evolve_run.py [--turns 10] [--samples 1] [--jobs 8] [--limit N] [--tasks 01_relu,08_softmax]

Each task starts from its plain Triton kernel in data/plain (slow on purpose: small blocks, one warp);
every later turn the policy retunes launch parameters of the fastest correct kernel so far (run_many in
lockstep, each proposal evaluated by drk.evaluate with 8 in flight). Writes $OUT/evolve_run.jsonl (the
trajectories) and $OUT/evolve_summary.json (per task and turn: speedups, best so far; the best kernel's
parameters against the seed's), and prints: task, turn-1 (seed) speedup, best speedup, the turn that
reached it, and what changed.

Budget on one H200 (about 1.1-1.6 evaluations/s with 8 in flight in 2026-11): 13 tasks x 10 turns x 1
sample = 130 evaluations, about 2 minutes, plus the eager and torch.compile baselines of the 13 tasks the
first time (cached under DRK_CACHE_DIR afterwards). On CPU the tasks run at their small sizes through the
Triton interpreter: nothing is timed, so there are no speedups; that only checks the loop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import drk_lab as drk
from drk_lab.agent.context import episode_schedule
from drk_lab.agent.episodes import run_many
from drk_lab.agent.metrics import valid_speedup
from drk_lab.policies.choose import SEED_DIR, evolve_policy, seed_file
from drk_lab.harness.devices import default_device
from drk_lab.policies.launch_search import tunable_parameters

OUT = Path(os.environ.get("OUT", "bench_out"))


def parameter_changes(seed: str, best: str) -> list[tuple[str, int, int]] | None:
    """(label, seed value, best value) for each launch parameter that differs; None if they do not line up."""
    before, after = tunable_parameters(seed), tunable_parameters(best)
    if [s.label for s in before] != [s.label for s in after]:
        return None
    return [(a.label, a.value, b.value) for a, b in zip(before, after) if a.value != b.value]


def task_summary(key: str, trajectories: list, seed_code: str) -> dict:
    """Per turn: each sample's speedup and status, the turn's best, the best so far."""
    turns, best_so_far, best = [], None, (None, None, None)  # (speedup, turn, code)
    for index in range(max(len(tr.turns) for tr in trajectories)):
        at = [tr.turns[index] for tr in trajectories if index < len(tr.turns)]
        speedups = [valid_speedup(t.result) for t in at]
        timed = [s for s in speedups if s is not None]
        turn_best = max(timed) if timed else None
        for t, s in zip(at, speedups):
            if s is not None and (best[0] is None or s > best[0]):
                best = (s, index + 1, t.code)
        best_so_far = best[0]
        turns.append({"turn": index + 1, "speedups": speedups, "statuses": [t.result.summary() for t in at],
                      "speedup": turn_best, "best_so_far": best_so_far})
    first = trajectories[0].turns[0].result
    results = [t.result for tr in trajectories for t in tr.turns]
    return {"task": key, "seed_speedup": valid_speedup(first), "seed_status": first.summary(),
            "best_speedup": best[0], "best_turn": best[1],
            "best_changes": parameter_changes(seed_code, best[2]) if best[2] else None,
            "evaluations": len(results), "correct": sum(r.ok for r in results),
            "turns": turns}


def geomean(values: list) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def cell(speedup: float | None) -> str:
    return f"{speedup:.2f}x" if speedup is not None else "-"


def print_table(rows: list[dict]) -> None:
    print(f"{'task':40s} {'turn 1 (seed)':>13s} {'best':>8s} {'at turn':>7s} {'ok':>7s}  best kernel vs seed")
    for r in rows:
        changes = ", ".join(f"{label.split(' ')[-1].split('.')[-1]} {a}->{b}" for label, a, b in r["best_changes"] or [])
        print(f"{r['task']:40s} {cell(r['seed_speedup']):>13s} {cell(r['best_speedup']):>8s} "
              f"{r['best_turn'] or '-':>7} {r['correct']:>3}/{r['evaluations']:<3}  {changes or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--samples", type=int, default=1, help="proposals per task and turn")
    parser.add_argument("--jobs", type=int, default=8, help="evaluations in flight")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--tasks", default=None, help="comma-separated task names (default: all with a plain kernel)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--trials", type=int, default=5, help="correctness trials")
    parser.add_argument("--timing-trials", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=1.0, help="mutation spread")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = args.device or default_device()
    tasks = [t for t in drk.builtin_tasks() if seed_file(t, SEED_DIR) is not None]
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks.split(",")]
    tasks = tasks[: args.limit] if args.limit else tasks
    tasks = [t.small() for t in tasks] if device == "cpu" else tasks
    policy, tasks, _ = evolve_policy(tasks, SEED_DIR, args.temperature, args.seed)
    OUT.mkdir(parents=True, exist_ok=True)
    jsonl = OUT / "evolve_run.jsonl"
    jsonl.unlink(missing_ok=True)
    if device == "cpu":
        print("CPU: small sizes through the Triton interpreter; nothing is timed, so there are no speedups")
    print(f"{len(tasks)} tasks x {args.turns} turns x {args.samples} sample(s), {args.jobs} in flight, "
          f"device {device}", flush=True)

    start = time.perf_counter()
    trajectories = run_many(tasks, policy, episode_schedule(args.turns), samples=args.samples, max_workers=args.jobs,
                            jsonl_path=jsonl, device=device, correctness_trials=args.trials,
                            timing_trials=args.timing_trials)
    wall = time.perf_counter() - start

    rows = []
    for task in tasks:
        mine = [tr for tr in trajectories if tr.task == task.name]
        rows.append(task_summary(f"level{task.level}/{task.name}", mine, seed_file(task, SEED_DIR).read_text()))
    gpu = None
    if device == "cuda":
        import torch

        gpu = torch.cuda.get_device_name()
    summary = {"device": device, "gpu": gpu, "turns": args.turns, "samples": args.samples, "jobs": args.jobs,
               "trials": args.trials, "timing_trials": args.timing_trials, "temperature": args.temperature,
               "seed": args.seed, "wall_s": round(wall, 1), "evaluations": sum(r["evaluations"] for r in rows),
               "geomean_seed_speedup": geomean([r["seed_speedup"] for r in rows]),
               "geomean_best_speedup": geomean([r["best_speedup"] for r in rows]),
               "tasks": rows}
    (OUT / "evolve_summary.json").write_text(json.dumps(summary, indent=1))

    print()
    print_table(rows)
    print(f"\ngeomean speedup over eager: seed {cell(summary['geomean_seed_speedup'])}, "
          f"best {cell(summary['geomean_best_speedup'])}; {summary['evaluations']} evaluations in {wall:.0f} s "
          f"({summary['evaluations'] / wall:.2f}/s)")
    print(f"wrote {jsonl} and {OUT / 'evolve_summary.json'}")


if __name__ == "__main__":
    main()
