"""run_teacher's continuous pool, with real evaluations in interpreter mode: a slow trajectory holds one slot
while the other slot runs the next tasks (they end, and are written, first); the time limit starts nothing
that would end after it. The teacher's autotuned turn stays small: two configurations, a short benchmark, and
a single configuration (nothing timed) at the harness's other shape."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_data_teacher import ROWS, ROWS_SMALL, SPECS  # noqa: E402

from drk_lab.agent.feedback import format_feedback  # noqa: E402
from drk_lab.agent.trajectory import read_jsonl  # noqa: E402
from drk_lab.data.generator import validate  # noqa: E402
from drk_lab.data.spec import TaskSpec  # noqa: E402
from drk_lab.data.teacher import solution  # noqa: E402
from drk_lab.data.trajectories import done_tasks, run_teacher  # noqa: E402
from drk_lab.harness.shapes import other_shape  # noqa: E402
from drk_lab.harness.task import Task  # noqa: E402

SLEEP_S = 0.5  # the harness calls the reference 7 times in an evaluation with one correctness trial


def slow_copy(task: Task) -> Task:
    """The same task (same reference output, so the teacher's kernels stay correct) whose reference sleeps in
    every forward: each of its evaluations takes seconds in the real harness."""
    source = task.source.replace("import torch\n", "import time\n\nimport torch\n", 1)
    source = source.replace("        y = x\n", f"        time.sleep({SLEEP_S})\n        y = x\n", 1)
    assert "time.sleep" in source
    return Task("slow_" + task.name, source, small_sizes=dict(task.small_sizes))


@pytest.mark.slow
def test_a_slow_trajectory_does_not_hold_back_the_other_slot(tmp_path):
    fast_specs = [SPECS["elementwise"], TaskSpec(1, None, ("relu",), "float32", ROWS, ROWS_SMALL)]
    fast = [(spec, validate(spec).small()) for spec in fast_specs]
    slow = (SPECS["elementwise"], slow_copy(fast[0][1]))
    items = [slow] + fast
    stats = run_teacher(items, tmp_path, turns=2, jobs=2, progress=False, device="cpu", correctness_trials=1)
    assert stats["run"] == 3 and stats["peak_in_flight"] == 2 and not stats["stopped_at_time_limit"]
    # both slots stay busy until the fast tasks run out: only the slow trajectory's last stretch is alone
    assert 0.5 < stats["slots_busy_share"] <= 1.0
    written = read_jsonl(tmp_path / "trajectories.jsonl")
    # in lockstep batches the three would end together, in task order; in the pool the fast ones end first
    assert [t.task for t in written] == [fast[0][1].name, fast[1][1].name, slow[1].name]
    assert all(len(t.turns) == 2 and all(turn.result.ok for turn in t.turns) for t in written)
    # each user message is KernelEnv's feedback on the turn before (the episode driver made it)
    assert all(t.turns[0].feedback == format_feedback(t.turns[0].result, request=True) for t in written)


@pytest.mark.slow
def test_the_time_limit_starts_no_trajectory_that_would_end_after_it(tmp_path):
    fast_spec = SPECS["elementwise"]
    slow = (fast_spec, slow_copy(validate(fast_spec).small()))
    fast = (fast_spec, validate(fast_spec).small())
    kwargs = dict(turns=1, jobs=1, progress=False, device="cpu", correctness_trials=1)
    stats = run_teacher([slow, fast], tmp_path, time_limit=1e-6, **kwargs)
    assert stats["run"] == 0 and stats["stopped_at_time_limit"] and done_tasks(tmp_path) == set()
    # the slow trajectory takes D >= 7 x 0.5 s; at its end the estimate (D) says a second one would end after
    # 6.5 s (D + D > 6.5), so it is not started, although the clock (D, about 4 s) is still inside the limit
    stats = run_teacher([slow, fast], tmp_path, time_limit=6.5, **kwargs)
    assert stats["run"] == 1 and stats["stopped_at_time_limit"] and done_tasks(tmp_path) == {slow[1].name}
    again = run_teacher([slow, fast], tmp_path, **kwargs)
    assert again["skipped_done"] == 1 and again["run"] == 1  # a rerun resumes with what is left
    assert done_tasks(tmp_path) == {slow[1].name, fast[1].name}


def load_module(source: str, tmp_path, name: str):
    """A generated module as the GPU sees it: all its configurations (the CPU branch keeps only the first)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source.replace("if not torch.cuda.is_available()", "if False"))
    found = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_autotuned_turn_has_few_configurations_a_short_benchmark_and_turn_2s_kernels(tmp_path):
    for kind, spec in SPECS.items():
        second, third = solution(spec, 2), solution(spec, 3)
        tuned = re.findall(r"^(\w+_kernel) = triton.autotune\($", third, re.M)
        assert tuned, kind
        lists = re.findall(r"^[A-Z]+_CONFIGS = \[\n(.*?)\n\]", third, re.S | re.M)
        assert len(lists) == len(tuned) and all(2 <= block.count("triton.Config(") <= 4 for block in lists), kind
        assert third.count("do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=5, rep=20") == len(tuned)
        assert third.count('prune_configs_by={"early_config_prune": ') == len(tuned)
        # Triton's compile cache key (the kernel's source and the line it starts on) is turn 2's where the kernel
        # is, so turn 2's compiled configuration is found in the cache; the chain kernel gains contiguity hints
        turn2, turn3 = load_module(second, tmp_path, f"{kind}_2"), load_module(third, tmp_path, f"{kind}_3")
        for name in tuned:
            same = getattr(turn2, name).cache_key == getattr(turn3, name).fn.cache_key
            assert same == (name != "chain_kernel"), (kind, name)


