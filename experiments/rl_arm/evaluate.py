"""The pre-registered evaluation of the arm's model as its state holds it now, paired with the SFT model.

Greedy, on every held-out task of data/rl and the 512 fresh train-side tasks; McNemar against the SFT model
(the run folder's README pre-registers it).

    python experiments/rl_arm/evaluate.py                         # the run's state: eval/sft (step 0) or eval/step_<N>
    python experiments/rl_arm/evaluate.py --config control_sft    # the control's state, paired with the same SFT records
    python experiments/rl_arm/evaluate.py --due                   # exit 0 when the state's step awaits its evaluation

Resumable: tasks run in chunks, each chunk's records appended to eval/<label>.jsonl (one per task: its part,
kind, correct per turn, solved); a call stops before a chunk that would pass --time-limit, and the next goes on
with the tasks not yet there. Greedy decoding makes a task's record the same whichever call ran it. When every
task has its record, eval/<label>.json holds the summary and, for a step after 0, the comparison with the SFT
model's records (stats.compare).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from experiments.rl_arm.run import load_tasks, parse_settings  # noqa: E402
from experiments.rl_arm.settings import resolve  # noqa: E402


def eval_tasks(settings) -> list[tuple[str, str, object]]:
    """(part, kind, task): the held-out split of data/rl, then the fresh train-side tasks."""
    from experiments.mini.report import task_family

    e = settings.eval
    heldout = load_tasks(e.rl_data, e.heldout, split="heldout")
    fresh = load_tasks(e.fresh, e.fresh_tasks, split=None)
    return ([("heldout", task_family(spec), task) for spec, task in heldout]
            + [("fresh", task_family(spec), task) for spec, task in fresh])


def label_of(step: int) -> str:
    return "sft" if step == 0 else f"step_{step:06d}"


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def record(part: str, kind: str, trajectory) -> dict:
    from drk_lab.agent.metrics import is_correct, is_fast, outcome

    results = [turn.result for turn in trajectory.turns]
    timed = any(r.speedup is not None for r in results)
    return {"task": trajectory.task, "part": part, "kind": kind, "correct": [is_correct(r) for r in results],
            "solved": any(is_correct(r) for r in results), "outcome": [outcome(r) for r in results],
            "fast@1": any(is_fast(r, 1.0) for r in results) if timed else None,
            "fast@1.2": any(is_fast(r, 1.2) for r in results) if timed else None}


def evaluate(settings, time_limit_s: float = 1e9, chunk: int = 256, timing: bool = False) -> dict:
    """Evaluate the run's state (module docstring); returns what this call did."""
    import torch

    from drk_lab.agent.context import episode_schedule
    from drk_lab.agent.episodes import run_many
    from experiments.rl_arm.run import open_arm
    from experiments.rl_arm.stats import compare, summary

    started = time.perf_counter()
    trainer, _, _ = open_arm(settings, with_items=False)
    label = label_of(trainer.state.step) + ("_timed" if timing else "")  # the secondaries' own records
    folder = resolve(settings.arm.run) / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}.jsonl"
    done = {r["task"] for r in read_records(path)}
    todo = [(part, kind, task) for part, kind, task in eval_tasks(settings) if task.name not in done]
    on_gpu = torch.cuda.is_available()
    harness = {"correctness_trials": settings.eval.correctness_trials}
    harness |= ({"compile_baseline": False} if timing else {"timing": False, "profile": False}) if on_gpu else {"device": "cpu"}
    sampling = {"temperature": 0.0, "max_new_tokens": settings.model.max_new_tokens}
    longest, seconds = 0.0, {"generation_s": 0.0, "evaluation_s": 0.0}
    with trainer.generation_policy() as policy:
        for i in range(0, len(todo), chunk):
            if time.perf_counter() - started + longest > time_limit_s:
                break
            chunk_started, part, timings = time.perf_counter(), todo[i:i + chunk], {}
            trajectories = run_many([task for _, _, task in part], policy, episode_schedule(settings.eval.turns),
                                    reward_fn="correct", tokenizer=policy.tokenizer, sampling=sampling,
                                    feedback_tokens=settings.model.feedback_tokens, timings=timings, **harness)
            for key in seconds:
                seconds[key] += timings[key]
            with open(path, "a") as f:
                for (p, kind, _), trajectory in zip(part, trajectories):
                    f.write(json.dumps(record(p, kind, trajectory)) + "\n")
            longest = max(longest, time.perf_counter() - chunk_started)
    records = read_records(path)
    left = len(eval_tasks(settings)) - len(records)
    out = {"label": label, "step": trainer.state.step, "records": len(records), "left": left,
           "seconds": time.perf_counter() - started} | {key: round(value, 1) for key, value in seconds.items()}
    if left == 0:
        result = {"step": trainer.state.step, "summary": summary(records)}
        baseline = settings.eval.sft_records
        sft = read_records(resolve(baseline) if baseline else folder / "sft.jsonl")
        if not label.startswith("sft") and sft:
            result["paired_with_sft"] = compare(sft, records)
        (folder / f"{label}.json").write_text(json.dumps(result, indent=1) + "\n")
        out["summary"] = result
    return out


def due(settings) -> bool:
    """Whether the state's step is an evaluation's (0 or a multiple of eval_every) and its summary is missing."""
    from drk_lab.rl.checkpoint import read_manifest

    manifest = read_manifest(resolve(settings.arm.run) / "state")
    step = manifest["step"] if manifest else 0
    every = settings.arm.eval_every
    # step 0 is the SFT model itself (LoRA's B starts at 0): evaluated once, in the run that has no sft_records
    at_boundary = (step == 0 and not settings.eval.sft_records) or (step and every and step % every == 0)
    return bool(at_boundary) and not (resolve(settings.arm.run) / "eval" / f"{label_of(step)}.json").is_file()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", action="append", default=[])
    p.add_argument("--set", action="append", default=[], metavar="PART.NAME=VALUE")
    p.add_argument("--time-limit", type=float, default=1e9, help="seconds: no chunk starts that would end later")
    p.add_argument("--chunk", type=int, default=256, help="tasks a chunk (one batched generate per turn)")
    p.add_argument("--timing", action="store_true", help="time the kernels too (Fast@1, Fast@1.2; GPU only)")
    p.add_argument("--due", action="store_true", help="only say (exit status) whether an evaluation is due")
    args = p.parse_args(argv)
    settings = parse_settings(args.config, args.set)
    if args.due:
        return 0 if due(settings) else 1
    print(json.dumps(evaluate(settings, args.time_limit, args.chunk, args.timing)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
