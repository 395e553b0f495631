"""A short multi-turn RL run: what one trainer step costs and where the time goes.

    python bench/rl_run.py --model /path/to/small-model [--steps 3] [--prompts 2] [--samples 4] [--turns 2]
                           [--max-new-tokens 512] [--lora 16] [--dtype bfloat16] [--force-solutions]
    accelerate launch --num_processes 2 bench/rl_run.py --model ...      # the same run over 2 GPUs

Without --model it builds the tiny random model (drk_lab.rl.tiny_model), or with --random-hidden H
--random-layers N a random Qwen3 of that size with the same local tokenizer (built on the machine, nothing
downloaded; its vocabulary is only ~1k tokens, so logits cost less than a real model's). Random models write
no code; with
--force-solutions sample 0 of every task answers its first turn with the built-in solution, so the
groups hold a reward to compare and the optimizer has a gradient (any model). Tasks are the built-in
level-1 tasks that have a solution (their small sizes on CPU). Writes $OUT/rl_run.json: the settings,
per step the log row (reward and Fast@1 per turn, entropy, grad norm, clip and rejection fractions,
mismatch statistics, tokens/s, seconds of generation / evaluation / training, peak GPU memory), and
medians over the steps after the first (which pays for worker start-up and baselines);
$OUT/rl_log/ holds the metrics JSONL/CSV and each step's trajectories.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import drk_lab as drk
from drk_lab.rl.trainer import RLTrainer

OUT = Path(os.environ.get("OUT", "bench_out"))
SUMMARY_KEYS = ("time/step_s", "time/generation_s", "time/evaluation_s", "time/training_s", "tokens_per_s",
                "generation_tokens_per_s", "training_tokens_per_s", "peak_memory_gb", "sequence_tokens",
                "generated_tokens")


def tasks_with_solutions(cuda: bool, names: list[str] | None):
    tasks = []
    for task in drk.builtin_tasks(level=1):
        if names and task.name not in names:
            continue
        try:
            solution = drk.builtin_solution(task)
        except Exception:
            continue
        tasks.append((task if cuda else task.small(), solution))
    return tasks


def random_model(path: Path, hidden: int, layers: int) -> Path:
    """A randomly initialised Qwen3 (bf16 weights) with the tiny model's tokenizer, saved to `path`."""
    from transformers import Qwen3ForCausalLM

    from drk_lab.rl.tiny_model import tiny_config, train_tokenizer

    if not (path / "config.json").exists():
        tokenizer = train_tokenizer()
        config = tiny_config(tokenizer, hidden_size=hidden, num_layers=layers, num_heads=max(hidden // 128, 2))
        config.head_dim = 128 if hidden >= 256 else hidden // 2
        torch.manual_seed(0)
        Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=None, help="a local Hugging Face model folder (default: the tiny random model)")
    p.add_argument("--random-hidden", type=int, default=0, help="build a random Qwen3 with this hidden size")
    p.add_argument("--random-layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=2, help="tasks per step")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--max-context-tokens", type=int, default=16384)
    p.add_argument("--generation-batch-size", type=int, default=16)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--force-solutions", action="store_true")
    p.add_argument("--tasks", default="", help="comma-separated task names (default: all level-1 with a solution)")
    p.add_argument("--timing-trials", type=int, default=20)
    p.add_argument("--correctness-trials", type=int, default=3)
    p.add_argument("--log-dir", default=str(OUT / "rl_log"), help="metrics JSONL/CSV and each step's trajectories")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    OUT.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None and args.random_hidden:
        folder = Path(tempfile.gettempdir()) / f"drk_random_qwen3_{args.random_hidden}x{args.random_layers}"
        model = str(random_model(folder, args.random_hidden, args.random_layers))
    elif model is None:
        from drk_lab.rl.tiny_model import make_tiny_model

        model = str(make_tiny_model(OUT / "tiny_model"))
    pairs = tasks_with_solutions(cuda, [n for n in args.tasks.split(",") if n])
    solutions = {task.name: solution for task, solution in pairs}

    def force(task, sample, turn):
        return f"```python\n{solutions[task.name]}```" if (sample, turn) == (0, 0) else None

    eval_kwargs = {"correctness_trials": args.correctness_trials, "timing_trials": args.timing_trials}
    if not cuda:
        eval_kwargs["device"] = "cpu"
    started = time.perf_counter()
    trainer = RLTrainer(
        model, [t for t, _ in pairs],
        prompts_per_step=args.prompts, samples=args.samples, turns=args.turns, max_new_tokens=args.max_new_tokens,
        max_context_tokens=args.max_context_tokens, generation_batch_size=args.generation_batch_size,
        micro_batch_size=args.micro_batch_size, lr=args.lr, model_dtype=args.dtype if cuda else None,
        lora={"r": args.lora, "lora_alpha": 2 * args.lora, "target_modules": "all-linear"} if args.lora else None,
        gradient_checkpointing=args.gradient_checkpointing, eval_kwargs=eval_kwargs,
        chat_template_kwargs={"enable_thinking": False}, log_dir=args.log_dir,
        force_responses=force if args.force_solutions else None)
    setup_s = time.perf_counter() - started
    rows = trainer.train(args.steps)
    if not trainer.accelerator.is_main_process:
        return
    later = rows[1:] or rows
    summary = {k: statistics.median(r[k] for r in later) for k in SUMMARY_KEYS if all(k in r for r in later)}
    report = {"settings": vars(args), "model": model, "device": torch.cuda.get_device_name() if cuda else "cpu",
              "processes": trainer.accelerator.num_processes, "tasks": [t.name for t, _ in pairs],
              "setup_s": setup_s, "total_s": time.perf_counter() - started, "median_after_first_step": summary,
              "steps": rows}
    (OUT / "rl_run.json").write_text(json.dumps(report, indent=1, default=str))
    for r in rows:
        print(f"step {r['step']}: {r['time/step_s']:.1f} s (generation {r['time/generation_s']:.1f}, evaluation "
              f"{r['time/evaluation_s']:.1f}, training {r['time/training_s']:.1f}), {r['tokens_per_s']:.0f} tokens/s, "
              f"reward {r['reward_mean']:.3f}, loss {r['loss']:.3f}, grad norm {r['grad_norm']:.3g}, "
              f"MRS rejected {r['mrs/rejected_frac']:.2f}, peak {r.get('peak_memory_gb', 0):.1f} GB")


if __name__ == "__main__":
    main()
