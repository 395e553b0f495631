"""The `drk` command."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drk", description="drk_lab: evaluate and train Triton kernel writers")
    sub = parser.add_subparsers(dest="command", required=True)

    q = sub.add_parser("quickstart", help="evaluate every built-in solution and planted variants")
    q.add_argument("--device", choices=["cpu", "cuda"], default=None)
    q.add_argument("--jobs", type=int, default=None, help="evaluations in flight")

    e = sub.add_parser("eval", help="evaluate one candidate file against one task file")
    e.add_argument("task", help="KernelBench-format task file")
    e.add_argument("code", help="candidate source defining ModelNew")
    e.add_argument("--device", choices=["cpu", "cuda"], default=None)
    e.add_argument("--small", action="store_true", help="use the task's SMALL_SIZES")
    e.add_argument("--trials", type=int, default=5, help="correctness trials")
    e.add_argument("--timing-trials", type=int, default=100)
    e.add_argument("--timeout", type=float, default=120.0)
    e.add_argument("--json", action="store_true", help="print the whole EvalResult as JSON")

    t = sub.add_parser("tasks", help="list tasks: the built-in suite or a folder")
    t.add_argument("folder", nargs="?", default=None)

    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from drk_lab.quickstart import run_quickstart, verdict

        rows = run_quickstart(device=args.device, max_in_flight=args.jobs)
        return 1 if any(verdict(r, expect) == "NO" for _, _, r, expect in rows) else 0
    if args.command == "eval":
        from drk_lab import evaluate, load_task

        task = load_task(args.task)
        task = task.small() if args.small else task
        with open(args.code) as f:
            code = f.read()
        result = evaluate(task, code, device=args.device, correctness_trials=args.trials,
                          timing_trials=args.timing_trials, timeout_s=args.timeout)
        print(json.dumps(result.to_dict(), indent=1) if args.json else result.summary())
        if not args.json and result.error:
            print(result.error)
        return 0 if result.ok else 1
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
