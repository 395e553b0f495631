"""The `drk` command: quickstart, eval (one candidate file, or a policy over a task set), tasks, baselines, serve, data.

    drk eval TASK_FILE CODE_FILE [--small | --full-size] [--sizes N=V,...] [--json]   one candidate, one task
    drk eval --tasks builtin:1 --policy evolve --turns 10                              a policy over a task set
    drk baselines builtin                                                              fill the baseline cache (GPU)

Everyday mistakes (a missing file, a malformed argument, a device that is not there) end in one line
on stderr naming the argument, and exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import time
from pathlib import Path

from drk_lab.harness.task import TaskError, load_task_set
from drk_lab.policies.choose import POLICY_KINDS, policy_from_spec
from drk_lab.service.server import add_arguments

PER_TURN_PS = (1.0, 1.2)
SUMMARY_PS = (1.0, 1.2, 1.5, 2.0)
CPU_NOTE = ("CPU: the Triton interpreter runs each task at small sizes (its SMALL_SIZES, or sizes derived from its "
            "constants; --full-size for the file's); nothing is timed, so there are no speedups and every Fast@p "
            "is 0 (correct % still counts)")
SIZE_ITEM = re.compile(r"\s*(\w+)\s*=\s*(-?\d+|\([-\d,\s]*\)|\[[-\d,\s]*\])\s*")
LISTED_SIZES = 20  # a policy run prints each task's sizes up to this many tasks


class UsageError(Exception):
    """An everyday mistake: main() prints `drk COMMAND: message` on stderr and exits with status 2."""


def pick_device(name: str | None) -> str:
    from drk_lab.harness.devices import resolve_device

    try:
        return resolve_device(name)
    except ValueError as e:
        raise UsageError(f"--device {name}: {str(e).partition(': ')[2] or e}") from None


def parse_sizes(text: str | None) -> dict[str, object]:
    """`--sizes batch_size=4,dim=256,input_shape=(128,)` -> {"batch_size": 4, ...}."""
    if not text:
        return {}
    items = SIZE_ITEM.findall(text)
    try:
        if re.sub(r"\s+", "", ",".join(f"{k}={v}" for k, v in items)) == re.sub(r"\s+", "", text):
            return {name: ast.literal_eval(value) for name, value in items}
    except (ValueError, SyntaxError):
        pass
    raise UsageError(f"--sizes {text}: expected NAME=VALUE,... with whole numbers (batch_size=4,dim=256)")


def sized(task, args, device: str, sizes: dict):
    """The task at the sizes asked for: small on the CPU (or with --small) unless --full-size, then the
    --sizes it has. TaskError when even its smallest valid shape is too big for the CPU."""
    if args.small or (device == "cpu" and not args.full_size):
        task = task.small()
    mine = {k: v for k, v in sizes.items() if k in task.constants}
    try:
        return task.with_sizes(mine, "--sizes") if mine else task
    except TaskError as e:
        raise UsageError(f"--sizes {args.sizes}: {e}") from None


def make_policy(spec: str, tasks: list, args) -> tuple[object, list]:
    """The policy named by `--policy KIND[:ARG]` and the tasks it can run."""
    try:
        policy, kept, note = policy_from_spec(spec, tasks, temperature=args.temperature, seed=args.seed,
                                              max_tokens=args.max_tokens, base_url=args.base_url, jobs=args.jobs)
    except (ValueError, OSError) as e:
        message = " ".join(str(e).split())
        raise UsageError(f"--policy {message if message.startswith(spec) else f'{spec}: {message}'}") from None
    if note:
        print(note)
    return policy, kept


def make_schedule(args):
    from drk_lab.agent.context import episode_schedule, stts_schedule

    if args.stts:
        if args.turns is not None:
            raise UsageError("give --turns or --stts, not both")
        parts = args.stts.split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise UsageError(f"--stts {args.stts}: expected U,K,I, three whole numbers (Dr. Kernel: 5,4,10)")
        try:
            return stts_schedule(*(int(p) for p in parts))
        except ValueError as e:
            raise UsageError(f"--stts {args.stts}: {e}") from None
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


def policy_tasks(args, device: str) -> list:
    """The task set at the sizes asked for; files that do not load, and tasks too big for the CPU, are
    skipped and reported on stderr."""
    broken: list[str] = []
    try:
        tasks = load_task_set(args.tasks, broken=broken)
    except TaskError as e:
        raise UsageError(f"--tasks {e}") from None
    sizes = parse_sizes(args.sizes)
    missing = [k for k in sizes if not any(k in t.constants for t in tasks)]
    if missing:
        raise UsageError(f"--sizes {args.sizes}: no task has a module-level constant named {', '.join(missing)}")
    kept = []
    for task in tasks:
        try:
            kept.append(sized(task, args, device, sizes))
        except TaskError as e:
            broken.append(str(e))
    for reason in broken:
        print(f"drk eval: skipped {reason}", file=sys.stderr)
    return kept


def out_file(path: str | None) -> Path:
    out = Path(path or f"runs/eval_{time.strftime('%Y%m%d_%H%M%S')}.jsonl")
    if out.is_dir():
        raise UsageError(f"--out {out}: is a folder; give a file name")
    if out.exists() and out.stat().st_size:
        raise UsageError(f"--out {out}: exists and is not empty; choose another file or delete it")
    if out.exists():  # an empty file (from mktemp, say): nothing to lose, but say so
        print(f"--out {out} exists and is empty: writing the trajectories into it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create its folder ({e.strerror})") from None
    return out


def run_policy(args) -> int:
    from drk_lab.agent.episodes import run_many

    device = pick_device(args.device)  # the cheap checks first: a model may take minutes to load
    schedule = make_schedule(args)
    out = out_file(args.out)
    tasks = policy_tasks(args, device)
    policy, tasks = make_policy(args.policy, tasks, args)
    tasks = tasks[: args.limit] if args.limit else tasks
    if not tasks:
        raise UsageError(f"--tasks {args.tasks}: no tasks to run")
    if device == "cpu":
        print(CPU_NOTE)
    resized = [t for t in tasks if t.size_note()]
    for task in resized[:LISTED_SIZES] if len(resized) <= LISTED_SIZES else []:
        print(f"{task.name}: {task.size_note()}")
    if len(resized) > LISTED_SIZES:
        print(f"{len(resized)} tasks run at small sizes; each result's notes say which")
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


def read_text(path: str, what: str) -> str:
    if not Path(path).is_file():
        raise UsageError(f"{what} {path}: {'a folder, not a file' if Path(path).is_dir() else 'no such file'}")
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{what} {path}: cannot be read ({type(e).__name__})") from None


def check_one(args) -> int:
    from drk_lab import evaluate, load_task

    device = pick_device(args.device)
    code = read_text(args.files[1], "CODE_FILE")
    sizes = parse_sizes(args.sizes)
    try:
        task = load_task(args.files[0])
        missing = [k for k in sizes if k not in task.constants]
        if missing:
            raise UsageError(f"--sizes {args.sizes}: {task.name} has no module-level constant named "
                             f"{', '.join(missing)}")
        task = sized(task, args, device, sizes)
    except TaskError as e:
        raise UsageError(f"TASK_FILE {e}") from None
    if task.size_note() and not args.json:
        print(task.size_note(), flush=True)
    result = evaluate(task, code, device=device, correctness_trials=args.trials,
                      timing_trials=args.timing_trials, timeout_s=args.timeout)
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.summary())
    rest = (result.error or "").partition("\n")[2].strip()  # the summary holds the error's first line
    if not args.json and rest:
        print(rest)
    return 0 if result.ok else 1


def list_tasks(folder: str | None) -> int:
    from drk_lab import builtin_tasks, load_tasks

    broken: list[str] = []
    try:
        tasks = load_tasks(folder, broken=broken) if folder else builtin_tasks()
    except TaskError as e:
        raise UsageError(f"FOLDER {e}") from None
    for task in tasks:
        sizes = ", ".join(f"{k}={v}" for k, v in task.constants.items() if isinstance(v, int))
        print(f"level {task.level or '-'}  {task.name:40s} {sizes}")
    for reason in broken:
        print(f"drk tasks: broken: {reason}", file=sys.stderr)
    if broken:
        print(f"drk tasks: {len(tasks)} task(s), {len(broken)} broken file(s)", file=sys.stderr)
    return 1 if broken else 0


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (and status 2), like the CLI's own."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} -h)\n")


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = Parser(prog="drk", description="drk_lab: evaluate and train Triton kernel writers")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    devices = "auto (default: cuda when present), cpu, cuda or cuda:N"

    q = sub.add_parser("quickstart", help="evaluate every built-in solution and planted variants")
    q.add_argument("--device", default=None, help=devices)
    q.add_argument("--jobs", type=positive, default=None, help="evaluations in flight")

    e = sub.add_parser("eval", help="evaluate one candidate file, or run a policy over a task set",
                       description="Two file paths: evaluate that candidate against that task. Otherwise "
                                   "--policy: run it over --tasks, write trajectories as JSONL, print Fast@p tables.")
    e.add_argument("files", nargs="*", metavar="TASK_FILE CODE_FILE", help="one task file and one candidate source")
    e.add_argument("--device", default=None, help=devices)
    size = e.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true",
                      help="small sizes (the task's SMALL_SIZES, or derived from its constants) also on a GPU")
    size.add_argument("--full-size", action="store_true", help="the file's sizes also on the CPU (default there: small)")
    e.add_argument("--sizes", default=None, metavar="NAME=VALUE,...",
                   help="set module-level size constants, after --small: batch_size=4,dim=256")
    e.add_argument("--trials", type=positive, default=5, help="correctness trials")
    e.add_argument("--timing-trials", type=positive, default=100, help="timed calls of the candidate (GPU)")
    e.add_argument("--timeout", type=positive_seconds, default=None,
                   help="seconds an evaluation may take, also the limit of each of its stages (default: 120 in all, "
                        "with 60 to load and 60 per correctness trial)")
    e.add_argument("--json", action="store_true", help="one file: print the whole EvalResult as JSON")
    run = e.add_argument_group("policy runs")
    run.add_argument("--policy", help=" | ".join(POLICY_KINDS))
    run.add_argument("--tasks", default="builtin", help="builtin | builtin:LEVEL | task file | folder, comma-separated")
    run.add_argument("--limit", type=positive, default=None, help="only the first N tasks")
    run.add_argument("--turns", type=positive, default=None, help="turns per episode (default 3)")
    run.add_argument("--stts", default=None, metavar="U,K,I",
                     help="sequential test-time scaling: U user turns, K kept, I iterations (Dr. Kernel: 5,4,10)")
    run.add_argument("--samples", type=positive, default=1, help="episodes per task")
    run.add_argument("--jobs", type=positive, default=None, help="evaluations in flight")
    run.add_argument("--out", default=None, help="JSONL file that does not exist yet, or is empty "
                                                   "(default runs/eval_<time>.jsonl)")
    run.add_argument("--reward", default="drkernel", choices=["drkernel", "kevin", "tiered", "bottleneck"])
    run.add_argument("--temperature", type=float, default=None, help="sampling; for evolve the mutation spread")
    run.add_argument("--max-tokens", type=positive, default=None, help="tokens per reply (hf, openai)")
    run.add_argument("--base-url", default=None, help="openai: server URL (default $OPENAI_BASE_URL)")
    run.add_argument("--seed", type=int, default=0, help="evolve: random seed")

    t = sub.add_parser("tasks", help="list tasks: the built-in suite or a folder (broken files are reported)")
    t.add_argument("folder", nargs="?", default=None,
                   help="a folder of KernelBench-format task files (default: the built-in suite)")

    b = sub.add_parser("baselines", help="measure and cache the eager and torch.compile timings of a task set (GPU)")
    b.add_argument("tasks", help="builtin | builtin:LEVEL | task file | folder, comma-separated")
    b.add_argument("--device", default=None, help=devices)
    b.add_argument("--jobs", type=positive, default=None, help="tasks in flight")
    b.add_argument("--timing-trials", type=positive, default=100, help="timed calls of each reference")

    s = sub.add_parser("serve", help="the evaluation service over HTTP (docs/service.md)")
    add_arguments(s)  # server.py imports only the standard library at module level

    from drk_lab.data.command import add_parser as add_data_parser

    add_data_parser(sub)
    return parser, e


def start_service(args) -> int:
    from importlib.util import find_spec

    if not all(find_spec(name) for name in ("fastapi", "uvicorn", "httpx")):
        raise UsageError("needs the service extra: pip install -e '.[service]' (fastapi, uvicorn, httpx, ray)")
    from drk_lab.service.server import serve, settings_from_args

    try:
        serve(settings_from_args(args))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def run_command(args, eval_parser) -> int:
    if args.command == "quickstart":
        from drk_lab.quickstart import run_quickstart, verdict

        rows = run_quickstart(device=pick_device(args.device), max_in_flight=args.jobs)
        return 1 if any(verdict(r, expect) == "NO" for _, _, r, expect in rows) else 0
    if args.command == "eval":
        if len(args.files) == 2 and not args.policy:
            return check_one(args)
        if args.files or not args.policy:
            eval_parser.error("eval takes TASK_FILE CODE_FILE, or --policy KIND[:ARG] (with --tasks ...)")
        return run_policy(args)
    if args.command == "baselines":
        return fill_baselines(args)
    if args.command == "serve":
        return start_service(args)
    if args.command == "data":
        from drk_lab.data.command import DataUsageError, run as run_data

        try:
            return run_data(args)
        except DataUsageError as e:
            raise UsageError(str(e)) from None
    return list_tasks(args.folder)


def fill_baselines(args) -> int:
    from drk_lab.harness.evaluate import ensure_baselines

    device = pick_device(args.device)
    if device == "cpu":
        raise UsageError("baselines are GPU timings: no CUDA device here (nothing is timed on the CPU)")
    broken: list[str] = []
    try:
        tasks = load_task_set(args.tasks, broken=broken)
    except TaskError as e:
        raise UsageError(f"{args.tasks}: {e}") from None
    for reason in broken:
        print(f"drk baselines: skipped {reason}", file=sys.stderr)
    baselines = ensure_baselines(tasks, device=device, max_in_flight=args.jobs, timing_trials=args.timing_trials)
    failed = [(t, b) for t, b in zip(tasks, baselines) if not b.get("eager")]
    for t, b in failed:
        print(f"{t.name}: {b.get('error')}", file=sys.stderr)
    print(f"{len(tasks) - len(failed)} of {len(tasks)} tasks have cached baselines")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser, eval_parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run_command(args, eval_parser)
    except UsageError as e:
        print(f"drk {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if "drk_lab.harness.caller" in sys.modules:  # end every worker before exiting
            sys.modules["drk_lab.harness.caller"].shutdown()
        print(f"drk {args.command}: interrupted", file=sys.stderr, flush=True)
        if argv is None:  # the command itself: nothing is left to tear down, and torch's teardown takes seconds
            sys.stdout.flush()
            os._exit(130)
        return 130


if __name__ == "__main__":
    sys.exit(main())
