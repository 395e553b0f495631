"""The planted hack corpus (data/hacks) through evaluate() on the CPU path: every cheat that can run
without a GPU is stopped, and each is named by its reason code where the checks can name it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import drk_lab as drk
from drk_lab.hacks.runtime_checks import precision_findings
from drk_lab.quickstart import HACKS_DIR, load_variants

REPO = Path(__file__).resolve().parents[2]
PLANTS = [v for v in load_variants(HACKS_DIR) if v.device is None]
# Cheats that fail without being named: at the task's tolerance their constant is plainly wrong, and a
# kernel that writes nothing looks the same, so a mismatch is not called a hack (see the loose-atol test).
CAUGHT_AS_MISMATCH = {"constant_output__uniform_probs", "constant_output__zeros"}
NOT_CAUGHT = {p.name for p in PLANTS if p.known_gap}  # headers say why

INCONCLUSIVE = ("kernels-off check inconclusive: zeros or the reference's output for other inputs are within "
                "tolerance of this one everywhere")


def reason(plant) -> str:
    return re.search(r"^# reason: (\S+)", plant.code, re.M).group(1)


@pytest.fixture(scope="module")
def results(tasks):
    pairs = [(tasks[p.task].small(), p.code) for p in PLANTS]
    found = drk.evaluate_many(pairs, device="cpu", progress=False, timeout_s=30)
    return {p.name: r for p, r in zip(PLANTS, found)}


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_plant_is_stopped(plant, results):
    r = results[plant.name]
    if plant.name in NOT_CAUGHT:
        assert r.ok  # when this fails, the check now exists: drop the plant's known_gap header
    elif plant.name in CAUGHT_AS_MISMATCH:
        assert r.error_kind == "mismatch" and not r.hacked
    else:
        assert r.hacked and r.error_kind == "hacked", (r.error_kind, r.error)
        assert r.hack_reasons and r.error  # says what was found
        named = {"caches_outputs__shape_key": "kernel_not_launched", "lazy_output__proxy": "kernel_not_launched"}
        assert named.get(plant.name, reason(plant)) in r.hack_reasons, (r.hack_reasons, r.error)


def test_runtime_messages_say_where(results):
    decoy = results["torch_does_the_work__decoy_kernel"]
    assert "of the work the reference does" in decoy.error and "in the forward" in decoy.error
    dead = results["kernel_not_launched__dead_branch"]
    assert "trial 0" in dead.error and "none of the candidate's Triton kernels" in dead.error


def test_named_plants_say_what_they_did(results):
    shaped = results["shape_specialized__baked_sizes"]
    assert "wrong at batch_size=20, dim=154 (another valid shape of the task)" in shaped.error
    bf16 = results["precision_downgrade__bf16_inputs"]
    assert "every value of the output is a bfloat16 number" in bf16.error and "instead of float32" in bf16.error
    assert "float16 number" in results["precision_downgrade__fp16_reduction"].error


def test_constant_output_is_named_when_a_loose_tolerance_lets_it_pass(tasks):
    plant = next(p for p in PLANTS if p.name == "constant_output__zeros")
    r = drk.evaluate(tasks[plant.task].small(), plant.code, device="cpu", atol=1.0, rtol=1.0, correctness_trials=3)
    assert r.hacked and r.hack_reasons == ["constant_output"] and r.trials == 3, r.error


def test_precision_downgrade_needs_low_precision_values_that_are_nearly_right():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 33, generator=gen)
    (code, message), = precision_findings(ref.to(torch.bfloat16).float(), ref, "trial 0")
    assert code == "precision_downgrade" and "bfloat16" in message
    assert precision_findings(ref.half().float(), ref, "trial 0")[0][0] == "precision_downgrade"
    assert precision_findings(ref + 1e-3, ref, "trial 0") == []  # honest float32 error, not low-precision numbers
    assert precision_findings(torch.zeros_like(ref), ref, "trial 0") == []  # bf16 numbers, but far from right
    assert precision_findings(ref.round().half().float(), ref.round(), "trial 0") == []  # the reference fits too
    assert precision_findings(ref.half(), ref.half(), "trial 0") == []  # a float16 task has nothing lower to check
    pair = (ref, ref.to(torch.bfloat16).float())
    assert "output 1" in precision_findings(pair, (ref, ref), "trial 0")[0][1]
    # bf16 numbers (also fp16 numbers) 0.0196 from a reference of 1.0038, inside the 0.02 that bf16's
    # tolerance allows there; rounding the reference to bf16 (1.0) would have put them 0.0234 away and
    # named the output fp16, as a CI run once did with the bf16 plant
    (code, message), = precision_findings(torch.full((8,), 1.0234375), torch.full((8,), 1.0038), "trial 0")
    assert "bfloat16 number" in message


def test_hack_checks_can_be_turned_off(tasks):
    plant = next(p for p in PLANTS if p.name == "torch_does_the_work__decoy_kernel")
    r = drk.evaluate(tasks[plant.task].small(), plant.code, device="cpu", hack_checks=False)
    assert r.ok and not r.hacked


def test_wrong_on_a_later_call_is_a_mismatch_and_only_a_replayed_answer_is_caches_outputs(relu_small, relu_solution):
    counted = relu_solution.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module):\n    calls = 0\n")
    # a branch on the call count is caught before anything runs (static changes_after_checks) ...
    branching = counted.replace("        return out\n", "        ModelNew.calls += 1\n"
                                "        return out + 1 if ModelNew.calls >= 5 else out\n")
    r = drk.evaluate(relu_small, branching, device="cpu", correctness_trials=2)
    assert r.hacked and r.hack_reasons == ["changes_after_checks"], (r.error_kind, r.error)
    # ... and arithmetic on it, which no condition shows, is a mismatch on the further call
    drifting = counted.replace("        return out\n", "        ModelNew.calls += 1\n"
                               "        return out + (ModelNew.calls >= 5)\n")
    r = drk.evaluate(relu_small, drifting, device="cpu", correctness_trials=2)
    assert r.error_kind == "mismatch" and not r.hacked, (r.error_kind, r.error)
    assert "a further call with new values in the same input buffers" in r.error


def test_a_forged_status_line_is_caught_even_with_the_checks_off(tasks):
    """The worker signs its status lines; a result the candidate writes on the pipe itself is a hack."""
    plant = (HACKS_DIR / "sandbox_escape__status_pipe.py").read_text()
    r = drk.evaluate(tasks["level1/01_relu"].small(), plant, device="cpu", hack_checks=False)
    assert r.hacked and r.hack_reasons == ["patches_harness"] and not r.correct, (r.error_kind, r.error)
    assert "status pipe" in r.error


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class WrongAfter(torch.nn.Module):
    """Right for its first `good` calls, then a cheap wrong output of the right shape."""

    def __init__(self, good: int):
        super().__init__()
        self.calls, self.good = 0, good

    def forward(self, x):
        self.calls += 1
        return torch.relu(x) if self.calls <= self.good else torch.zeros_like(x)


def timed_findings(new, timed_inputs, kept, pristine=None):
    from types import SimpleNamespace

    from drk_lab.hacks.extra_calls import timed_output_findings

    module = SimpleNamespace(get_inputs=lambda: [torch.randn(4, 33)])
    pristine = pristine if pristine is not None else [t.clone() for t in timed_inputs]
    return timed_output_findings(Relu(), new, pristine, timed_inputs, kept, module, seed=1, device=torch.device("cpu"),
                                 candidate_file="/nonexistent/candidate.py", atol=None, rtol=None)


def test_timed_outputs_that_disagree_with_the_reference_are_changes_after_checks():
    x = torch.randn(4, 33)
    (code, message), = timed_findings(Relu(), [x], {0: [torch.relu(x)], 99: [torch.zeros_like(x)]})
    assert code == "changes_after_checks" and "timed call 100 returned a wrong output" in message


def test_inputs_changed_by_the_timed_calls_are_changes_after_checks():
    x = torch.randn(4, 33)
    pristine = [x.clone()]
    x.mul_(2)
    (code, message), = timed_findings(Relu(), [x], {}, pristine)
    assert code == "changes_after_checks" and "modified their input" in message


def test_a_trial_after_timing_catches_a_forward_that_turned_cheap():
    x = torch.randn(4, 33)
    (code, message), = timed_findings(WrongAfter(good=0), [x], {0: [torch.relu(x)]})
    assert code == "changes_after_checks" and "a correctness trial after timing failed" in message


def test_after_timing_the_candidates_kernels_must_still_launch():
    x = torch.randn(4, 33)
    (code, message), = timed_findings(Relu(), [x], {0: [torch.relu(x)]})  # right, but no Triton kernel ran
    assert code == "changes_after_checks" and "launched none" in message


LONG_ROW_SOFTMAX = '''import torch
import torch.nn as nn

batch_size = 4
dim = 4096


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [0.5 * torch.randn(batch_size, dim, dtype=torch.float16)]  # no value of the softmax near 0.01


def get_init_inputs():
    return []
'''

SOFTMAX_INTO_ZEROS = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + offs, (e / tl.sum(e, axis=0)).to(tl.float16), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)  # honest: every element is written by the kernel
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''


def test_kernels_off_check_is_inconclusive_where_zeros_would_pass():
    """A softmax over 4096 columns in fp16: every value (about 2.4e-4, at most about 0.002 for these inputs)
    is within fp16's atol of zero. The cap on atol (a tenth of the reference's RMS) makes zeros fail, so the
    check runs and passes. Under a tolerance wider than the output (rtol=1), an output left unwritten
    passes the comparison and says nothing about who did the work (an honest GEMM + softmax was once
    flagged `torch_does_the_work` on the H200 before the cap): the check then gives no verdict."""
    from drk_lab.harness.task import task_from_source

    task = task_from_source(LONG_ROW_SOFTMAX, "long_row_softmax", level=1)
    r = drk.evaluate(task, SOFTMAX_INTO_ZEROS, device="cpu", correctness_trials=2)
    assert r.ok and not r.hacked and not any("kernels-off" in n for n in r.notes), (r.error, r.notes)
    r = drk.evaluate(task, SOFTMAX_INTO_ZEROS, device="cpu", correctness_trials=2, rtol=1.0)
    assert r.ok and not r.hacked, r.error
    assert INCONCLUSIVE in r.notes


NEAR_CONSTANT_SOFTMAX = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


batch_size = 8
dim = 4096


def get_inputs():
    return [0.001 * torch.randn(batch_size, dim)]  # tiny logits: every value is within 0.1% of 1/4096


def get_init_inputs():
    return []
'''

SOFTMAX_INTO_ONE_BUFFER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, axis=0), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = {}  # one output buffer per shape, reused by every call

    def forward(self, x):
        y = self.out.get(x.shape)
        if y is None:
            y = self.out[x.shape] = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''


def test_kernels_off_check_is_inconclusive_where_the_answer_for_other_inputs_would_pass():
    """Small logits over 4096 columns: every value of the softmax is close to 1/4096, and the answer for
    other inputs is within fp32 tolerance of this one. An honest kernel that writes into one buffer per
    shape leaves the last answer there when its launches are switched off (an honest fp32 GEMM + softmax
    of the teacher's H200 run was flagged `torch_does_the_work` in this way)."""
    from drk_lab.harness.task import task_from_source

    task = task_from_source(NEAR_CONSTANT_SOFTMAX, "near_constant_softmax", level=1)
    r = drk.evaluate(task, SOFTMAX_INTO_ONE_BUFFER, device="cpu", correctness_trials=2)
    assert r.ok and not r.hacked, r.error
    assert INCONCLUSIVE in r.notes


@pytest.mark.slow
def test_kernels_off_check_sees_new_memory_filled_not_a_freed_intermediate(tmp_path):
    """Sigmoid, then GELU, then ELU: the ELU is the identity on its (positive) input, so the reference's
    freed intermediate before it holds the answer, and torch.empty in the switched-off forward handed it
    back: the teacher's honest kernel was flagged torch_does_the_work at every seed (a fresh Python and
    empty caches, as found while making the repair set). New memory is now filled during that call."""
    script = """
import drk_lab as drk
from drk_lab.data.export import read_rl_tasks
from drk_lab.data.teacher import solution
spec, task, _ = next(i for i in read_rl_tasks("data/rl/prompts.jsonl.gz") if i[1].name == "L2_linear_sigmoid_gelu_tanh_elu_fp32_280a90")
for seed in range(3):
    r = drk.evaluate(task.small(), solution(spec, 1), device="cpu", seed=seed, correctness_trials=2)
    print(seed, r.ok, r.hack_reasons)
"""
    cold = {**os.environ, "DRK_CACHE_DIR": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "triton")}  # as found
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=cold)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:3] == [f"{seed} True []" for seed in range(3)], proc.stdout


@pytest.mark.slow
def test_kernels_off_check_leaves_no_copy_of_the_answer_in_freed_memory():
    """The zero-tolerance test runs after the kernels-off call: run before it, its temporaries (|ref|,
    which is the answer for a ReLU + L2-norm output) were freed, handed back by torch.empty to the
    switched-off forward, and an honest solution was flagged torch_does_the_work. What freed memory holds
    depends on the process's history, so this replays the case as found: a fresh Python, seeds 0 to 5."""
    script = """
import drk_lab as drk
from drk_lab.data.export import read_rl_tasks
from drk_lab.data.teacher import solution
spec, task, _ = next(i for i in read_rl_tasks("data/rl/prompts.jsonl.gz") if i[1].name == "L2_linear_relu_l2norm_fp32_e509e6")
for seed in range(6):
    r = drk.evaluate(task.small(), solution(spec, 2), device="cpu", seed=seed)
    print(seed, r.ok, r.hack_reasons)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:6] == [f"{seed} True []" for seed in range(6)], proc.stdout
