"""The arm's committed prompts (data/rl_arm) are fresh: no RL prompt's reference is in any text the mini recipe
trains on (pretraining's first turns, new tasks and drills, the SFT and repair sets) nor in an evaluation set
(data/rl's held-out split, the fresh evaluation tasks, the built-in suite); their combinations are train-side;
the file is what prompts.py makes from its seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from drk_lab.data.export import read_rl_tasks, read_rows  # noqa: E402
from drk_lab.data.spec import TaskSpec  # noqa: E402
from experiments.rl_arm import prompts as arm_prompts  # noqa: E402

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
ARM = REPO / "data" / "rl_arm"


@pytest.fixture(scope="module")
def rl_rows():
    return read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz")


@pytest.fixture(scope="module")
def trained(rl_rows):
    return arm_prompts.trained_specs(rl_rows)


@pytest.fixture(scope="module")
def arm_rows():
    return {name: read_rows(ARM / f"{name}.jsonl.gz") for name in ("prompts", "fresh_eval")}


def spec_of(row) -> TaskSpec:
    return TaskSpec.from_dict(json.loads(row["spec"]))


def test_sizes_seeds_and_train_side_combinations(arm_rows, rl_rows):
    summary = json.loads((ARM / "summary.json").read_text())
    assert len(arm_rows["prompts"]) == summary["prompts"] == 2400 and len(arm_rows["fresh_eval"]) == 512
    assert summary["rl_seed"] not in arm_prompts.USED_SEEDS.values()
    assert summary["fresh_eval_seed"] not in arm_prompts.USED_SEEDS.values()
    heldout = {row["combination"] for _, _, row in rl_rows if row["split"] == "heldout"}
    for rows in arm_rows.values():
        assert all(row["split"] == "train" and row["combination"] not in heldout for row in rows)
        assert len({row["key"] for row in rows}) == len(rows)


def test_no_prompt_is_a_task_of_training_or_evaluation(arm_rows, rl_rows, trained):
    prompt_keys = {row["key"] for row in arm_rows["prompts"]}
    fresh_keys = {row["key"] for row in arm_rows["fresh_eval"]}
    assert not prompt_keys & fresh_keys
    assert not (prompt_keys | fresh_keys) & {spec.key for spec, _, _ in rl_rows}  # SFT, first turns, held-out
    for part, specs in trained.items():
        assert len(specs) > 1000, part
        assert not (prompt_keys | fresh_keys) & {spec.key for spec in specs}, part
    # the row's key is its spec's (the check above is about the tasks the rows hold)
    assert all(spec_of(row).key == row["key"] for row in arm_rows["prompts"][:200])


def test_no_prompt_reference_appears_in_a_training_text(arm_rows, rl_rows, trained):
    """The texts themselves: every reference (the task's source, which its prompt holds) against the SFT and
    repair conversations, the pretraining first turns' sources, and the sources of the drill tasks and the
    built-in suite."""
    import drk_lab as drk
    from drk_lab.data.spec import render_source

    references = {row["code"] for rows in arm_rows.values() for row in rows}
    assert len(references) == len(arm_rows["prompts"]) + len(arm_rows["fresh_eval"])
    assert all(render_source(spec_of(row)) == row["code"] for row in arm_rows["prompts"][:50])
    sft = [m["content"] for name in ("sft", "repairs")
           for messages in __import__("pyarrow.parquet", fromlist=["x"]).read_table(
               REPO / "data" / "sft" / f"{name}.parquet")["messages"].to_pylist() for m in messages]
    sft_text = "\n".join(sft)
    assert sft_text.count("class Model") > 1000
    # each reference opens with its own constants line; search those in the SFT texts in one pass
    assert not any(ref in sft_text for ref in references)
    trained_sources = {render_source(spec) for specs in trained.values() for spec in specs}
    trained_sources |= {task.source for _, task, _ in rl_rows} | {t.source for t in drk.builtin_tasks()}
    assert not references & trained_sources
