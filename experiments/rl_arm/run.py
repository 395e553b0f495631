"""The arm of issue 62, one call at a time: resume from the run folder's state, step, save the state.

Steps go on until the call's time is up or an evaluation is due; the state is saved after every step.

    python experiments/rl_arm/run.py                                  # the TRLOO arm (data/runs/2026-12-07_trloo_arm)
    python experiments/rl_arm/run.py --config control_sft             # the continued-SFT control
    python experiments/rl_arm/run.py --config smoke --set model.packed=/tmp/tiny.safetensors --set arm.run=/tmp/r

A run folder holds state/ (rl/checkpoint.py: adapter, optimizer, scheduler, RNG states, step, sampler; files of
at most 16 MiB), log/metrics.jsonl (one row a step) and eval/ (experiments/rl_arm/evaluate.py). A call stops at
every multiple of arm.eval_every, so that the state evaluated there is that step's (the pre-registered
endpoint in the run's README); `evaluate.py --due` says whether one is due.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from experiments.rl_arm.settings import ArmRunSettings, literal, read_config, resolve, with_overrides  # noqa: E402


def parse_settings(configs: list[str], sets: list[str]) -> ArmRunSettings:
    settings = ArmRunSettings()
    for name in configs:
        settings = with_overrides(settings, read_config(name))
    changes = {}
    for item in sets:
        name, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--set {item!r}: expected PART.NAME=VALUE")
        changes[name] = literal(value)
    return with_overrides(settings, changes)


def load_tasks(path: str, limit: int | None = None, split: str | None = "train") -> list:
    """(spec, task) of an RL prompt file, in file order; small sizes on a CPU."""
    import torch

    from drk_lab.data.export import read_rl_tasks

    items = [(spec, task) for spec, task, _ in read_rl_tasks(resolve(path), split=split)][:limit]
    return items if torch.cuda.is_available() else [(spec, task.small()) for spec, task in items]


def sft_conversations(settings) -> list[list[dict]]:
    """The control's rows: the SFT and repair sets' conversations, in file order (tokenized when a step draws them)."""
    import pyarrow.parquet as pq

    return [messages for path in settings.arm.sft_data for messages in pq.read_table(resolve(path))["messages"].to_pylist()]


def sampler_state(settings, count: int) -> dict:
    """What decides a step's prompts (rollout.tasks_of_step is a pure function of these and the step)."""
    a = settings.arm
    source = settings.rollouts.prompts if a.kind == "rl" else list(a.sft_data)
    per_step = settings.rollouts.prompts_per_step if a.kind == "rl" else a.sft_rows_per_update * settings.update.mini_batches
    return {"kind": a.kind, "source": source, "items": count, "per_step": per_step, "seed": a.seed}


def open_arm(settings, force_responses=None, with_items: bool = True):
    """(trainer, sampler, items) with the state of the run folder loaded when there is one (`with_items`
    False: an evaluation's, which needs no control rows and no sampler check)."""
    from drk_lab.rl.checkpoint import load_state, read_manifest
    from drk_lab.rl.packed_model import load_packed
    from experiments.rl_arm.arm import build_trainer

    model, tokenizer = load_packed(resolve(settings.model.packed))
    tasks = [task for _, task in load_tasks(settings.rollouts.prompts)]
    items = tasks if settings.arm.kind == "rl" or not with_items else sft_conversations(settings)
    trainer = build_trainer(settings, model, tokenizer, tasks, force_responses=force_responses)
    sampler = sampler_state(settings, len(items))
    state = resolve(settings.arm.run) / "state"
    if read_manifest(state) is not None:
        load_state(trainer, state, sampler if with_items else None)
    return trainer, sampler, items


def next_stop(step: int, settings) -> int:
    """The step a call goes no further than: the next evaluation's, or the arm's last."""
    every = settings.arm.eval_every
    return min(settings.arm.steps, (step // every + 1) * every if every else settings.arm.steps)


def one_step(trainer, settings, items) -> dict:
    from experiments.rl_arm.arm import assistant_tokens, control_rows

    if settings.arm.kind == "rl":
        return trainer.train(trainer.state.step + 1)[-1] | trainer.extra
    per_step = settings.arm.sft_rows_per_update * settings.update.mini_batches
    rows = control_rows(items, trainer.state.step, per_step, settings.arm.seed)
    return trainer.sft_step([assistant_tokens(trainer.tokenizer, m, settings.arm.sft_max_length) for m in rows])


def run_steps(settings, time_limit_s: float | None = None, max_steps: int | None = None,
              force_responses=None) -> dict:
    """Steps from the saved state until the next stop, the time limit (a step as long as the longest so far
    must still fit) or `max_steps` in this call; the state saved after each. Returns what the call did."""
    from tqdm.auto import tqdm

    from drk_lab.rl.checkpoint import save_state

    started = time.perf_counter()
    limit = settings.arm.time_limit_s if time_limit_s is None else time_limit_s
    trainer, sampler, items = open_arm(settings, force_responses)
    folder = resolve(settings.arm.run)
    log = folder / "log" / "metrics.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.is_file():  # a call killed between a step's row and its state: that step runs again, logged once
        kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= trainer.state.step]
        log.write_text("".join(line + "\n" for line in kept))
    first, stop, longest = trainer.state.step, next_stop(trainer.state.step, settings), 0.0
    stop = min(stop, first + max_steps) if max_steps is not None else stop
    bar = tqdm(total=stop, initial=first, desc=f"{settings.arm.kind} arm", unit="step")
    while trainer.state.step < stop and time.perf_counter() - started + longest < limit:
        row = one_step(trainer, settings, items)
        longest = max(longest, row["time/step_s"])
        with open(log, "a") as f:
            f.write(json.dumps(row, default=float) + "\n")
        save_state(trainer, folder / "state", sampler, extra={"settings": settings.to_dict()})
        bar.update(1)
    bar.close()
    return {"from_step": first, "to_step": trainer.state.step, "stop": stop,
            "evaluation_due": trainer.state.step % settings.arm.eval_every == 0 if settings.arm.eval_every else False,
            "seconds": time.perf_counter() - started, "longest_step_s": longest}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", action="append", default=[], help="experiments/rl_arm/config/NAME.py, in order")
    p.add_argument("--set", action="append", default=[], metavar="PART.NAME=VALUE")
    p.add_argument("--time-limit", type=float, default=None, help="seconds of this call (default arm.time_limit_s)")
    p.add_argument("--max-steps", type=int, default=None, help="at most this many steps in this call")
    args = p.parse_args(argv)
    settings = parse_settings(args.config, args.set)
    print(json.dumps(run_steps(settings, args.time_limit, args.max_steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
