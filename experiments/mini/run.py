"""Mini Dr. Kernel: the whole method end to end on one GPU (tokenizer, model from scratch, pretraining,
cold-start SFT, multi-turn RL with TRLOO + MRS + PRS, evaluation on held-out tasks), and what RL adds.

    python experiments/mini/run.py --phase all --out runs/mini                # every phase in order
    python experiments/mini/run.py --phase sft --out runs/mini                # one phase; it resumes from
                                                                              # what earlier phases left in --out
    python experiments/mini/run.py --phase all --out /tmp/smoke --config smoke   # tiny sizes on the CPU (tests)
    python experiments/mini/run.py --config kl --set rl.lr=4e-5 ...           # a recipe of config/, then a change
    python experiments/mini/run.py --phase rl --advantage grpo --tag grpo ... # the ablation, same budget
    python experiments/mini/run.py --phase rl --set rl.seed=1 ...             # another RL seed: rl_trloo_seed1
    python experiments/mini/run.py --phase rl --tag p16 --set rl.prompts=16 ...   # any other arm: rl_p16
    python experiments/mini/run.py --phase sft --model /path/to/hf-folder ... # any local checkpoint instead

Phases (each writes JSON under --out; --export DIR copies the small files there, e.g. $OUT):
  tokenizer  BPE (vocab 8192) on the SFT conversations and 2,000 RL prompts; a random Qwen3-style model
             (hidden 512, 8 layers, 8 heads / 4 KV heads, ~27M parameters with tied embeddings) -> init/;
             reports how many of the teacher's replies fit in max_new_tokens
  pretrain   next-token training (all tokens) on the SFT conversations (not the repairs) and the teacher's
             first replies to the other train-split tasks and to 12,000 tasks sampled afresh whose operator
             combinations are train-side, and 100,000 operator drills (a task's forward lines beside the
             teacher's chain lines; 30,000 of them in the GEMM or conv epilogue): 2,000 steps of 8 rows of
             4,096 tokens holding whole texts, bf16 autocast -> pretrain/ (optional, --set pretrain.steps=0);
             pretrain.time_limit_s=N stops before a step that would pass N s, its state in pretrain.ckpt.pt,
             and the next call resumes it
  sft        rl/sft.py (TRL, assistant-only loss): 1 epoch over the SFT set and the repair set (a planted
             bug's reply is context, not a target), batch 8, lr 3e-4, no activation checkpointing -> sft/;
             sft.time_limit_s=N likewise (TRL's checkpoint in sft/checkpoint-*)
  genbench   tokens/s of the static-cache sampler (256 rows x 512 new tokens; on a GPU also with CUDA
             graphs) against the plain decode loop, and sampler vs trainer log-probs on sampled replies
             (token-exact, max |diff|), and one decoding step's milliseconds at 64-256 rows over caches of
             1,024 and 6,144 positions, profiled at RL's shape -> genbench.json
  rl         RLTrainer on the train split: steps of 16 prompts x 8 samples x 2 turns, 1,792 new tokens,
             lr 2e-5 in 8 updates a step, TRLOO, MRS and PRS on, float32, the static-cache sampler with
             CUDA graphs, prompts from the whole split (rl.prompts=N: its first N, the same every step), until the
             steps have taken rl.budget_s (300 s, across calls); checkpoints every step in rl_<tag>/ckpt,
             stops before a step that would pass this call's rl.time_limit_s (the next call resumes)
             -> rl_<tag>/model, scored teacher-forced as after pretrain and sft (reads_the_task)
  eval       --checkpoint sft | rl_<tag>: 64 held-out tasks (operator combinations never seen in RL), 32 seen
             train-split tasks and the built-in levels 1-2 in one batch, 2 turns, eval.samples episodes a task
             (1); STTS (3 user turns, keep 2, 2 iterations = 4 turns) on 16 held-out tasks, one episode each;
             temperature 0.7, the same sampling seed for every checkpoint; speedups over eager
             PyTorch (no torch.compile baselines) -> eval_<checkpoint>.json (+ trajectories)
  baselines  (GPU; not part of all) the eager baselines of the tasks RL's first rl.steps steps draw and of
             the evaluation's tasks, measured ahead into the cache ($DRK_CACHE_DIR/baselines): they depend
             on the task and the timing settings, not on the model, so a later run that carries the cache
             skips measuring them -> baselines.json

On a GPU machine, experiments/mini/device.sh runs these phases in calls of at most 10 minutes, each resuming
where the last stopped (docs/mini_drkernel.md has the time plan). --export defaults to $OUT. Each phase
writes <phase>.json beside the run's settings.json, and results.json sums the run up (report.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from drk_lab.rl.advantages import ADVANTAGES  # noqa: E402
from experiments.mini.report import write_results  # noqa: E402
from experiments.mini.settings import EvalSettings, MiniSettings, flat, literal, read_config, with_overrides  # noqa: E402
from experiments.mini.texts import write_json  # noqa: E402

PHASES = ("tokenizer", "pretrain", "sft", "genbench", "rl", "eval")  # "all", in this order


class UsageError(Exception):
    """An everyday mistake: one line on stderr, exit status 2."""


def parse_set(items: list[str], settings: MiniSettings) -> MiniSettings:
    """--set part.name=value (a Python literal) for any setting (settings.flat names them)."""
    known, changes = flat(settings), {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in known:
            raise UsageError(f"--set {item!r}: expected PART.NAME=VALUE with PART.NAME one of {', '.join(known)}")
        changes[name] = literal(value)
    return with_overrides(settings, changes)


def commit() -> str | None:
    """The repository's commit the run started from (None outside a git checkout)."""
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def device_name() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def machine() -> str:
    """The card the run measured on (its speeds compare only on the same one), or the CPU's cores."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"


def rl_rows(args, split: str | None):
    """(spec, task, row) of the RL prompt set's `split` (None: both)."""
    if not Path(args.rl_data).is_file():
        raise UsageError(f"--rl-data {args.rl_data}: no such file (the RL prompt set from `drk data rl`)")
    return list(read_rl_split(str(args.rl_data), split))


