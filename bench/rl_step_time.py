"""The mini RL step's time, synchronous against pipelined, in one run: where each step's seconds go.

    python bench/rl_step_time.py --model mini_sft                              # a GPU: the shipped SFT model
    python bench/rl_step_time.py --model runs/mini/init --force-teacher 8      # a GPU, no SFT model: see below
    python bench/rl_step_time.py --config smoke --force-teacher 1 --steps 2    # the CPU smoke (tests run it)

Each mode (`--modes`, default `sync:1,pipelined:1,pipelined:4`: mode:waves) builds a fresh RLTrainer from
the same model and seed with the mini run's RL settings (experiments/mini/run.py's phase_rl: 16 prompts x 8
samples x 2 turns, 1,792 new tokens, the static-cache sampler with CUDA graphs, float32; `--config` and
`--set` as for run.py) and runs `--steps` steps. Per step it splits the wall time (agent/pipeline.py's
time_split over the rollout's timeline and the training interval): generation, evaluation, both at once
(overlap), training, and idle (none of them: batch building, logging, waiting); and tokens/s (generated
tokens over generation seconds, and over the whole step). Medians are over the steps after the first
(which pays for worker start-up). Before the modes, on a GPU, the eager baselines of every task the steps
draw are measured (and cached), so that no mode pays for them.

The same samples get the same rewards in every mode: two modes with the same waves sample the same
tokens (the per-step `samples` table pairs them by task, sample and turn, and `same_rewards` counts the
identical replies whose rewards agree); on a GPU a reward holds a measured speedup, so there they agree
to timing noise only, and a turn-2 prompt that quotes a timing differs.

Models: `--model` is a Hugging Face folder or `mini_sft`, the shipped SFT model of the mini recipe (27M
parameters; it writes kernels for the generated tasks, so the evaluation load is the real one). Without one, the
tiny random model (CPU smoke). A random model writes no code: `--force-teacher K` makes the first K samples of
each group answer every turn with the teacher's reply (drk_lab.data.teacher; scored teacher-forced, evaluated
for real), so the harness gets the mini run's evaluation load while generation still decodes every row.

Writes $OUT/rl_step_time.json (or --out): settings, device, per mode its steps and medians.

On a GPU machine, with TRL and datasets carried in .whl (the four wheels of data/runs/2026-12-07_trloo_arm/README.md),
one call (a mode's 3 steps take about 2.5 minutes on an H100):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/trl-*.whl \
      .whl/datasets-*.whl .whl/dill-*.whl .whl/multiprocess-*.whl && export PYTHONPATH=/tmp/site:$PWD \
      DRK_CACHE_DIR=$PWD/runs/cache && python bench/rl_step_time.py --model mini_sft --steps 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from drk_lab.agent.pipeline import time_split  # noqa: E402
from drk_lab.rl.rollout import tasks_of_step  # noqa: E402
from experiments.mini.settings import MiniSettings, literal, read_config, with_overrides  # noqa: E402

SPLIT = ("generation_s", "evaluation_s", "overlap_s", "training_s", "idle_s", "wall_s")


def parse_modes(text: str) -> list[tuple[str, int]]:
    modes = []
    for item in text.split(","):
        name, _, waves = item.partition(":")
        if name not in ("sync", "pipelined"):
            raise SystemExit(f"--modes {text}: {name!r} is not sync or pipelined")
        modes.append((name, int(waves or 1)))
    return modes


def mini_settings(configs: list[str], changes: list[str]) -> MiniSettings:
    settings = MiniSettings()
    for config in configs:
        settings = with_overrides(settings, read_config(config))
    for item in changes:
        name, _, value = item.partition("=")
        settings = with_overrides(settings, {name: literal(value)})
    return settings


def rl_items(path: str, settings: MiniSettings, cuda: bool) -> list:
    """(spec, task) of the RL set's train split in run.py's order (its rl_items), small sizes on a CPU."""
    import random

    from drk_lab.data.export import read_rl_tasks

    items = [(spec, task) for spec, task, _ in read_rl_tasks(path, split="train")]
    random.Random(settings.seed).shuffle(items)
    items = items if settings.rl.prompts is None else items[:settings.rl.prompts]
    return items if cuda else [(spec, task.small()) for spec, task in items]


def eval_kwargs(settings: MiniSettings, cuda: bool) -> dict:
    """run.py's eval_kwargs: speedups over eager PyTorch only."""
    if not cuda:
        return {"device": "cpu"}
    return {"correctness_trials": settings.eval.correctness_trials, "timing_trials": settings.eval.timing_trials,
            "compile_baseline": False}


