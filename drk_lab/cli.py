"""The `drk` command: quickstart, eval (one candidate file, or a policy over a task set), tasks.

    drk eval TASK_FILE CODE_FILE [--small] [--json]          one candidate against one task
    drk eval --tasks builtin:1 --policy evolve --turns 10     a policy over a task set (JSONL + tables)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from drk_lab.harness.task import load_task_set
from drk_lab.policies.choose import POLICY_KINDS, policy_from_spec

PER_TURN_PS = (1.0, 1.2)
SUMMARY_PS = (1.0, 1.2, 1.5, 2.0)
CPU_NOTE = ("CPU: the Triton interpreter runs each task at its small sizes; nothing is timed, so there are "
            "no speedups and every Fast@p is 0 (correct % still counts)")


def make_policy(spec: str, tasks: list, args) -> tuple[object, list]:
    """The policy named by `--policy KIND[:ARG]` and the tasks it can run."""
    try:
        policy, kept, note = policy_from_spec(spec, tasks, temperature=args.temperature, seed=args.seed,
                                              max_tokens=args.max_tokens, base_url=args.base_url, jobs=args.jobs)
    except ValueError as e:
        raise SystemExit(f"drk eval: {e}") from None
    if note:
        print(note)
    return policy, kept


def make_schedule(args):
    from drk_lab.agent.context import episode_schedule, stts_schedule

    if args.stts:
        if args.turns is not None:
            raise SystemExit("drk eval: give --turns or --stts, not both")
        user_turns, keep, iterations = (int(v) for v in args.stts.split(","))
        return stts_schedule(user_turns, keep, iterations)
    return episode_schedule(args.turns or 3)


def summary_tables(trajectories: list, tasks: list) -> str:
    """Fast@p per turn (and best so far), then a per-level summary of each trajectory's best turn.
    With several samples per task, each sample counts as one task (Fast@p averaged over samples)."""
    from drk_lab.agent.metrics import best_result, fast_p_table, format_table, level_summary

    levels = {t.name: t.level for t in tasks}
    several = any(tr.sample > 0 for tr in trajectories)
    per_turn = {(f"{tr.task}#{tr.sample}" if several else tr.task): [t.result for t in tr.turns]
                for tr in trajectories}
    best = [(levels.get(tr.task), best_result([t.result for t in tr.turns])) for tr in trajectories]
    return ("Per turn (best_: best so far)\n" + format_table(fast_p_table(per_turn, PER_TURN_PS))
            + "\n\nBest turn of each trajectory, by level\n" + format_table(level_summary(best, ps=SUMMARY_PS)))


def run_policy(args) -> int:
    from drk_lab.agent.episodes import run_many
    from drk_lab.harness.devices import default_device

    device = args.device or default_device()
    tasks = load_task_set(args.tasks)
    if args.small or device == "cpu":
        tasks = [t.small() for t in tasks]
    policy, tasks = make_policy(args.policy, tasks, args)
    tasks = tasks[: args.limit] if args.limit else tasks
    if not tasks:
        print("drk eval: no tasks to run")
        return 2
    out = Path(args.out or f"runs/eval_{time.strftime('%Y%m%d_%H%M%S')}.jsonl")
    if out.exists() and out.stat().st_size:
        print(f"drk eval: {out} exists; choose another --out or delete it")
        return 2
    schedule = make_schedule(args)
    if device == "cpu":
        print(CPU_NOTE)
    print(f"{len(tasks)} task(s) x {args.samples} sample(s) x {schedule.turns} turn(s), policy {args.policy}, "
          f"device {device}; trajectories -> {out}", flush=True)
    sampling = {k: v for k, v in (("temperature", args.temperature), ("max_tokens", args.max_tokens)) if v is not None}
    start = time.perf_counter()
    trajectories = run_many(tasks, policy, schedule, samples=args.samples, reward_fn=args.reward, sampling=sampling,
                            max_workers=args.jobs, jsonl_path=out, device=device, correctness_trials=args.trials,
                            timing_trials=args.timing_trials, timeout_s=args.timeout)
    print(f"\n{len(trajectories)} trajectories in {time.perf_counter() - start:.0f} s, written to {out}\n")
    print(summary_tables(trajectories, tasks))
    return 0


def check_one(args) -> int:
    from drk_lab import evaluate, load_task

    task = load_task(args.files[0])
    task = task.small() if args.small else task
    code = Path(args.files[1]).read_text()
    result = evaluate(task, code, device=args.device, correctness_trials=args.trials,
                      timing_trials=args.timing_trials, timeout_s=args.timeout)
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.summary())
    if not args.json and result.error:
        print(result.error)
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drk", description="drk_lab: evaluate and train Triton kernel writers")
    sub = parser.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="evaluate every built-in solution and planted variants")
    q.add_argument("--device", choices=["cpu", "cuda"], default=None)
    q.add_argument("--jobs", type=int, default=None, help="evaluations in flight")

    e = sub.add_parser("eval", help="evaluate one candidate file, or run a policy over a task set",
                       description="Two file paths: evaluate that candidate against that task. Otherwise "
                                   "--policy: run it over --tasks, write trajectories as JSONL, print Fast@p tables.")
    e.add_argument("files", nargs="*", metavar="TASK_FILE CODE_FILE", help="one task file and one candidate source")
    e.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when present")
    e.add_argument("--small", action="store_true", help="use the tasks' SMALL_SIZES (always on for --policy on CPU)")
    e.add_argument("--trials", type=int, default=5, help="correctness trials")
    e.add_argument("--timing-trials", type=int, default=100)
    e.add_argument("--timeout", type=float, default=120.0, help="seconds per evaluation")
    e.add_argument("--json", action="store_true", help="one file: print the whole EvalResult as JSON")
    run = e.add_argument_group("policy runs")
    run.add_argument("--policy", help=" | ".join(POLICY_KINDS))
    run.add_argument("--tasks", default="builtin", help="builtin | builtin:LEVEL | task file | folder, comma-separated")
    run.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    run.add_argument("--turns", type=int, default=None, help="turns per episode (default 3)")
    run.add_argument("--stts", default=None, metavar="U,K,I",
                     help="sequential test-time scaling: U user turns, K kept, I iterations (Dr. Kernel: 5,4,10)")
    run.add_argument("--samples", type=int, default=1, help="episodes per task")
    run.add_argument("--jobs", type=int, default=None, help="evaluations in flight")
    run.add_argument("--out", default=None, help="JSONL file (default runs/eval_<time>.jsonl)")
    run.add_argument("--reward", default="drkernel", choices=["drkernel", "kevin", "tiered", "bottleneck"])
    run.add_argument("--temperature", type=float, default=None, help="sampling; for evolve the mutation spread")
    run.add_argument("--max-tokens", type=int, default=None, help="tokens per reply (hf, openai)")
    run.add_argument("--base-url", default=None, help="openai: server URL (default $OPENAI_BASE_URL)")
    run.add_argument("--seed", type=int, default=0, help="evolve: random seed")

    t = sub.add_parser("tasks", help="list tasks: the built-in suite or a folder")
    t.add_argument("folder", nargs="?", default=None)

    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from drk_lab.quickstart import run_quickstart, verdict

        rows = run_quickstart(device=args.device, max_in_flight=args.jobs)
        return 1 if any(verdict(r, expect) == "NO" for _, _, r, expect in rows) else 0
    if args.command == "eval":
        if len(args.files) == 2 and not args.policy:
            return check_one(args)
        if args.files or not args.policy:
            e.error("eval takes TASK_FILE CODE_FILE, or --policy KIND[:ARG] (with --tasks ...)")
        return run_policy(args)
    if args.command == "tasks":
        from drk_lab import builtin_tasks, load_tasks

        tasks = load_tasks(args.folder) if args.folder else builtin_tasks()
        for task in tasks:
            sizes = ", ".join(f"{k}={v}" for k, v in task.constants.items() if isinstance(v, int))
            print(f"level {task.level or '-'}  {task.name:40s} {sizes}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