@functools.cache
def read_rl_split(path: str, split: str | None) -> tuple:
    """Read once per process: a phase asks for the same split several times, and each read parses every reference."""
    from drk_lab.data.export import read_rl_tasks

    return tuple(read_rl_tasks(path, split=split))


def rl_items(args, split: str, limit: int | None, settings: MiniSettings, small: bool = True) -> list:
    """(spec, task) pairs of `split` in a seeded order, the first `limit` (None: all; small sizes on a CPU
    unless small=False, for callers that read only the specs)."""
    items = [(spec, task) for spec, task, _ in rl_rows(args, split)]
    random.Random(settings.seed).shuffle(items)
    items = items if limit is None else items[:limit]
    return [(spec, task.small()) for spec, task in items] if small and device_name() == "cpu" else items


def rl_tasks(args, split: str, limit: int | None, settings: MiniSettings) -> list:
    return [task for _, task in rl_items(args, split, limit, settings)]


def reads_the_task(args, settings, model_dir: Path) -> dict:
    """teacher_forced_replies on the evaluation's held-out and seen tasks (a part whose limit is 0 is left out),
    and teacher_forced_drills in both forms on as many held-out tasks with a linear or conv head and a chain."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drk_lab.data.kernels_rows import chain_wanted
    from experiments.mini.model import teacher_forced_drills, teacher_forced_replies

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device_name()).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    parts = {part: teacher_forced_replies(model, tokenizer, [spec for spec, _ in rl_items(args, split, limit, settings)])
             for part, split, limit in (("heldout", "heldout", settings.eval.heldout),
                                        ("seen", "train", settings.eval.seen)) if limit != 0}
    headed = [spec for spec, _ in rl_items(args, "heldout", None, settings, small=False)
              if spec.head and chain_wanted(spec)]
    headed = headed[: settings.eval.heldout]
    if headed:
        parts["heldout_drills"] = teacher_forced_drills(model, tokenizer, headed)
        parts["heldout_epilogue_drills"] = teacher_forced_drills(model, tokenizer, headed, epilogue=True)
    return parts


def sft_dataset(args):
    from drk_lab.data.cold_start import load_cold_start

    for path in args.sft_data:
        if not Path(path).exists():
            raise UsageError(f"--sft-data {path}: no such file (the SFT set from `drk data sft`)")
    return load_cold_start(args.sft_data)


def eval_kwargs(settings: MiniSettings) -> dict:
    if device_name() == "cpu":
        return {"device": "cpu"}
    # Fast@p and the reward are speedups over eager PyTorch: a torch.compile baseline per new task would
    # cost seconds each and be read by nothing here
    return {"correctness_trials": settings.eval.correctness_trials, "timing_trials": settings.eval.timing_trials,
            "compile_baseline": False}


def run_episodes(tasks: list, policy, settings: MiniSettings, schedule, samples: int = 1, timings: dict | None = None):
    """The evaluation's episodes of `tasks` with `policy`: its temperature, sampling seed and harness settings."""
    from drk_lab.agent.episodes import run_many

    sampling = {"temperature": settings.eval.temperature, "max_new_tokens": settings.model.max_new_tokens, "seed": settings.seed}
    return run_many(tasks, policy, schedule, samples=samples, timings=timings, sampling=sampling,
                    tokenizer=policy.tokenizer, feedback_tokens=settings.model.feedback_tokens, **eval_kwargs(settings))


