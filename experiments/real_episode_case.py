"""A case that is a real episode of the workbench's own loop, for the GPU session: a policy run through the
multi-turn environment (KernelEnv via agent.episodes.run_many) on one task at full size, the harness's
result and the profiler's feedback between turns, every turn timed against eager PyTorch and torch.compile.
Unlike data/cases/layernorm (hand-written turns), every turn here is what the policy wrote.

On a GPU machine, from the repository root:

    PYTHONPATH=$PWD DRK_CACHE_DIR=/tmp/drk_cache python3 experiments/real_episode_case.py --out $OUT/case
    # a model instead of the LLM-free search: --policy hf:/path/to/checkpoint (an SFT or RL export)

then ship it beside the hand-written case (notebook 04 reads it with case="<name>"):

    cp -r <the fetched $OUT>/case data/cases/residual_layernorm_evolve

The default task, level2/07_residual_add_layernorm, leaves the turns room to improve: the evolutionary
search took its plain kernel from 0.68x to 1.45x of eager over 8 turns on an H200 (data/runs/2026-11-29_evolve_h200).
The folder gets task.py, turn_N.py (each opening with a comment: the policy, the turn, its result),
<card>.jsonl (the Trajectory, as drk_lab.agent.cases.load_case reads it) and README.md saying who wrote the
turns and on what they were measured. Nothing here runs on a CPU: it refuses without CUDA.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from drk_lab.agent.cases import case_table  # noqa: E402
from drk_lab.agent.context import episode_schedule  # noqa: E402
from drk_lab.agent.episodes import run_many  # noqa: E402
from drk_lab.agent.trajectory import write_jsonl  # noqa: E402
from drk_lab.harness.task import builtin_tasks, load_task  # noqa: E402
from drk_lab.policies.choose import policy_from_spec  # noqa: E402


def pick_task(spec: str):
    """A built-in task by its name ("level2/07_residual_add_layernorm") or a task file."""
    if Path(spec).is_file():
        return load_task(spec)
    found = [t for t in builtin_tasks() if f"level{t.level}/{t.name}" == spec]
    if not found:
        sys.exit(f"--task {spec}: neither a built-in task (levelN/NAME) nor a task file")
    return found[0]


def turn_header(policy: str, index: int, turn) -> str:
    r = turn.result
    verdict = "correct" if r.correct and not r.hacked else ("hacked" if r.hacked else (r.error_kind or "wrong"))
    speed = f", {r.speedup:.2f}x eager, {r.speedup_compile:.2f}x torch.compile" if r.speedup and r.speedup_compile else ""
    return f"# Turn {index + 1}, written by the policy {policy} (not by hand): {verdict}{speed}.\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="level2/07_residual_add_layernorm", help="levelN/NAME or a task file")
    p.add_argument("--policy", default="evolve", help='"evolve", "hf:MODEL_PATH" or "openai:MODEL"')
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--out", required=True, help="the case folder to write (e.g. $OUT/case)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: a dry run of this script at small sizes, nothing timed (not a case to ship)")
    args = p.parse_args()

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("real_episode_case.py measures at full size and needs CUDA: run it in the GPU session")
    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    task = pick_task(args.task)
    task = task.small() if args.device == "cpu" else task
    policy, tasks, note = policy_from_spec(args.policy, [task], temperature=args.temperature)
    if not tasks:
        sys.exit(f"--policy {args.policy} cannot run {args.task}: {note}")
    started = time.time()
    (traj,) = run_many(tasks, policy, episode_schedule(args.turns), device=args.device, progress=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(task.path, out / "task.py")
    for index, turn in enumerate(traj.turns):
        if turn.code:
            (out / f"turn_{index + 1}.py").write_text(turn_header(args.policy, index, turn) + turn.code)
    stem = card.replace("NVIDIA ", "").split()[0].lower()  # "h100", "h200"
    write_jsonl([traj], out / f"{stem}.jsonl", append=False)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    rows = case_table(traj)
    table = "\n".join(f"| {r['turn']} | {r['correct']} | {r['speedup'] or '-'} | {r['speedup_compile'] or '-'} | "
                      f"{r['coverage'] or '-'} | {r['reward']:.3f} |" for r in rows)
    (out / "README.md").write_text(
        f"# A real episode: {args.task}, {args.turns} turns by the policy `{args.policy}`\n\n"
        f"Every turn here was written by the policy `{args.policy}` running through the workbench's own loop "
        f"(the environment, the harness's result and the profiler's feedback between turns), not by hand. "
        f"Measured on one {card}, commit {commit or 'unknown'}, {time.strftime('%Y-%m-%d')}, in "
        f"{time.time() - started:.0f} s: `python experiments/real_episode_case.py --task {args.task} "
        f"--policy {args.policy} --turns {args.turns}`.\n\n"
        "| turn | correct | vs eager | vs torch.compile | coverage | reward |\n|---|---|---|---|---|---|\n" + table + "\n")
    print(f"{out}: {len(traj.turns)} turns on {card}")
    print(table)


if __name__ == "__main__":
    main()
