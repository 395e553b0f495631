"""The teacher's solutions pass the real harness in interpreter mode (correct, not flagged) for each kind of
task, and a teacher trajectory's user messages are exactly KernelEnv's feedback; its SFT rows keep only
correct, unflagged turns."""

import pytest

import drk_lab as drk
from drk_lab.agent.env import KernelEnv
from drk_lab.agent.feedback import evaluation_sections, format_feedback
from drk_lab.agent.trajectory import read_jsonl
from drk_lab.data.export import rl_row
from drk_lab.data.generator import validate
from drk_lab.data.kernels_rows import chain_wanted, chain_written
from drk_lab.data.spec import TaskSpec
from drk_lab.data.teacher import answer, solution
from drk_lab.data.trajectories import (done_tasks, kept_turns, read_trajectories, run_teacher, sft_rows,
                                       trajectory_files)
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import task_from_row

LINEAR = (("batch_size", 4096), ("in_features", 4096), ("out_features", 1024))
LINEAR_SMALL = (("batch_size", 13), ("in_features", 24), ("out_features", 40))
ROWS = (("batch_size", 4096), ("seq_len", 4), ("dim", 4096))
ROWS_SMALL = (("batch_size", 3), ("seq_len", 5), ("dim", 37))
CONV = (("batch_size", 16), ("in_channels", 64), ("out_channels", 64), ("height", 64), ("width", 64))
CONV_SMALL = (("batch_size", 2), ("in_channels", 3), ("out_channels", 16), ("height", 5), ("width", 6))
SPECS = {
    "elementwise": TaskSpec(1, None, ("gelu_tanh",), "bfloat16", ROWS, ROWS_SMALL),
    "normalisation": TaskSpec(1, None, ("layernorm",), "float16", ROWS, ROWS_SMALL),
    "matmul_chain": TaskSpec(2, "linear", ("bias", "silu", "residual", "scale:0.5", "log_softmax"), "float32",
                             LINEAR, LINEAR_SMALL),
    "conv_chain": TaskSpec(2, "conv", ("bias", "leaky_relu:0.1", "clamp:1.0"), "float16", CONV, CONV_SMALL, 3),
}


@pytest.fixture(scope="module")
def small_tasks():
    return {kind: validate(spec).small() for kind, spec in SPECS.items()}


@pytest.mark.slow
def test_teacher_solutions_pass_the_harness_in_interpreter_mode(small_tasks):
    pairs = [(small_tasks[kind], solution(spec, turn)) for kind, spec in SPECS.items() for turn in (1, 2, 3)]
    results = drk.evaluate_many(pairs, max_in_flight=2, device="cpu", correctness_trials=2, progress=False)
    for (task, _), (kind, turn), res in zip(pairs, [(k, t) for k in SPECS for t in (1, 2, 3)], results):
        assert res.ok and not res.hacked, f"{kind} turn {turn}: {res.error_kind} {res.hack_reasons} {res.error}"


def test_turns_improve_in_the_documented_ways():
    spec = SPECS["matmul_chain"]
    first, second, third = (solution(spec, t) for t in (1, 2, 3))
    assert first.count("@triton.jit") == 3 and "GROUP_M" not in first  # GEMM, chain kernel, chunked rows
    assert second.count("@triton.jit") == 2 and "GROUP_M" in second  # the chain fused into the epilogue
    assert "triton.autotune(" in third and "triton.autotune(" not in second
    assert "Welford" in solution(SPECS["normalisation"], 1)
    assert "tl.max_contiguous" in solution(SPECS["elementwise"], 3)
    assert answer(spec, 2).endswith(f"```python\n{second}```")


def test_chain_written_reads_the_teachers_operators_back():
    """Every turn of the teacher writes the task's pointwise chain, which chain_written finds in order; a
    reply with one operator swapped for another no longer matches."""
    for kind, spec in SPECS.items():
        for turn in (1, 2, 3):
            assert chain_written(solution(spec, turn)) == chain_wanted(spec), (kind, turn)
    assert chain_wanted(SPECS["normalisation"]) == [] and len(chain_wanted(SPECS["matmul_chain"])) == 4
    right = solution(SPECS["conv_chain"], 1)
    swapped = right.replace("tl.where(v > 0, v, v * 0.1)", "tl.maximum(v, 0.0)")
    assert swapped != right and chain_written(swapped) != chain_wanted(SPECS["conv_chain"])


