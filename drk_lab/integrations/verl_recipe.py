"""The Dr. Kernel recipe for verl: rollout-correction settings equal to MRS, the command-line overrides,
and the data set.

    python -m drk_lab.integrations.verl_recipe data --out ~/data/drk           # train.parquet, val.parquet
    python -m drk_lab.integrations.verl_recipe command --model Qwen/Qwen3-8B --nodes 4 --data ~/data/drk \\
           --service-url http://evalnode:8471                                  # prints the verl command

MRS in verl (0.9.x, `algorithm.rollout_correction`, decoupled mode: verl recomputes the training
log-probs `old_log_probs` before the update, as drk_lab's trainer does). verl's `seq_mean_k1`
rejection keeps a sequence when  log(lo) <= mean over its tokens of -log rho <= log(hi), i.e. when
1/hi <= w <= 1/lo for drk_lab's w = exp(mean log rho). So MRS's band [lower, upper] is
`seq_mean_k1` with the threshold "1/upper_1/lower" (verl's own preset "0.999_1.001" is the band
[0.999001, 1.001001]: the same to within 1e-6, but not equal). MRS's token veto (reject the
trajectory when any token has rho < veto) is `seq_max_k2` with upper bound 0.5 * log(veto)^2: it
rejects the sequence when some token has |log rho| > -log(veto), i.e. rho < veto (as MRS) or also
rho > 1/veto (MRS keeps that one if the mean stays in the band). No importance weights
(`rollout_is=null`): MRS rejects, it does not reweight.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from drk_lab.agent.prompts import initial_prompt
from drk_lab.harness.task import Task, TaskError, load_task_set
from drk_lab.rl.settings import RLSettings

DATA_SOURCE = "drk_lab"
DEFAULTS = RLSettings()


def rollout_correction(lower: float = DEFAULTS.filters.mrs_lower, upper: float = DEFAULTS.filters.mrs_upper,
                       token_veto: float = DEFAULTS.filters.mrs_token_veto) -> dict:
    """verl's algorithm.rollout_correction settings that reject what drk_lab's mismatch_rejection
    rejects (the module docstring says where they differ)."""
    if not 0 < lower <= 1 <= upper or not 0 < token_veto < 1:
        raise ValueError(f"need 0 < lower <= 1 <= upper and 0 < token_veto < 1, got {lower}, {upper}, {token_veto}")
    return {"rollout_is": None, "rollout_rs": "seq_mean_k1,seq_max_k2",
            "rollout_rs_threshold": f"{1 / upper!r}_{1 / lower!r},{0.5 * math.log(token_veto) ** 2!r}",
            "bypass_mode": False}


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    text = str(v)
    return f"'{text}'" if "," in text else text  # hydra reads a bare a,b as a sweep


def drkernel_overrides(model: str, data_dir: str, *, nodes: int = 1, gpus_per_node: int = 8,
                       service_url: str | None = None, settings: RLSettings = DEFAULTS, prompts: int = 16,
                       samples: int = 16, max_prompt_length: int = 4096, max_response_length: int = 8192,
                       epochs: int = 10, project: str = "drk_lab", experiment: str = "drkernel_qwen3_8b") -> list[str]:
    """verl command-line overrides for the Dr. Kernel recipe: `prompts` prompts per step with `samples`
    episodes each, lr, temperature, the loss's clips and aggregation, MRS and TRLOO from `settings`."""
    s = settings
    overrides = {
        "data.train_files": f"{data_dir}/train.parquet", "data.val_files": f"{data_dir}/val.parquet",
        "data.train_batch_size": prompts, "data.max_prompt_length": max_prompt_length,
        "data.max_response_length": max_response_length,
        "actor_rollout_ref.model.path": model,
        "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.n": samples,
        "actor_rollout_ref.rollout.temperature": s.rollouts.temperature, "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.actor.optim.lr": s.loss.lr, "actor_rollout_ref.actor.optim.weight_decay": s.loss.weight_decay,
        "actor_rollout_ref.actor.ppo_mini_batch_size": prompts // s.loss.mini_batches,
        "actor_rollout_ref.actor.clip_ratio_low": s.loss.eps_low, "actor_rollout_ref.actor.clip_ratio_high": s.loss.eps_high,
        "actor_rollout_ref.actor.clip_ratio_c": s.loss.dual_clip, "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum",
        "actor_rollout_ref.actor.grad_clip": s.loss.grad_clip, "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "algorithm.adv_estimator": "trloo", "algorithm.gamma": s.loss.gamma, "algorithm.use_kl_in_reward": False,
        **{f"algorithm.rollout_correction.{k}": v for k, v in rollout_correction(
            s.filters.mrs_lower, s.filters.mrs_upper, s.filters.mrs_token_veto).items()},
        "reward.custom_reward_function.path": "pkg://drk_lab.integrations.verl_reward",
        "reward.custom_reward_function.name": "compute_score",
        "trainer.nnodes": nodes, "trainer.n_gpus_per_node": gpus_per_node, "trainer.total_epochs": epochs,
        "trainer.project_name": project, "trainer.experiment_name": experiment,
    }
    lines = [f"{k}={_value(v)}" for k, v in overrides.items()]
    # keys verl's config does not declare are added with "+"
    lines.append("+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook="
                 "drk_lab.integrations.verl_estimator.register_trloo")
    lines.append(f"+reward.custom_reward_function.reward_kwargs.reward={s.rollouts.reward_fn}")
    if service_url:
        lines.append(f"+reward.custom_reward_function.reward_kwargs.url={service_url}")
    return lines


def verl_rows(tasks: list[Task], split: str = "train") -> list[dict]:
    """verl's RL data set layout: one row per task, the first prompt as chat messages, the task's source
    as the reward's ground truth."""
    return [{"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": initial_prompt(task)}],
             "ability": "triton_kernels", "reward_model": {"style": "rule", "ground_truth": task.source},
             "extra_info": {"split": split, "index": i, "task_name": task.name, "level": task.level or 0}}
            for i, task in enumerate(tasks)]


def write_data(tasks: list[Task], val_tasks: list[Task], out: Path) -> list[Path]:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "train.parquet", out / "val.parquet"]
    pd.DataFrame(verl_rows(tasks, "train")).to_parquet(paths[0])
    pd.DataFrame(verl_rows(val_tasks, "val")).to_parquet(paths[1])
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drk_lab.integrations.verl_recipe")
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("data", help="write train.parquet and val.parquet in verl's layout")
    d.add_argument("--tasks", default="builtin", help="task set for training (builtin, builtin:1, a file or folder)")
    d.add_argument("--val-tasks", default="builtin:1", help="task set for validation")
    d.add_argument("--out", required=True)
    c = sub.add_parser("command", help="print the verl command line of the Dr. Kernel recipe")
    c.add_argument("--model", required=True)
    c.add_argument("--data", required=True, help="the folder `data` wrote")
    c.add_argument("--nodes", type=int, default=1)
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--service-url", default=None, help="the drk service (default: $DRK_SERVICE_URL on the workers)")
    args = p.parse_args(argv)
    if args.what == "data":
        try:
            paths = write_data(load_task_set(args.tasks), load_task_set(args.val_tasks), Path(args.out))
        except TaskError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print("\n".join(str(x) for x in paths))
        return 0
    lines = drkernel_overrides(args.model, args.data, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                               service_url=args.service_url)
    shell = [f'"{line}"' if "'" in line else line for line in lines]  # the shell keeps hydra's quotes
    print(" \\\n    ".join(["python3 -m verl.trainer.main_ppo", *shell]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
