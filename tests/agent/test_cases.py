"""The LayerNorm case study: its three turns are correct on the CPU path, measure_case builds the
Trajectory, the shipped measurements load, and the sources tell the story (autotune, then Welford
with pipeline stages)."""

import ast
import os
import subprocess
import sys

import pytest

from drk_lab.agent.cases import (
    CASES_DIR,
    case_files,
    case_table,
    case_task,
    case_turns,
    load_case,
    measure_case,
)
from drk_lab.agent.prompts import REQUEST_FASTER
from drk_lab.harness.task import DATA_DIR


@pytest.fixture(scope="module")
def measured():
    return measure_case("layernorm", device="cpu")  # one evaluation per turn, at the task's small sizes


@pytest.mark.slow
def test_the_case_lives_under_data(measured):
    assert CASES_DIR == DATA_DIR / "cases"
    task = case_task("layernorm")
    assert task.name == "layernorm" and task.constants["dim"] == 4096 and "bfloat16" in task.source
    assert task.small().constants["dim"] == task.small_sizes["dim"] < 128


def test_every_turn_is_correct_and_honest_on_the_cpu(measured):
    assert [t.index for t in measured.turns] == [0, 1, 2]
    for turn in measured.turns:
        res = turn.result
        assert res.ok and not res.hacked and res.trials == 5, (turn.index, res.error_kind, res.error)
        assert turn.reward == 0.5  # correct; no timings on the CPU, so no speed or coverage term


def test_measure_case_builds_a_three_turn_trajectory(measured):
    sources = case_turns("layernorm")
    assert measured.task == "layernorm" and measured.reward_fn == "drkernel" and measured.prompt
    for i, (turn, code) in enumerate(zip(measured.turns, sources)):
        assert turn.code == code and code.strip() in turn.response and turn.response.startswith("```python")
        assert turn.context == list(range(i)) and turn.extraction == "ok" and turn.finish_reason == "stop"
        assert turn.feedback.startswith("CORRECT")
        assert turn.feedback.endswith(REQUEST_FASTER) == (i < 2)  # the last turn asks for nothing
    chars = [t.prompt_chars for t in measured.turns]
    assert chars[0] < chars[1] < chars[2] and all(t.prompt_tokens > 0 for t in measured.turns)


def test_load_case_reads_the_shipped_measurements():
    files = case_files("layernorm")
    assert "cpu" in files
    traj = load_case("layernorm")  # the H200 measurement when shipped
    rows = case_table(traj)
    assert [r["turn"] for r in rows] == [1, 2, 3]
    assert set(rows[0]) == {"turn", "correct", "hacked", "speedup", "speedup_compile", "coverage",
                            "bandwidth_fraction", "runtime_ms", "reward"}
    assert all(r["correct"] and not r["hacked"] for r in rows)
    assert [t.code for t in traj.turns] == case_turns("layernorm")  # measured on the sources shipped
    if "h200" in files:
        assert all(r["speedup"] and r["speedup_compile"] and r["coverage"] for r in rows)
    assert len(case_table(load_case("layernorm", device_name="cpu"))) == 3
    with pytest.raises(FileNotFoundError):
        load_case("layernorm", device_name="no_such_gpu")


def _configs(code: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "Config"]


def test_the_sources_tell_the_story():
    first, second, third = case_turns("layernorm")
    for k, code in enumerate((first, second, third), 1):
        assert code.startswith(f"# Turn {k}:")
    assert "triton.autotune" not in first and not _configs(first)
    assert "triton.autotune" in second and _configs(second)
    assert not any(kw.arg == "num_stages" for c in _configs(second) for kw in c.keywords)
    assert "triton.autotune" in third
    stages = {kw.value.value for c in _configs(third) for kw in c.keywords if kw.arg == "num_stages"}
    assert len(stages) > 1  # tuned over pipeline stages
    assert "def welford_update(" in third and "welford_update(mean, m2, count," in third


LOOP_CHECK = """
import importlib.util, torch
for turn in (2, 3):
    spec = importlib.util.spec_from_file_location("t", {folder!r} + f"/turn_{{turn}}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = getattr(mod, "layernorm_fwd_kernel", None) or mod.layernorm_welford_kernel
    for n, block in ((2500, 1024), (300, 128)):
        torch.manual_seed(0)
        x = (torch.randn(3, n) * 2 + 3).to(torch.bfloat16)
        ln = torch.nn.LayerNorm(n)
        with torch.no_grad():
            ln.weight.normal_(1, 0.1)
            ln.bias.normal_(0, 0.1)
        ln.to(torch.bfloat16)
        y = torch.empty_like(x)
        kernel.fn[(3,)](x, ln.weight, ln.bias, y, x.stride(0), n, 1e-5, BLOCK_SIZE=block)
        err = (y.float() - ln(x).float()).abs().max().item()
        assert err < 0.07, (turn, n, block, err)
"""


@pytest.mark.slow
def test_rows_longer_than_the_block_are_looped_over_correctly():
    """The harness's small sizes fit one block; this runs the kernels (autotune bypassed) on longer rows."""
    code = LOOP_CHECK.format(folder=str(CASES_DIR / "layernorm"))
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