@pytest.mark.slow
def test_a_two_turn_trajectory_carries_kernel_envs_feedback(tmp_path, small_tasks):
    items = [(SPECS[k], small_tasks[k]) for k in ("elementwise", "conv_chain")]
    stats = run_teacher(items, tmp_path, turns=2, jobs=2, progress=False, device="cpu", correctness_trials=2)
    assert stats["run"] == 2
    trajectories = read_jsonl(tmp_path / "trajectories.jsonl")
    assert len(trajectories) == 2 and all(len(t.turns) == 2 for t in trajectories)
    rows = sft_rows(trajectories, {task.name: spec for spec, task in items})
    for traj, row in zip(trajectories, rows):
        spec = next(s for s, t in items if t.name == traj.task)
        task = next(t for s, t in items if t.name == traj.task)
        env = KernelEnv(task, max_turns=2, device="cpu", correctness_trials=2)
        assert env.reset() == traj.prompt == row["messages"][0]["content"]
        feedback, _, done, info = env.step(answer(spec, 1))
        assert not done and info["result"].ok and feedback == format_feedback(info["result"], request=True)
        # the row's user message is the feedback KernelEnv gave in the run, and that is its text for the result
        assert traj.turns[0].feedback == row["messages"][2]["content"]
        assert traj.turns[0].feedback == format_feedback(traj.turns[0].result, request=True)
        # a fresh evaluation of the same reply says the same; what a worker printed may differ (torch 2.13 warns
        # once per fresh worker inside the harness), so that part is left out of this comparison
        assert evaluation_sections(info["result"])[0] == evaluation_sections(traj.turns[0].result)[0]
        assert [m["role"] for m in row["messages"]] == ["user", "assistant", "user", "assistant"]
        assert row["messages"][3]["content"] == answer(spec, 2)
        assert row["best_round"] == 2 and row["ops"] == spec.ops and row["level"] == spec.level
        assert "triton" in row["harness_version"]
    again = run_teacher(items, tmp_path, turns=2, jobs=2, progress=False, device="cpu")  # resumes: nothing to do
    assert again["skipped_done"] == 2 and again["run"] == 0


@pytest.mark.slow
def test_a_run_spread_over_several_devices_writes_one_file_each(tmp_path, small_tasks):
    items = [(SPECS[k], small_tasks[k]) for k in ("elementwise", "normalisation", "matmul_chain")]
    stats = run_teacher(items, tmp_path, turns=1, jobs=1, progress=False, devices=["cpu", "cpu"], correctness_trials=1)
    assert stats["run"] == 3
    files = trajectory_files(tmp_path)
    assert [f.name for f in files] == ["trajectories-0.jsonl", "trajectories-1.jsonl"]
    assert [len(read_jsonl(f)) for f in files] == [2, 1]
    assert sorted(t.task for t in read_trajectories(tmp_path)) == sorted(t.name for _, t in items)
    assert done_tasks(tmp_path) == {t.name for _, t in items}


def test_sft_rows_keep_only_correct_unflagged_turns_and_end_at_the_fastest():
    from drk_lab.agent.trajectory import Trajectory, Turn

    def turn(i, **result):
        res = EvalResult(**result)
        return Turn("t", i, 0, [], 0, 0, f"reply {i}", "stop", "ok", "code", res, 0.0, f"feedback {i}")

    good = dict(correct=True, speedup=1.2, timings_valid=True)
    traj = Trajectory("t", "prompt", [turn(0, **good), turn(1, correct=True, speedup=0.9, timings_valid=True),
                                      turn(2, correct=True, speedup=1.5, timings_valid=True),
                                      turn(3, correct=True, speedup=1.1, timings_valid=True)])
    kept, best = kept_turns(traj)
    assert [t.index for t in kept] == [0, 1, 2] and best == 3  # the slower turn 1 stays: turn 2 recovers
    flagged = Trajectory("t", "prompt", [turn(0, **good), turn(1, correct=True, hacked=True, hack_reasons=["x"]),
                                         turn(2, **good)])
    assert [t.index for t in kept_turns(flagged)[0]] == [0]
    assert kept_turns(Trajectory("t", "prompt", [turn(0, error_kind="mismatch")])) == ([], 0)


def test_rl_rows_load_as_tasks_with_kernel_envs_prompt(small_tasks):
    spec = SPECS["matmul_chain"]
    task = validate(spec)
    row = rl_row(spec, task, "train")
    loaded = task_from_row(row)
    assert loaded.source == task.source and loaded.level == 2 and loaded.name == spec.name
    assert KernelEnv(loaded).reset() == row["prompt"]
    assert loaded.small().source == small_tasks["matmul_chain"].source