def teacher_replies(specs: dict, k: int):
    from drk_lab.data.teacher import answer

    def force(task, sample, turn):
        return answer(specs[task.name], turn + 1) if sample < k else None
    return force


def make_trainer(model: str, tasks: list, settings: MiniSettings, cuda: bool, mode: str, waves: int, force):
    """RLTrainer as experiments/mini/run.py's phase_rl builds it (no log, no checkpoints), in `mode`."""
    from drk_lab.rl.trainer import RLTrainer

    m, r = settings.model, settings.rl
    return RLTrainer(
        model, tasks, seed=r.seed, prompts_per_step=r.prompts_per_step, samples=r.samples, turns=r.turns,
        max_new_tokens=m.max_new_tokens, max_context_tokens=m.max_context_tokens, feedback_tokens=m.feedback_tokens,
        sampler="static", cuda_graph=m.cuda_graph, generation_batch_size=4096,
        micro_batch_size=r.micro_batch_size, mini_batches=r.mini_batches, lr=r.lr, kl_coef=r.kl_coef,
        advantage=r.advantage, prs=r.prs, mrs=r.mrs, temperature=r.temperature,
        eval_kwargs=eval_kwargs(settings, cuda), save_rollouts=False, force_responses=force,
        waves=waves, pipelined=mode == "pipelined")


def step_record(trainer, started: float, ended: float, row: dict) -> dict:
    stats = trainer.last_rollout.stats
    training = ("training", ended - row["time/training_s"], ended)  # training ends the step (no log, no checkpoint)
    split = time_split(stats["timeline"] + [training], started, ended)
    tokens = stats["generated_tokens"]
    samples = [{"task": t.task, "sample": t.sample, "turn": turn.index, "tokens": hash(tuple(turn.token_ids or ())),
                "reward": turn.reward, "error_kind": turn.result.error_kind}
               for t in trainer.last_rollout.trajectories for turn in t.turns]
    return {"step": row["step"], **split, "generated_tokens": tokens,
            "generation_tokens_per_s": tokens / max(split["generation_s"], 1e-9),
            "step_tokens_per_s": tokens / max(split["wall_s"], 1e-9), "reward_mean": row["reward_mean"],
            "evaluations": sum(s["error_kind"] != "no_code" for s in samples), "samples": samples}


def run_mode(model: str, tasks: list, settings: MiniSettings, cuda: bool, mode: str, waves: int, steps: int,
             force) -> list[dict]:
    from tqdm.auto import tqdm

    trainer = make_trainer(model, tasks, settings, cuda, mode, waves, force)
    records = []
    for _ in tqdm(range(steps), desc=f"{mode}:{waves}", unit="step"):
        started = time.perf_counter()
        row = trainer.step()
        records.append(step_record(trainer, started, time.perf_counter(), row))
    del trainer
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return records


def same_rewards(a: list[dict], b: list[dict]) -> dict:
    """Of the replies two runs share (same step, task, sample, turn and tokens), how many got the same reward."""
    rewards = {}
    for rec in a:
        for s in rec["samples"]:
            rewards[(rec["step"], s["task"], s["sample"], s["turn"], s["tokens"])] = s["reward"]
    shared = agree = 0
    for rec in b:
        for s in rec["samples"]:
            key = (rec["step"], s["task"], s["sample"], s["turn"], s["tokens"])
            if key in rewards:
                shared += 1
                agree += rewards[key] == s["reward"]
    return {"identical_replies": shared, "same_reward": agree}


