"""The arm's fresh prompts: generated tasks with train-side operator combinations from a seed range used
nowhere else, and none of the tasks whose text any model of the mini recipe is trained on.

    python experiments/rl_arm/prompts.py --out data/rl_arm      # prompts.jsonl.gz, fresh_eval.jsonl.gz, summary.json

Why: the mini runs drew RL prompts from the train split of data/rl, whose teacher replies pretraining had
already shown the model (`pretrain.first_turns`); groups then recited one answer and carried no advantage.

Seeds already taken (checked in the code): the RL set data/rl is seed 0 (`drk data rl --seed 0`); the mini
pretraining samples new tasks from 10_000 + seed, drills from 20_000 + seed and epilogue drills from
30_000 + seed (experiments/mini/run.py, phase_pretrain); experiments/drills/rl.py draws from 20_000 and
30_000. The arm's RL prompts come from RL_SEED, its fresh evaluation tasks from FRESH_EVAL_SEED; each is
also checked against every key the others produce (`trained_keys`), so a task drawn twice by two streams
is left out too.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

RL_SEED = 40_000
FRESH_EVAL_SEED = 50_000
USED_SEEDS = {"data/rl": 0, "pretrain new tasks": 10_000, "drills": 20_000, "epilogue drills": 30_000,
              "drill RL (experiments/drills/rl.py)": 20_000, "drill RL prompts": 30_000}
RL_DATA = REPO / "data" / "rl" / "prompts.jsonl.gz"
OUT = REPO / "data" / "rl_arm"


def split_rule(rl_data: Path) -> tuple[float, int]:
    rule = json.loads(Path(rl_data).with_name("summary.json").read_text())
    return rule["heldout_fraction"], rule.get("seed", 0)


def trained_specs(rl_rows, rl_data: Path = RL_DATA, seed: int = 0) -> dict[str, list]:
    """The specs of every text the mini recipe trains on (its pretraining, by part, exactly as phase_pretrain
    draws them at the default settings and `seed`) and those of the drill experiment (experiments/drills/rl.py
    at its defaults). The SFT set's tasks are rows of data/rl, which `rl_rows` holds."""
    from experiments.mini.settings import PretrainSettings
    from experiments.mini.texts import fresh_train_specs

    p, (fraction, split_seed) = PretrainSettings(), split_rule(rl_data)

    def fresh(n: int, stream: int, with_head: bool = False) -> list:
        return fresh_train_specs(n, rl_rows, fraction, split_seed, seed=stream, with_head=with_head)

    return {"pretrain new tasks": fresh(p.new_tasks, 10_000 + seed),
            "drills": fresh(p.drills, 20_000 + seed),
            "epilogue drills": fresh(p.epilogue_drills, 30_000 + seed, with_head=True),
            "drill RL drills": fresh(60_000, 20_000),
            "drill RL prompts": fresh(4 * 150 * 16 + 4 * 200, 30_000)}


def trained_keys(rl_rows, rl_data: Path = RL_DATA) -> set[str]:
    """Every task key that training or another evaluation uses: data/rl's (both splits: the SFT set, the
    pretraining first turns, the held-out evaluation) and trained_specs'."""
    keys = {spec.key for spec, _, _ in rl_rows}
    return keys | {spec.key for specs in trained_specs(rl_rows, rl_data).values() for spec in specs}


def fresh_tasks(n: int, seed: int, rl_rows, excluded: set[str], rl_data: Path = RL_DATA,
                level1_share: float = 0.25, progress: bool = True) -> list:
    """`n` valid generated tasks (generator.validate) drawn as generate_tasks draws them from `seed`, whose
    combination is train-side for data/rl's split rule and whose key is not in `excluded`."""
    from tqdm.auto import tqdm

    from drk_lab.data.generator import InvalidTask, GeneratedTask, sample_spec, validate
    from drk_lab.data.splits import combinations_by_split, is_train_combination

    known = combinations_by_split([row for _, _, row in rl_rows])
    fraction, split_seed = split_rule(rl_data)
    rng, seen, out = random.Random(seed), set(excluded), []
    bar = tqdm(total=n, desc=f"tasks (seed {seed})", disable=not progress)
    for _ in range(50 * n + 100):
        if len(out) == n:
            break
        spec = sample_spec(rng, 1 if rng.random() < level1_share else 2)
        if spec.key in seen or not is_train_combination(spec.combination, known, fraction, split_seed):
            continue
        seen.add(spec.key)
        try:
            out.append(GeneratedTask(spec, validate(spec)))
        except InvalidTask:
            continue
        bar.update(1)
    bar.close()
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} of {n} fresh tasks from seed {seed}")
    return out


def write_sets(out: Path, rl_prompts: int, fresh_eval: int, rl_data: Path = RL_DATA) -> dict:
    """prompts.jsonl.gz (RL_SEED), fresh_eval.jsonl.gz (FRESH_EVAL_SEED; none of the prompts' keys) and
    summary.json in `out`."""
    from drk_lab.data.export import read_rl_tasks, rl_row, write_rows

    rows = read_rl_tasks(rl_data)
    excluded = trained_keys(rows, rl_data)
    prompts = fresh_tasks(rl_prompts, RL_SEED, rows, excluded, rl_data)
    evaluation = fresh_tasks(fresh_eval, FRESH_EVAL_SEED, rows, excluded | {g.spec.key for g in prompts}, rl_data)
    write_rows([rl_row(g.spec, g.task, "train") for g in prompts], out / "prompts.jsonl.gz")
    write_rows([rl_row(g.spec, g.task, "train") for g in evaluation], out / "fresh_eval.jsonl.gz")
    summary = {"command": f"python experiments/rl_arm/prompts.py --out {out.relative_to(REPO) if out.is_relative_to(REPO) else out}"
                          f" --prompts {rl_prompts} --fresh-eval {fresh_eval}",
               "rl_seed": RL_SEED, "fresh_eval_seed": FRESH_EVAL_SEED, "seeds_used_elsewhere": USED_SEEDS,
               "prompts": len(prompts), "fresh_eval": len(evaluation), "excluded_keys": len(excluded),
               "by_level": {str(level): sum(g.spec.level == level for g in prompts) for level in (1, 2)}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--prompts", type=int, default=2400, help="RL prompts (16 a step for 150 steps, none repeated)")
    p.add_argument("--fresh-eval", type=int, default=512, help="fresh train-side evaluation tasks")
    p.add_argument("--rl-data", default=str(RL_DATA))
    args = p.parse_args(argv)
    print(json.dumps(write_sets(Path(args.out).resolve(), args.prompts, args.fresh_eval, Path(args.rl_data)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