def step_seconds(metrics: Path, last_step: int) -> list[float]:
    """Seconds of each RL step logged up to `last_step` (the checkpoint a resumed run starts from)."""
    if not metrics.exists():
        return []
    rows = {row["step"]: row["time/step_s"] for row in map(json.loads, metrics.read_text().splitlines())}
    return [seconds for step, seconds in rows.items() if step <= last_step]


def need(path: Path, phase: str) -> Path:
    if not (path / "config.json").exists():
        raise UsageError(f"{path}: no model here; run --phase {phase} first (with the same --out)")
    return path


# -- phases ------------------------------------------------------------------------------------------
def phase_tokenizer(args, settings, out: Path) -> dict:
    from experiments.mini.model import build_model, build_tokenizer, parameter_count
    from experiments.mini.texts import conversation_texts, reply_token_lengths

    dataset = sft_dataset(args)
    sft_texts = conversation_texts(dataset)
    prompts = [t.source for t in rl_tasks(args, "train", settings.model.tokenizer_prompts, settings)]
    tokenizer = build_tokenizer(settings.model, sft_texts, prompts)
    path = build_model(tokenizer, settings.model, out / "init", seed=settings.seed)
    from transformers import AutoModelForCausalLM

    params = parameter_count(AutoModelForCausalLM.from_pretrained(path))
    lengths = [len(ids) for ids in tokenizer(sft_texts, add_special_tokens=False)["input_ids"]]
    replies = sorted(reply_token_lengths(dataset, tokenizer))
    p90 = replies[len(replies) * 9 // 10]
    within = sum(n < settings.model.max_new_tokens for n in replies) / len(replies)  # the stop token needs one more
    if within < 0.9:
        print(f"warning: only {within:.0%} of the teacher's replies fit in max_new_tokens={settings.model.max_new_tokens}"
              f" tokens (90th percentile {p90})", flush=True)
    return {"vocab": len(tokenizer), "parameters": params, "sft_rows": len(sft_texts),
            "sft_tokens": sum(lengths), "sft_tokens_max": max(lengths),
            "reply_tokens": {"p50": replies[len(replies) // 2], "p90": p90, "max": replies[-1]},
            "replies_within_max_new_tokens": within}


def start_model(args, out: Path) -> Path:
    """What SFT starts from: --model, else pretrain/ when it exists, else init/."""
    if args.model:
        if not (Path(args.model) / "config.json").exists():
            raise UsageError(f"--model {args.model}: not a local Hugging Face model folder (no config.json)")
        return Path(args.model)
    from drk_lab.rl.pretrain import checkpoint_path

    if checkpoint_path(out / "pretrain").exists():  # SFT from the random model instead would waste a run
        raise UsageError(f"{out}: pretraining stopped at a call's time limit; run --phase pretrain again to finish it")
    return out / "pretrain" if (out / "pretrain" / "config.json").exists() else need(out / "init", "tokenizer")


def phase_pretrain(args, settings, out: Path) -> dict:
    from transformers import AutoTokenizer

    from drk_lab.agent.prompts import initial_prompt
    from experiments.mini.texts import (conversation_texts, first_turn_texts, fresh_train_specs, operator_drill,
                                        without_planted_bugs)
    from drk_lab.rl.pretrain import packed_rows, pretrain

    started = time.perf_counter()  # the time limit counts the texts' making and packing as well
    init = need(out / "init", "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(init)
    dataset = without_planted_bugs(sft_dataset(args))
    texts = conversation_texts(dataset, tokenizer)
    # more operator combinations than the SFT set's: the teacher's first reply to other train-split tasks
    # and to tasks sampled afresh with train-side combinations (never a held-out one)
    covered = {messages[0]["content"] for messages in dataset["messages"]}
    rows = rl_rows(args, None)
    in_sft = [initial_prompt(task) in covered for _, task, _ in rows]
    specs = [spec for (spec, _, row), sft in zip(rows, in_sft) if row["split"] == "train" and not sft]
    specs = specs[: settings.pretrain.first_turns]
    summary = Path(args.rl_data).with_name("summary.json")  # the set's split rule, for new combinations
    rule = json.loads(summary.read_text()) if summary.is_file() else {}
    fresh = fresh_train_specs(settings.pretrain.new_tasks, rows, rule.get("heldout_fraction"), rule.get("seed", 0),
                              seed=10_000 + settings.seed)
    texts += first_turn_texts(specs + fresh, tokenizer)
    drills = fresh_train_specs(settings.pretrain.drills, rows, rule.get("heldout_fraction"), rule.get("seed", 0),
                               seed=20_000 + settings.seed)
    texts += [operator_drill(spec) for spec in drills]
    epilogue = fresh_train_specs(settings.pretrain.epilogue_drills, rows, rule.get("heldout_fraction"),
                                 rule.get("seed", 0), seed=30_000 + settings.seed, with_head=True)
    texts += [operator_drill(spec, epilogue=True) for spec in epilogue]
    packed = packed_rows(texts, tokenizer, settings.pretrain.length, seed=settings.seed)
    limit = settings.pretrain.time_limit_s
    result = pretrain(init, packed, out / "pretrain", steps=settings.pretrain.steps, batch=settings.pretrain.batch,
                      lr=settings.pretrain.lr, seed=settings.seed,
                      time_limit_s=None if limit is None else limit - (time.perf_counter() - started))
    done = {"stopped_by_time_limit": not result["finished"], "first_loss": result["loss"][0],
            "last_loss": result["loss"][-1], "sft_conversations": len(covered),
            "first_turn_tasks": len(specs), "new_tasks": len(fresh), "drills": len(drills),
            "epilogue_drills": len(epilogue),
            "combinations": len({s.combination for s in specs + fresh}
                                | {s.combination for (s, _, _), sft in zip(rows, in_sft) if sft}),
            **result}
    if result["finished"]:
        done["reads_the_task"] = reads_the_task(args, settings, out / "pretrain")
    return done


def phase_sft(args, settings, out: Path) -> dict:
    start = start_model(args, out)  # a mistake is told before TRL's imports, which take seconds
    import torch

    from drk_lab.rl.sft import run_sft

    started = time.perf_counter()
    limit = settings.sft.time_limit_s
    # TRL checkpoints activations by default (each layer's forward again in the backward pass); a model of
    # tens of millions of parameters has memory to spare for them
    dataset = sft_dataset(args)
    if settings.sft.rows is not None and settings.sft.rows < len(dataset):
        dataset = dataset.shuffle(seed=settings.seed).select(range(settings.sft.rows))
    run = run_sft(str(start), dataset, out / "sft", lr=settings.sft.lr, epochs=settings.sft.epochs,
                  batch_size=settings.sft.batch, max_length=settings.sft.max_length, seed=settings.seed,
                  max_steps=settings.sft.max_steps, bf16=torch.cuda.is_available(), lr_scheduler_type="cosine",
                  gradient_checkpointing=False, disable_tqdm=False, resume=True,
                  time_limit_s=None if limit is None else limit - (time.perf_counter() - started))
    losses = [r["loss"] for r in run.trainer.state.log_history if "loss" in r]
    done = {"start": str(start), "metrics": run.metrics, "loss": losses, "resumed": run.resumed,
            "stopped_by_time_limit": not run.finished}
    if run.finished:
        done["reads_the_task"] = reads_the_task(args, settings, out / "sft")
    return done


def phase_genbench(args, settings, out: Path) -> dict:
    import torch

    from experiments.mini.model import decode_step_cost, generation_speed
    from drk_lab.policies.huggingface import TransformersPolicy
    from drk_lab.rl.sampler import StaticCachePolicy
    from drk_lab.rl.logprobs import sequence_logprobs

    path = out / "sft" if (out / "sft" / "config.json").exists() else start_model(args, out)
    policy = StaticCachePolicy(str(path), dtype=torch.float32)
    tasks = rl_tasks(args, "train", settings.eval.genbench_rows, settings)
    prompts = [policy.prompt_ids([{"role": "user", "content": t.source}]) for t in tasks]
    prompts = [(p * settings.eval.genbench_rows)[:512] for p in prompts]  # at most 512 prompt tokens each
    prompts = (prompts * settings.eval.genbench_rows)[: settings.eval.genbench_rows]
    kw = {"pad_token_id": policy.pad_token_id, "stop_token_ids": policy.stop_token_ids}
    static = generation_speed(policy.model, prompts, settings.eval.genbench_tokens, **kw)
    on_gpu = policy.device.type == "cuda"
    graphed = generation_speed(policy.model, prompts, settings.eval.genbench_tokens, cuda_graph=True, **kw) if on_gpu else None
    loop_rows, loop_tokens = min(16, len(prompts)), min(64, settings.eval.genbench_tokens)
    loop = TransformersPolicy(policy.model, policy.tokenizer, batch_size=loop_rows)
    started = time.perf_counter()
    loop._decode_batch(prompts[:loop_rows], loop_tokens, 1.0, 1.0, 0, None)
    loop_s = time.perf_counter() - started
    # the trainer's view of sampled replies (each decode path on a GPU): same tokens, log-probs from its
    # teacher-forced forward
    diffs = {}
    for cuda_graph in (False, True) if on_gpu else (False,):
        policy.cuda_graph = cuda_graph
        sampled = policy.generate([[{"role": "user", "content": t.source}] for t in tasks[:8]], n=1, seed=1,
                                  max_new_tokens=min(128, settings.eval.genbench_tokens))
        diffs[cuda_graph] = []
        for completion, in sampled:
            ids = completion.extra["prompt_token_ids"] + completion.token_ids
            rows = {"input_ids": torch.tensor([ids], device=policy.device)}
            rows["attention_mask"] = torch.ones_like(rows["input_ids"])
            rows["position_ids"] = torch.arange(len(ids), device=policy.device)[None]
            with torch.no_grad():
                trainer_lp = sequence_logprobs(policy.model, rows)[0, -len(completion.token_ids):].cpu()
            diffs[cuda_graph].append((trainer_lp - torch.tensor(completion.logprobs)).abs().max().item())
    # one decoding step at the genbench's shape and at RL's (128 rows; caches up to a turn-2 context): what
    # a step costs as rows and cache grow, and, at RL's turn-2 shape, which operators take its time
    shapes = [(r, n) for r in (64, 128, 256) for n in (1024, settings.model.max_context_tokens)] if on_gpu else [(4, 64)]
    profiled = (128, settings.model.max_context_tokens) if on_gpu else (4, 64)
    steps = [decode_step_cost(policy.model, r, n, profile=(r, n) == profiled) for r, n in shapes]
    return {"model": str(path), "static_cache": static, "static_cache_graph": graphed, "decode_step": steps,
            "decode_loop": {"rows": loop_rows, "new_tokens": loop_tokens, "seconds": loop_s,
                            "tokens_per_s": loop_rows * loop_tokens / loop_s},
            "logprob_max_abs_diff": max(diffs[False]), "logprob_max_abs_diff_per_reply": diffs[False],
            "logprob_max_abs_diff_graph": max(diffs[True]) if on_gpu else None}


def phase_rl(args, settings, out: Path) -> dict:
    start = need(out / "sft", "sft")  # before the trainer's imports, which take seconds
    from collections import Counter

    from drk_lab.agent.context import episode_schedule
    from drk_lab.agent.trajectory import read_jsonl, write_jsonl
    from experiments.mini.report import (caught_hacks, chain_counts, paired_comparison, shared_first_tokens,
                                     summarize_evaluation)
    from drk_lab.rl.trainer import RLTrainer

    folder = out / f"rl_{args.tag}"
    ckpt = folder / "ckpt"
    resume = "latest" if any(ckpt.glob("step_*/trainer.json")) else None
    items = rl_items(args, "train", settings.rl.prompts, settings)
    specs = {task.name: spec for spec, task in items}
    counted, hacks, probes, probe_dir = (folder / "chain_per_step.jsonl", folder / "hacks.jsonl",
                                         folder / "probes.jsonl", folder / "probe")
    trainer = RLTrainer(
        str(start), [task for _, task in items], seed=settings.rl.seed,
        prompts_per_step=settings.rl.prompts_per_step, samples=settings.rl.samples, turns=settings.rl.turns,
        max_new_tokens=settings.model.max_new_tokens, max_context_tokens=settings.model.max_context_tokens,
        feedback_tokens=settings.model.feedback_tokens, sampler="static", cuda_graph=settings.model.cuda_graph,
        generation_batch_size=4096,
        micro_batch_size=settings.rl.micro_batch_size, mini_batches=settings.rl.mini_batches, lr=settings.rl.lr,
        kl_coef=settings.rl.kl_coef, advantage=settings.rl.advantage, prs=settings.rl.prs, mrs=settings.rl.mrs,
        temperature=settings.rl.temperature, eval_kwargs=eval_kwargs(settings),
        log_dir=str(folder / "log"), checkpoint_dir=str(ckpt), checkpoint_every=1, resume_from=resume,
        save_rollouts=False)
    from tqdm.auto import tqdm

    started = time.perf_counter()
    bar = tqdm(total=settings.rl.steps, initial=trainer.state.step, desc=f"rl {args.tag}", unit="step")
    # a step is started only if one as long as the longest so far still ends within this call's limit and
    # within the run's RL budget; earlier calls' steps (the log, up to the checkpoint) count for both
    earlier = step_seconds(folder / "log" / "metrics.jsonl", trainer.state.step)
    spent, longest = sum(earlier), max(earlier, default=0.0)
    budget = math.inf if settings.rl.budget_s is None else settings.rl.budget_s
    probe_items = rl_items(args, "heldout", settings.rl.probe_tasks, settings) if settings.rl.probe_every else []
    probe_specs = {task.name: spec for spec, task in probe_items}

    def probe() -> None:
        """The held-out probe: the model as it is now on the evaluation's first rl_probe_tasks held-out tasks,
        with the evaluation's sampling seed every time, so that each probe pairs episode by episode with
        the arm's first (in this folder: at step 0, or where a carried arm resumed)."""
        probe_started = time.perf_counter()
        with trainer.generation_policy() as policy:
            trajectories = run_episodes([task for _, task in probe_items], policy, settings,
                                        episode_schedule(settings.eval.turns))
        first = min(probe_dir.glob("step_*.jsonl"), default=None)  # zero-padded: the earliest step
        probe_dir.mkdir(parents=True, exist_ok=True)
        write_jsonl(trajectories, probe_dir / f"step_{trainer.state.step:06d}.jsonl", append=False)
        row = {"step": trainer.state.step, **summarize_evaluation(trajectories, specs=probe_specs)}
        if first is not None:
            row["paired_with_first"] = {"step": int(first.stem[len("step_"):]),
                                        **paired_comparison(read_jsonl(first), trajectories)}
        row["seconds"] = time.perf_counter() - probe_started
        with open(probes, "a") as f:
            f.write(json.dumps(row) + "\n")

    def probe_rows() -> list[dict]:
        return [json.loads(line) for line in probes.read_text().splitlines()] if probes.exists() else []

    def fits(seconds_so_far: float, limit: float, extra: float = 0.0) -> bool:
        return seconds_so_far + longest + extra < limit

    def probe_after(step: int) -> float:  # the seconds a probe after `step` may take (its longest so far)
        due = settings.rl.probe_every and step % settings.rl.probe_every == 0
        return max((row["seconds"] for row in probe_rows()), default=longest) if due else 0.0

    if probe_items and not any(probe_dir.glob("step_*.jsonl")):
        probe()  # the arm's starting point, which later probes are paired with
    while (trainer.state.step < settings.rl.steps and fits(spent, budget)
           and fits(time.perf_counter() - started, settings.rl.time_limit_s, probe_after(trainer.state.step + 1))):
        row = trainer.train(trainer.state.step + 1)[-1]
        spent += row["time/step_s"]
        longest = max(longest, row["time/step_s"])
        # the rollouts' operator counts per step (chain_kept: does turn 2 learn to keep a right chain?) and
        # how much of the first replies a group shares, appended to a small file so that a resumed phase
        # still reports every step
        rollout = trainer.last_rollout.trajectories
        counts = {"step": trainer.state.step, **chain_counts(rollout, specs), **shared_first_tokens(rollout)}
        with open(counted, "a") as f:
            f.write(json.dumps(counts) + "\n")
        with open(hacks, "a") as f:  # what the caught replies were, to read beside the count the log has
            f.writelines(json.dumps({"step": trainer.state.step, **row}) + "\n" for row in caught_hacks(rollout))
        if trainer.state.step == settings.rl.snapshot_step:
            trainer.export(out / f"rl_{args.tag}_step{trainer.state.step}" / "model")
        if probe_items and probe_after(trainer.state.step):
            probe()
        bar.update(1)
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", s=f"{row['time/step_s']:.0f}")
    bar.close()
    trainer.export(folder / "model")
    unfinished = trainer.state.step < settings.rl.steps
    # stopped by this call's limit, the next call resumes; by the RL budget (or with every step done), finished
    done = {"tag": args.tag, "train_prompts": len(items), "steps_done": trainer.state.step,
            "steps_planned": settings.rl.steps, "resumed": resume is not None, "rl_seconds": spent,
            "stopped_by_budget": unfinished and not fits(spent, budget),
            "stopped_by_time_limit": unfinished and fits(spent, budget),
            "chain_per_step": [json.loads(line) for line in counted.read_text().splitlines()] if counted.exists() else [],
            "hacks_by_check": Counter(reason for line in (hacks.read_text().splitlines() if hacks.exists() else [])
                                      for reason in json.loads(line)["reasons"]),
            "probes": probe_rows()}
    # the teacher's replies scored as after SFT (a few seconds): did RL unlearn them?
    done["reads_the_task"] = reads_the_task(args, settings, folder / "model")
    return done


def eval_label(checkpoint: str, settings: MiniSettings) -> str:
    """An evaluation's name: the checkpoint's, with _temp<T> when it samples at another temperature than the
    default, so that evaluations at two temperatures sit side by side, each paired with its own kind."""
    temperature = settings.eval.temperature
    return Path(checkpoint).name + ("" if temperature == EvalSettings.temperature else f"_temp{temperature:g}")


def phase_eval(args, settings, out: Path) -> dict:
    import torch

    import drk_lab as drk
    from drk_lab.agent.context import episode_schedule, stts_schedule
    from drk_lab.agent.trajectory import read_jsonl, write_jsonl
    from experiments.mini.report import at_another_temperature, paired_comparison, summarize_evaluation
    from drk_lab.rl.sampler import StaticCachePolicy

    name = args.checkpoint
    path = Path(name) if Path(name).is_dir() else out / name / "model" if name.startswith("rl_") else out / name
    policy = StaticCachePolicy(str(need(path, "sft" if name == "sft" else "rl")), dtype=torch.float32,
                               cuda_graph=settings.model.cuda_graph)
    heldout_items = rl_items(args, "heldout", settings.eval.heldout, settings)
    seen_items = rl_items(args, "train", settings.eval.seen, settings)
    specs = {task.name: spec for spec, task in heldout_items + seen_items}  # to check the operators written
    heldout, seen = [task for _, task in heldout_items], [task for _, task in seen_items]
    builtin = [t for level in settings.eval.builtin_levels for t in drk.builtin_tasks(level=level)]
    builtin = builtin[: settings.eval.builtin_max] if settings.eval.builtin_max else builtin
    builtin = [t.small() for t in builtin] if device_name() == "cpu" else builtin
    label, suffix = eval_label(name, settings), eval_label("", settings)
    report = {"checkpoint": str(path), "temperature": settings.eval.temperature}
    # held-out, seen and built-in tasks share one batch: decoding a model this small costs per step, not per row
    batches = [(episode_schedule(settings.eval.turns), settings.eval.samples,
                {"heldout": heldout, "seen": seen, "builtin": builtin}),
               (stts_schedule(*settings.eval.stts), 1, {"heldout_stts": heldout[: settings.eval.stts_tasks]})]
    for schedule, samples, parts in batches:
        tasks = [t for part_tasks in parts.values() for t in part_tasks]
        if not tasks:
            continue
        started, split = time.perf_counter(), {}
        trajectories = run_episodes(tasks, policy, settings, schedule, samples=samples, timings=split)
        batch = "+".join(parts)
        report.setdefault("seconds_by_batch", {})[batch] = time.perf_counter() - started
        report.setdefault("seconds_split", {})[batch] = {"generation": split["generation_s"],
                                                         "evaluation": split["evaluation_s"]}  # baselines included
        for part, part_tasks in parts.items():
            names = {t.name for t in part_tasks}
            mine = [t for t in trajectories if t.task in names]
            if mine:
                write_jsonl(mine, out / f"eval_{label}_{part}.jsonl", append=False)
                report[part] = {**summarize_evaluation(mine, specs=specs), "tasks": len(part_tasks)}
                after_sft = out / f"eval_sft{suffix}_{part}.jsonl"  # same tasks, sampling seed and temperature
                if label != f"sft{suffix}" and after_sft.exists():
                    report[part]["paired_with_sft"] = paired_comparison(read_jsonl(after_sft), mine)
                # and against the RL checkpoints evaluated before it (an ablation or control against TRLOO)
                earlier = {f.name[len("eval_"):-len(f"_{part}.jsonl")]: f
                           for f in out.glob(f"eval_rl_*{suffix}_{part}.jsonl")}
                if not suffix:  # those at another temperature pair among themselves
                    earlier = {other: f for other, f in earlier.items() if not at_another_temperature(other)}
                earlier.pop(label, None)
                if label != f"sft{suffix}" and earlier:
                    report[part]["paired_with_rl"] = {other: paired_comparison(read_jsonl(f), mine)
                                                      for other, f in sorted(earlier.items())}
    return report


def phase_baselines(args, settings, out: Path) -> dict:
    from drk_lab.harness.evaluate import ensure_baselines
    from drk_lab.rl.rollout import tasks_of_step

    if device_name() == "cpu":
        raise UsageError("--phase baselines: baselines are GPU timings, and there is no CUDA device here")
    train = rl_tasks(args, "train", settings.rl.prompts, settings)
    # RL's steps in their order first, so that a call cut short has measured the earliest steps' tasks
    drawn = [t for step in range(settings.rl.steps)
             for t in tasks_of_step(train, step, settings.rl.prompts_per_step, settings.rl.seed)]
    evaluated = rl_tasks(args, "heldout", settings.eval.heldout, settings) + rl_tasks(args, "train", settings.eval.seen, settings)
    tasks = list({t.name: t for t in drawn + evaluated}.values())
    timing = eval_kwargs(settings)  # the evaluations' own timing settings, so that the cache keys match
    found = ensure_baselines(tasks, timing_trials=timing["timing_trials"], compile_baseline=timing["compile_baseline"])
    return {"tasks": len(tasks), "rl_steps": settings.rl.steps,
            "failed": {t.name: b.get("error") for t, b in zip(tasks, found) if not b.get("eager")}}


def export(out: Path, target: Path) -> None:
    """Copy the small files (JSON, JSONL, CSV outside model and checkpoint folders) to `target`."""
    for path in out.rglob("*"):
        parts = set(path.relative_to(out).parts)
        if path.is_file() and path.suffix in (".json", ".jsonl", ".csv") and not parts & {"ckpt", "model", "init",
                                                                                          "pretrain", "sft", "rollouts", "probe"}:
            dest = target / path.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


RUNNERS = {"tokenizer": phase_tokenizer, "pretrain": phase_pretrain, "sft": phase_sft, "genbench": phase_genbench,
           "rl": phase_rl, "eval": phase_eval, "baselines": phase_baselines}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phase", default="all", help=f"one of {', '.join(RUNNERS)}, all, or a comma-separated list")
    p.add_argument("--out", default=str(REPO / "runs" / "mini"), help="run folder (models, checkpoints, logs)")
    p.add_argument("--config", action="append", default=[], metavar="NAME",
                   help="a recipe: experiments/mini/config/NAME.py (or a path), applied in order before --set")
    p.add_argument("--set", action="append", default=[], metavar="PART.NAME=VALUE", help="change one setting")
    p.add_argument("--model", default=None, help="a local Hugging Face folder to start SFT from instead")
    p.add_argument("--sft-data", nargs="+", default=[str(REPO / "data" / "sft" / name)
                                                     for name in ("sft.parquet", "repairs.parquet")],
                   help="SFT sets from `drk data sft` (default: the teacher's trajectories and the repair set)")
    p.add_argument("--rl-data", default=str(REPO / "data" / "rl" / "prompts.jsonl.gz"))
    p.add_argument("--advantage", choices=ADVANTAGES, default=None, help="the RL advantage (ablation or control)")
    p.add_argument("--prs", choices=("on", "off"), default=None, help="profiling-based rejection (ablation)")
    p.add_argument("--tag", default=None, help="RL run name: rl_<tag>/ (default: the advantage, +noprs)")
    p.add_argument("--checkpoint", default=None, help="eval: sft, rl_<tag> or a model folder (default: all there are)")
    p.add_argument("--export", default=os.environ.get("OUT"), help="copy the small result files here (default $OUT)")
    args = p.parse_args(argv)
    try:
        settings = MiniSettings()
        for config in args.config:
            try:
                settings = with_overrides(settings, read_config(config))
            except (OSError, KeyError, ValueError) as e:
                raise UsageError(f"--config {config}: {e.args[0] if isinstance(e, KeyError) else e}") from None
        settings = parse_set(args.set, settings)
        if args.advantage:
            settings = replace(settings, rl=replace(settings.rl, advantage=args.advantage))
        if args.prs:
            settings = replace(settings, rl=replace(settings.rl, prs=args.prs == "on"))
        args.tag = args.tag or (settings.rl.advantage + ("" if settings.rl.prs else "_noprs")
                                + (f"_seed{settings.rl.seed}" if settings.rl.seed else ""))
        phases = PHASES if args.phase == "all" else tuple(args.phase.split(","))
        unknown = [ph for ph in phases if ph not in RUNNERS]
        if unknown:
            raise UsageError(f"--phase {args.phase}: unknown phase {unknown[0]!r} (one of {', '.join(RUNNERS)}, all)")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if not (out / "settings.json").exists():  # the run's settings; a phase's own --set go into its JSON
            write_json(out / "settings.json", {"settings": settings.to_dict(), "config": args.config,
                                               "device": device_name(), "machine": machine(),
                                               "date": time.strftime("%Y-%m-%d"), "commit": commit()})
        chosen = args.checkpoint  # each phase below sets args.checkpoint to its own target
        for phase in phases:
            if phase == "pretrain" and settings.pretrain.steps == 0:
                continue
            targets = [chosen] if chosen else [n for n in ["sft", f"rl_{args.tag}"] if (out / n).is_dir() or n == "sft"]
            for target in (targets if phase == "eval" else [None]):
                args.checkpoint = target
                path = out / (f"eval_{eval_label(target, settings)}.json" if target
                              else f"{phase}{'_' + args.tag if phase == 'rl' else ''}.json")
                started = time.perf_counter()
                print(f"== {phase}{' ' + target if target else ''}", flush=True)
                result = RUNNERS[phase](args, settings, out)
                result["seconds"] = time.perf_counter() - started
                if result.get("resumed") and path.exists():  # a resumed phase also took its earlier calls' time
                    result["seconds"] += json.loads(path.read_text())["seconds"]
                result["set"] = args.set  # this call's --set NAME=VALUE, beside the run's settings.json
                write_json(path, result)
                write_results(out)
                print(f"   {phase} done in {result['seconds']:.1f} s", flush=True)
                if args.export:
                    export(out, Path(args.export))
            if result.get("stopped_by_time_limit"):  # what comes next needs this phase finished
                print(f"   {phase} stopped by its time limit: the same call again resumes it", flush=True)
                break
    except UsageError as e:
        print(f"mini run: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