def test_the_harness_other_shape_compiles_one_configuration_and_the_full_shape_tunes_two(tmp_path):
    """The prune functions with the named arguments the kernels get at the task's full size and at the harness's
    other shape (other_shape: SMALL_SIZES scaled): there a single configuration is left, so nothing is timed."""
    for kind, spec in SPECS.items():
        task = validate(spec)
        module = load_module(solution(spec, 3), tmp_path, kind)
        shapes = {"full": task.constants, "other": other_shape(task).sizes}
        for label, sizes in shapes.items():
            b, d = sizes["batch_size"], sizes.get("dim")
            x = torch.empty(b, sizes.get("in_channels", 1), 1, 1, device="meta")
            named = {
                "chain_configs_for": {"n": b * sizes.get("seq_len", 1) * (d or 1)},
                "row_configs_for": {"N": d or sizes.get("out_features")},
                "gemm_configs_for": {"M": b, "N": sizes.get("out_features")},
                "conv_configs_for": {"C_out": sizes.get("out_channels"), "H": sizes.get("height"),
                                     "W": sizes.get("width"), "x_ptr": x},
            }
            for name, args in named.items():
                prune = getattr(module, name, None)
                if prune is None:
                    continue
                configs = getattr(module, name.split("_")[0].upper() + "_CONFIGS")
                kept = prune(configs, args)
                assert len(kept) == (2 if label == "full" else 1), (kind, name, label)
                assert all(isinstance(c, triton.Config) for c in kept)


@pytest.mark.gpu
def test_on_a_gpu_the_baseline_is_measured_before_the_first_turn_by_workers_that_do_not_profile(tmp_path):
    from drk_lab.harness import caller

    spec = SPECS["normalisation"]
    items = [(spec, validate(spec))]
    stats = run_teacher(items, tmp_path, turns=3, jobs=1, progress=False, device="cuda", compile_baseline=False)
    assert stats["run"] == 1
    (trajectory,) = read_jsonl(tmp_path / "trajectories.jsonl")
    assert any(d.startswith("cuda") and not profiles for d, _, profiles in caller._sandboxes)  # ensure_baselines'

    for turn in trajectory.turns:  # the autotuned third turn included: correct, unflagged, timed
        assert turn.result.ok and not turn.result.hacked and turn.result.timings_valid, turn.result.error
        assert turn.result.ref_runtime_ms == trajectory.turns[0].result.ref_runtime_ms  # measured once
