"""`drk data`: generated task files, the RL prompt set and the teacher's SFT set, from the command line.

    drk data tasks --n 50 --seed 0 --out tasks/generated          KernelBench-format files, level1/ and level2/
    drk data rl --n 6000 --seed 0 --heldout 0.2 --out data/rl        prompts.parquet + prompts.jsonl.gz + summary.json
    drk data sft --tasks data/rl/prompts.parquet --trajectories 1200 --turns 3 --device cuda --jobs 16 \
                 --time-limit 540 --out runs/sft                     trajectories.jsonl, sft.parquet, summary.json
    drk data sft ... --repairs --skip 1200 --turns 2 --out runs/repairs   the same for repair trajectories

cli.py adds the parser (add_parser) and calls run(args); an everyday mistake raises DataUsageError,
which the command line prints as one line with exit status 2.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from drk_lab.data.export import DataFileError, read_rl_tasks, rl_rows, write_rows


class DataUsageError(ValueError):
    """An everyday mistake in a `drk data` command (the message names the argument)."""


def _positive(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_parser(sub) -> None:
    d = sub.add_parser("data", help="generate tasks, the RL prompt set and the teacher's SFT set")
    dsub = d.add_subparsers(dest="data_command", required=True, parser_class=type(d))
    t = dsub.add_parser("tasks", help="write generated tasks as KernelBench-format files")
    r = dsub.add_parser("rl", help="the RL prompt set (train and held-out splits) as parquet and JSONL")
    for p in (t, r):
        p.add_argument("--n", type=_positive, default=100, help="tasks to generate")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--level1-share", type=float, default=0.25, help="share of level-1 (single operator) tasks")
        p.add_argument("--heldout", type=float, default=0.2, help="share of operator combinations held out")
        p.add_argument("--out", required=True, help="output folder")
    s = dsub.add_parser("sft", help="teacher trajectories through KernelEnv, then SFT rows")
    s.add_argument("--tasks", required=True, help="an RL prompt file from `drk data rl` (.parquet or .jsonl[.gz])")
    s.add_argument("--split", default="train", choices=["train", "heldout", "all"])
    s.add_argument("--trajectories", type=_positive, default=1000, help="trajectories (one per task, in file order)")
    s.add_argument("--skip", type=int, default=0, help="leave out the split's first N tasks (another run used them)")
    s.add_argument("--turns", type=_positive, default=3)
    s.add_argument("--repairs", action="store_true",
                   help="repair trajectories: turn 1 has a planted bug (a pointwise operator swapped or left out), "
                        "turn 2 fixes it; the SFT rows keep the buggy reply as context, with no loss on it")
    s.add_argument("--seed", type=int, default=0, help="for the planted bugs (--repairs)")
    s.add_argument("--device", default=None, help="auto (default), cpu, cuda or cuda:N; the CPU runs small sizes")
    s.add_argument("--jobs", type=_positive, default=16,
                   help="trajectories, and so evaluations, in flight (on each GPU); a new one starts as one ends")
    s.add_argument("--gpus", type=_positive, default=1, help="spread the trajectories over GPUs cuda:0..N-1")
    s.add_argument("--time-limit", type=float, default=None,
                   help="seconds: start no trajectory that would end later (judged by the mean so far)")
    s.add_argument("--trials", type=_positive, default=5, help="correctness trials per evaluation")
    s.add_argument("--timing-trials", type=_positive, default=100)
    s.add_argument("--eager-only", action="store_true",
                   help="time references in eager mode only: no torch.compile per new task (feedback then has no "
                        "speedup over torch.compile); for large sets, where compiling each reference costs more than "
                        "its evaluations")
    s.add_argument("--out", required=True, help="output folder; a rerun into it resumes")


def run(args) -> int:
    if args.data_command in ("tasks", "rl"):
        if not 0.0 <= args.level1_share <= 1.0:
            raise DataUsageError(f"--level1-share {args.level1_share}: must be between 0 and 1")
        if not 0.0 <= args.heldout < 1.0:
            raise DataUsageError(f"--heldout {args.heldout}: must be at least 0 and below 1")
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise DataUsageError(f"--out {out}: exists and is not a folder")
        return write_tasks(args, out) if args.data_command == "tasks" else write_rl(args, out)
    return write_sft(args)


def _generate(args) -> tuple[list, dict]:
    from drk_lab.data.generator import generate_tasks

    rejected: dict = {}
    return generate_tasks(args.n, seed=args.seed, level1_share=args.level1_share, rejected=rejected), rejected


def write_tasks(args, out: Path) -> int:
    from drk_lab.data.splits import split_of

    generated, _ = _generate(args)
    for g in generated:
        path = out / f"level{g.spec.level}" / f"{g.spec.name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(g.task.source)
    index = [{"name": g.spec.name, "level": g.spec.level, "ops": g.spec.ops, "combination": g.spec.combination,
              "split": split_of(g.spec.combination, args.heldout, args.seed)} for g in generated]
    write_rows(index, out / "index.jsonl")
    print(f"{len(generated)} tasks under {out}/level1 and {out}/level2; index.jsonl lists their operators and splits")
    return 0


def _counts(rows: list[dict], column: str) -> dict:
    out: dict = {}
    for row in rows:
        out[str(row[column])] = out.get(str(row[column]), 0) + 1
    return dict(sorted(out.items()))


def write_rl(args, out: Path) -> int:
    from drk_lab.data.splits import combinations_by_split

    generated, rejected = _generate(args)
    rows = rl_rows(generated, heldout_fraction=args.heldout, seed=args.seed)
    write_rows(rows, out / "prompts.parquet")
    write_rows(rows, out / "prompts.jsonl.gz")
    combos = combinations_by_split(rows)
    summary = {"command": "drk " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["data"]
               else None, "seed": args.seed, "rows": len(rows), "heldout_fraction": args.heldout,
               "by_split": {s: sum(r["split"] == s for r in rows) for s in ("train", "heldout")},
               "combinations": {s: len(c) for s, c in combos.items()},
               "by_level": _counts(rows, "level"), "by_dtype": _counts(rows, "dtype"),
               "rejected_candidates": rejected}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "command"}))
    return 0


def write_sft(args) -> int:
    from drk_lab.data.trajectories import read_trajectories, run_teacher, sft_rows, summarize, summary_table
    from drk_lab.harness.devices import resolve_device
    from drk_lab.harness.task import TaskError

    try:
        device = resolve_device(args.device)
    except ValueError as e:
        raise DataUsageError(f"--device {args.device}: {str(e).partition(': ')[2] or e}") from None
    devices = None
    if args.gpus > 1:
        import torch

        if device == "cpu" or torch.cuda.device_count() < args.gpus:
            raise DataUsageError(f"--gpus {args.gpus}: this machine has {torch.cuda.device_count()} CUDA GPUs")
        devices = [f"cuda:{i}" for i in range(args.gpus)]
    try:
        loaded = read_rl_tasks(args.tasks, split=None if args.split == "all" else args.split)
    except (DataFileError, TaskError) as e:
        raise DataUsageError(f"--tasks {e}") from None
    if not loaded:
        raise DataUsageError(f"--tasks {args.tasks}: no rows of split {args.split!r}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise DataUsageError(f"--out {out}: exists and is not a folder")
    if args.skip < 0:
        raise DataUsageError(f"--skip {args.skip}: must be 0 or more")
    loaded = loaded[args.skip: args.skip + args.trajectories]
    # the CPU runs the interpreter at the tasks' SMALL_SIZES; a GPU runs the full sizes
    items = [(spec, task.small() if device == "cpu" else task) for spec, task, _ in loaded]
    stats = run_teacher(items, out, turns=args.turns, jobs=args.jobs, time_limit=args.time_limit,
                        device=device, devices=devices, correctness_trials=args.trials, timing_trials=args.timing_trials,
                        compile_baseline=not args.eager_only, repairs=args.repairs, seed=args.seed)
    specs = {task.name: spec for spec, task in items}
    splits = {task.name: row["split"] for _, task, row in loaded}
    trajectories = [t for t in read_trajectories(out) if t.task in specs]
    rows = sft_rows(trajectories, specs, splits)
    if rows:
        write_rows(rows, out / "sft.jsonl.gz")
        try:
            write_rows(rows, out / "sft.parquet")
        except ImportError:  # pyarrow missing: the JSONL has the same rows; rerun here to make the parquet
            print("no pyarrow: wrote sft.jsonl.gz only", file=sys.stderr)
    summary = {"device": device, "trajectories": len(trajectories), "sft_rows": len(rows), "run": stats,
               "by_level": summarize(trajectories, specs)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(summary_table(summary["by_level"]))
    no_bug = f", {stats['no_bug_to_plant']} with no operator to plant a bug in" if stats["no_bug_to_plant"] else ""
    print(f"{len(trajectories)} trajectories ({stats['run']} run now, {stats['skipped_done']} already there{no_bug}"
          f"{', stopped at the time limit' if stats['stopped_at_time_limit'] else ''}; {stats['seconds']} s), "
          f"{len(rows)} SFT rows; {out}/summary.json")
    return 0