def medians(records: list[dict]) -> dict:
    later = records[1:] or records
    keys = (*SPLIT, "generated_tokens", "generation_tokens_per_s", "step_tokens_per_s", "evaluations")
    return {k: statistics.median(r[k] for r in later) for k in keys}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None,
                   help="a Hugging Face folder or mini_sft, the shipped SFT model (default: the tiny random model)")
    p.add_argument("--config", action="append", default=[], help="experiments/mini/config/NAME.py, as run.py")
    p.add_argument("--set", action="append", default=[], metavar="PART.NAME=VALUE", help="as run.py")
    p.add_argument("--rl-data", default=str(REPO / "data" / "rl" / "prompts.jsonl.gz"))
    p.add_argument("--modes", default="sync:1,pipelined:1,pipelined:4", help="mode:waves, comma-separated")
    p.add_argument("--steps", type=int, default=3, help="steps per mode")
    p.add_argument("--force-teacher", type=int, default=0, metavar="K",
                   help="the first K samples of a group answer with the teacher's reply (for random models)")
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    settings = mini_settings(args.config, args.set)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from drk_lab.rl.tiny_model import make_tiny_model, model_path

    model = str(make_tiny_model(out / "tiny_model")) if args.model is None else model_path(args.model)
    items = rl_items(args.rl_data, settings, cuda)
    tasks = [task for _, task in items]
    force = teacher_replies({task.name: spec for spec, task in items}, args.force_teacher) if args.force_teacher else None
    if cuda:  # every mode finds the baselines of its steps' tasks cached
        from drk_lab.harness.evaluate import ensure_baselines

        drawn = {t.name: t for step in range(args.steps)
                 for t in tasks_of_step(tasks, step, settings.rl.prompts_per_step, settings.rl.seed)}
        timing = eval_kwargs(settings, cuda)
        ensure_baselines(list(drawn.values()), timing_trials=timing["timing_trials"], compile_baseline=False)
    report = {"settings": settings.to_dict(), "args": vars(args), "model": model,
              "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores)",
              "date": time.strftime("%Y-%m-%d"), "modes": {}}
    for mode, waves in parse_modes(args.modes):
        records = run_mode(model, tasks, settings, cuda, mode, waves, args.steps, force)
        report["modes"][f"{mode}:{waves}"] = {"median_after_first": medians(records), "steps": records}
        names = list(report["modes"])
        report["same_rewards"] = {f"{a} vs {b}": same_rewards(report["modes"][a]["steps"], report["modes"][b]["steps"])
                                  for i, a in enumerate(names) for b in names[i + 1:]}
        # after every mode, so that a call cut short by its time limit still brings back the modes it finished
        (out / "rl_step_time.json").write_text(json.dumps(report, indent=1, default=str))
    print_report(report)
    return 0


def print_report(report: dict) -> None:
    print(f"device {report['device']}; medians of the steps after the first (seconds)")
    print(f"{'mode':>13} {'step':>7} {'gen':>7} {'eval':>7} {'overlap':>7} {'train':>7} {'idle':>7} "
          f"{'gen tok/s':>10} {'step tok/s':>10} {'evals':>6}")
    for name, mode in report["modes"].items():
        m = mode["median_after_first"]
        print(f"{name:>13} {m['wall_s']:7.2f} {m['generation_s']:7.2f} {m['evaluation_s']:7.2f} {m['overlap_s']:7.2f} "
              f"{m['training_s']:7.2f} {m['idle_s']:7.2f} {m['generation_tokens_per_s']:10.0f} "
              f"{m['step_tokens_per_s']:10.0f} {m['evaluations']:6.0f}")
    for pair, counts in report["same_rewards"].items():
        print(f"{pair}: {counts['same_reward']} of {counts['identical_replies']} identical replies got the same reward")


if __name__ == "__main__":
    sys.exit(main())
