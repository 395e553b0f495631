"""drk_lab's own RL trainer on every GPU of one host (accelerate, one process per GPU), timed against one GPU.

    python bench/rl_multi_gpu.py --compare 1,8 --model /path/to/Qwen3-1.7B --steps 3 --prompts-per-gpu 2 \\
           --samples 4 --turns 2 --max-new-tokens 1024 --force-solutions [--backend http://127.0.0.1:8000]
    python bench/rl_multi_gpu.py --compare 1,8 --random-hidden 2048 --random-layers 16 --steps 3 \\
           --prompts-per-gpu 2 --samples 4 --turns 2 --max-new-tokens 512 --force-solutions   # no model files needed
    accelerate launch --num_processes 8 bench/rl_multi_gpu.py --model ... --steps 3      # one run by hand
    python bench/rl_multi_gpu.py --compare 1,2 --steps 1 --prompts-per-gpu 1 --samples 2 --turns 1 \\
           --max-new-tokens 8 --force-solutions --dtype float32                        # the CPU smoke test
    python bench/rl_multi_gpu.py --compare 1,2 --serve --random-hidden 1024 --random-layers 8 --steps 3 \\
           --prompts-per-gpu 2 --samples 4 --turns 2 --max-new-tokens 512 --force-solutions  # through Ray

Weak scaling: every process takes --prompts-per-gpu prompts per step (each with --samples episodes),
so K processes do K times the work of one; step time would stay flat with perfect scaling, and the
figure of merit is episodes per second. Each process generates, evaluates and trains on its own
episodes (trainer.py: a task's samples stay on one process, so the group baselines are local; the
gradient is averaged over processes). Evaluation: without --backend each process evaluates through
the harness's worker pool on its own GPU (cuda:LOCAL_RANK, sharing it with training); with --backend
(a `drk serve` URL or another backend `drk.evaluate` accepts) every evaluation goes there; with
--compare and --serve each K starts its own `drk serve --pool ray` with one Ray actor on each of the same
K GPUs (--slots evaluations at once per actor), so training and evaluation share those K GPUs.

--compare K1,K2,... launches `accelerate launch --num_processes K` once per K (without CUDA: torchrun with
K processes and ACCELERATE_USE_CPU, since `accelerate launch --cpu` starts a single process) and
writes $OUT/rl_multi_gpu.json: per K the median step time after the first step, its split (generation,
evaluation, training; the slowest process's), episodes per second, and the speedup of episodes per
second over the first K. A run launched by hand writes $OUT/rl_multi_gpu_K.json (K = processes).
Without --model the tiny random model (drk_lab.rl.tiny_model) is built, or with --random-hidden H
--random-layers N a random Qwen3 of that size (bench/rl_run.py's); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_run import random_model, tasks_with_solutions  # noqa: E402  (bench/ is not a package)

OUT = Path(os.environ.get("OUT", "bench_out"))
TIME_KEYS = ("time/step_s", "time/generation_s", "time/evaluation_s", "time/training_s")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--compare", default="", help="process counts to launch and compare, e.g. 1,8")
    p.add_argument("--model", default=None, help="a local Hugging Face model folder (default: the tiny random model)")
    p.add_argument("--random-hidden", type=int, default=0, help="build a random Qwen3 with this hidden size (bf16)")
    p.add_argument("--random-layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts-per-gpu", type=int, default=2)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--generation-batch-size", type=int, default=16)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--force-solutions", action="store_true", help="sample 0 of each task answers turn 1 with its solution")
    p.add_argument("--backend", default=None, help="evaluate through this backend (a drk service URL) instead of locally")
    p.add_argument("--serve", action="store_true",
                   help="with --compare: each run of K processes evaluates through its own `drk serve --pool ray` "
                        "(one Ray actor on each of the same K GPUs)")
    p.add_argument("--slots", type=int, default=16, help="--serve: evaluations at once per Ray actor")
    p.add_argument("--timing-trials", type=int, default=20)
    p.add_argument("--correctness-trials", type=int, default=3)
    p.add_argument("--port", type=int, default=29517, help="accelerate's main process port for --compare")
    return p.parse_args()


def run_once(args: argparse.Namespace) -> None:
    """One run under accelerate: this process's share of each step; rank 0 writes the results."""
    from accelerate import Accelerator
    from accelerate.utils import gather_object

    from drk_lab.rl.trainer import RLTrainer

    accelerator = Accelerator()
    cuda = torch.cuda.is_available() and not os.environ.get("ACCELERATE_USE_CPU")
    model = args.model
    if model is None:  # built once by the first process, read by all
        from drk_lab.rl.tiny_model import make_tiny_model

        folder = OUT / (f"random_qwen3_{args.random_hidden}x{args.random_layers}" if args.random_hidden else "tiny_model")
        if accelerator.is_main_process:
            if args.random_hidden:
                random_model(folder, args.random_hidden, args.random_layers)
            else:
                make_tiny_model(folder)
        accelerator.wait_for_everyone()
        model = str(folder)
    pairs = tasks_with_solutions(cuda, None)
    solutions = {task.name: solution for task, solution in pairs}

    def force(task, sample, turn):
        return f"```python\n{solutions[task.name]}```" if (sample, turn) == (0, 0) else None

    eval_kwargs = {"correctness_trials": args.correctness_trials, "timing_trials": args.timing_trials}
    if args.backend:
        eval_kwargs["backend"] = args.backend  # KernelEnv evaluates through drk.evaluate(backend=...)
    else:
        eval_kwargs["device"] = f"cuda:{accelerator.local_process_index}" if cuda else "cpu"
    k = accelerator.num_processes
    trainer = RLTrainer(
        model, [t for t, _ in pairs], accelerator=accelerator,
        prompts_per_step=args.prompts_per_gpu * k, samples=args.samples, turns=args.turns,
        max_new_tokens=args.max_new_tokens, generation_batch_size=args.generation_batch_size,
        micro_batch_size=args.micro_batch_size, model_dtype=args.dtype if cuda else None,
        gradient_checkpointing=args.gradient_checkpointing, eval_kwargs=eval_kwargs,
        chat_template_kwargs={"enable_thinking": False}, log_dir=str(OUT / f"rl_log_{k}"),
        force_responses=force if args.force_solutions else None)
    started = time.perf_counter()
    rows = trainer.train(args.steps)
    total_s = time.perf_counter() - started
    mine = [{key: row[key] for key in TIME_KEYS} for row in rows]
    every = gather_object([mine])  # one list of rows per process
    if torch.distributed.is_initialized():
        # every process leaves the group together: one that exits with it still open can abort in its
        # communication threads' teardown ("terminate called without an active exception")
        accelerator.wait_for_everyone()
        torch.distributed.destroy_process_group()
    if not accelerator.is_main_process:
        return
    later = slice(1, None) if len(rows) > 1 else slice(None)  # the first step pays for worker start-up
    slowest = {key: statistics.median(max(p[i][key] for p in every) for i in range(len(rows))[later])
               for key in TIME_KEYS}
    episodes = args.prompts_per_gpu * k * args.samples
    report = {"processes": k, "device": torch.cuda.get_device_name() if cuda else "cpu", "model": model,
              "settings": vars(args), "episodes_per_step": episodes, "total_s": total_s,
              "median_after_first_step": slowest, "episodes_per_s": episodes / slowest["time/step_s"],
              "per_process_times": every, "steps": rows}
    (OUT / f"rl_multi_gpu_{k}.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"{k} processes: {slowest['time/step_s']:.1f} s per step (generation {slowest['time/generation_s']:.1f}, "
          f"evaluation {slowest['time/evaluation_s']:.1f}, training {slowest['time/training_s']:.1f}), "
          f"{report['episodes_per_s']:.2f} episodes/s")


def compare(args: argparse.Namespace, counts: list[int]) -> None:
    cpu = not torch.cuda.is_available()
    forwarded = [a for a in sys.argv[1:] if not a.startswith("--compare")]
    if "--compare" in sys.argv:  # "--compare 1,8" as two words
        i = sys.argv.index("--compare")
        forwarded = sys.argv[1:i] + sys.argv[i + 2:]
    forwarded = [a for a in forwarded if a != "--serve"]
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for k in counts:
        env = {**os.environ, "OUT": str(OUT)}
        server = None
        if args.serve:  # one actor on each of the run's K GPUs
            from service_gpu import TOKEN, start_ray_service

            server, url = start_ray_service(k, args.slots, cpu)
            env["DRK_SERVICE_TOKEN"] = TOKEN
            forwarded_k = [*forwarded, "--backend", url]
        else:
            forwarded_k = forwarded
        if cpu:  # accelerate launch --cpu starts one process whatever --num_processes says; torchrun starts K
            launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(k)]
            env["ACCELERATE_USE_CPU"] = "true"
        else:
            launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(k), "--num_machines",
                      "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(args.port)]
            launch += ["--multi_gpu"] if k > 1 else []
        try:
            proc = subprocess.run([*launch, __file__, *forwarded_k], env=env)
        finally:
            if server is not None:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=120)
        if proc.returncode != 0:
            sys.exit(f"the run with {k} processes failed (exit status {proc.returncode})")
        results.append(json.loads((OUT / f"rl_multi_gpu_{k}.json").read_text()) | {"evaluation": (
            f"drk serve --pool ray, {k} actor(s) x {args.slots} slots" if args.serve else args.backend or "local")})
    base = results[0]["episodes_per_s"]
    summary = [{"processes": r["processes"], "step_s": r["median_after_first_step"]["time/step_s"],
                **{k.removeprefix("time/"): v for k, v in r["median_after_first_step"].items() if k != "time/step_s"},
                "episodes_per_s": r["episodes_per_s"], "speedup": r["episodes_per_s"] / base} for r in results]
    (OUT / "rl_multi_gpu.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1, default=str))
    for s in summary:
        print(f"{s['processes']} processes: {s['step_s']:.1f} s per step, {s['episodes_per_s']:.2f} episodes/s, "
              f"{s['speedup']:.2f}x the first")


def main() -> None:
    args = parse()
    if args.compare:
        try:
            counts = [int(x) for x in args.compare.split(",") if x]
        except ValueError:
            print(f"--compare: expected process counts such as 1,8, got {args.compare!r}", file=sys.stderr)
            sys.exit(2)
        compare(args, counts)
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        run_once(args)


if __name__ == "__main__":
    main()
