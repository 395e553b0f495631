"""Repair trajectories: a planted bug changes only pointwise operators (the constructor stays the task's),
the real harness (interpreter mode) fails the buggy first turn and passes the fix, and the SFT row keeps
the buggy reply as context with no loss on it."""

import random

import pytest

from drk_lab.agent.trajectory import Trajectory, Turn
from drk_lab.data.bugs import plant_bug
from drk_lab.data.generator import sample_spec, validate
from drk_lab.data.operators import POINTWISE, base_name
from drk_lab.data.spec import TaskSpec, init_lines
from drk_lab.data.teacher import repair_answer
from drk_lab.data.trajectories import is_repair, kept_turns, read_trajectories, run_teacher, sft_rows
from drk_lab.harness.result import EvalResult

ROWS = (("batch_size", 4096), ("seq_len", 4), ("dim", 4096))
ROWS_SMALL = (("batch_size", 3), ("seq_len", 5), ("dim", 37))
LINEAR = (("batch_size", 4096), ("in_features", 4096), ("out_features", 1024))
LINEAR_SMALL = (("batch_size", 13), ("in_features", 24), ("out_features", 40))


def test_a_planted_bug_changes_one_pointwise_step_and_keeps_the_constructor():
    rng = random.Random(0)
    changed = 0
    for level in (1, 2, 2, 2) * 25:
        spec = sample_spec(rng, level)
        bug = plant_bug(spec, random.Random(spec.name))
        if bug is None:
            assert not any(base_name(s) in POINTWISE for s in spec.steps)
            continue
        changed += 1
        assert bug.spec.steps != spec.steps and abs(len(bug.spec.steps) - len(spec.steps)) <= 1
        assert init_lines(bug.spec) == init_lines(spec) and bug.spec.head == spec.head
        assert bug.what.startswith(("it applied ", "it left out "))
    assert changed > 70  # most chains hold a pointwise operator
    only_row_op = TaskSpec(1, None, ("layernorm",), "float16", ROWS, ROWS_SMALL)
    assert plant_bug(only_row_op, random.Random(0)) is None


@pytest.fixture(scope="module")
def repair_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("repairs")
    specs = [TaskSpec(1, None, ("gelu_tanh",), "bfloat16", ROWS, ROWS_SMALL),
             TaskSpec(2, "linear", ("bias", "silu", "scale:0.5"), "float32", LINEAR, LINEAR_SMALL),
             TaskSpec(1, None, ("layernorm",), "float16", ROWS, ROWS_SMALL)]  # nothing to plant: left out
    items = [(spec, validate(spec).small()) for spec in specs]
    stats = run_teacher(items, out, turns=2, jobs=2, progress=False, device="cpu", correctness_trials=1,
                        repairs=True, seed=0)
    return specs, stats, read_trajectories(out)


def test_the_harness_fails_the_planted_bug_and_passes_the_fix(repair_run):
    specs, stats, trajectories = repair_run
    assert stats["run"] == 2 and len(trajectories) == 2
    for traj in trajectories:
        first, second = traj.turns
        assert not first.result.ok and first.result.error_kind == "mismatch"
        assert "FAILED (mismatch)" in first.feedback
        assert second.result.ok and is_repair(second.response) and not is_repair(first.response)


def test_the_sft_row_keeps_the_bug_as_context_without_loss(repair_run):
    from drk_lab.rl.tiny_model import train_tokenizer

    specs, _, trajectories = repair_run
    rows = sft_rows(trajectories, {validate(s).name: s for s in specs})
    assert len(rows) == 2
    tokenizer = train_tokenizer(512)
    for row in rows:
        first, fix = [m for m in row["messages"] if m["role"] == "assistant"]
        assert first.get("train") is False and "train" not in fix and is_repair(fix["content"])
        assert row["turns_correct"] == 1 and row["num_rounds"] == 2
        encoded = tokenizer.apply_chat_template(row["messages"], return_dict=True, return_assistant_tokens_mask=True)
        trained = tokenizer.decode([t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m])
        assert trained == fix["content"] + "<|im_end|>"


def test_a_repair_after_a_correct_turn_keeps_nothing():
    def turn(i, reply, **result):
        return Turn("t", i, 0, [], 0, 0, reply, "stop", "ok", "code", EvalResult(**result), 0.0, f"feedback {i}")

    fix = repair_answer(TaskSpec(1, None, ("relu",), "float32", ROWS, ROWS_SMALL), "it applied ReLU where ...")
    uncaught = Trajectory("t", "prompt", [turn(0, "plain", correct=True), turn(1, fix, correct=True)])
    assert kept_turns(uncaught) == ([], 0)
    unfixed = Trajectory("t", "prompt", [turn(0, "plain", error_kind="mismatch"), turn(1, fix, error_kind="mismatch")])
    assert kept_turns(unfixed) == ([], 0)
    fixed = Trajectory("t", "prompt", [turn(0, "plain", error_kind="mismatch"), turn(1, fix, correct=True)])
    assert [t.index for t in kept_turns(fixed)[0]] == [0, 1]


def test_pretraining_leaves_out_rows_with_a_planted_bug():
    datasets = pytest.importorskip("datasets")
    from experiments.mini.texts import without_planted_bugs

    plain = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "a"}]
    repair = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "bug", "train": False},
              {"role": "user", "content": "FAILED"}, {"role": "assistant", "content": "fix"}]
    data = datasets.Dataset.from_list([{"messages": plain}, {"messages": repair}])
    assert [m[0]["content"] for m in without_planted_bugs(data)["messages"]] == ["p"]
