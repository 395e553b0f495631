"""The pre-registered evaluation on the CPU (a tiny packed transformer, the real Triton interpreter, a few tasks):
records per task, resumed where a call stopped, paired with the SFT model's by McNemar's test; the test's
numbers by hand; and the continued-SFT control's step."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from experiments.rl_arm.stats import compare, mcnemar, summary  # noqa: E402

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]


def test_mcnemar_by_hand():
    # 37 only after, 17 only before (the second-turn keeps of docs/mini_drkernel.md): p = 0.009
    m = mcnemar(37, 17)
    assert round(m["p_exact"], 3) == 0.009
    assert m["p_exact"] == pytest.approx(2 * sum(math.comb(54, k) for k in range(18)) / 2**54)
    assert mcnemar(0, 0)["p_exact"] == 1.0 and mcnemar(3, 3)["p_exact"] == 1.0
    assert mcnemar(6, 0)["p_exact"] == pytest.approx(2 / 64)  # all six discordant one way: 2 * 0.5^6
    assert m["chi2"] == pytest.approx((20 - 1) ** 2 / 54) and 0.005 < m["p_chi2"] < 0.02


def test_the_correctness_reward():
    from drk_lab.agent.rewards import get_reward
    from drk_lab.harness.result import EvalResult

    reward = get_reward("correct")
    assert reward(EvalResult(correct=True, speedup=2.5)) == 1.0 and reward(EvalResult(correct=False)) == 0.0
    assert reward(EvalResult(correct=True, hacked=True)) == 0.0
    assert reward(EvalResult(correct=True, error_kind="hacked")) == 0.0


def rec(task, part, kind, correct):
    return {"task": task, "part": part, "kind": kind, "correct": correct, "solved": any(correct)}


def test_compare_counts_discordant_tasks_by_part_kind_and_second_turn():
    before = [rec("a", "heldout", "L2 linear", [True, False]), rec("b", "heldout", "L2 linear", [False, False]),
              rec("c", "heldout", "L1 mean", [False, True]), rec("d", "fresh", "L2 conv", [True, True])]
    after = [rec("a", "heldout", "L2 linear", [True, True]), rec("b", "heldout", "L2 linear", [True, False]),
             rec("c", "heldout", "L1 mean", [False, False]), rec("d", "fresh", "L2 conv", [True, True])]
    out = compare(before, after)
    assert (out["heldout"]["tasks"], out["heldout"]["b"], out["heldout"]["c"], out["heldout"]["both"]) == (3, 1, 1, 1)
    assert (out["fresh"]["b"], out["fresh"]["c"], out["fresh"]["both"]) == (0, 0, 1)
    assert out["by_kind"]["L1 mean"]["c"] == 1 and out["by_kind"]["L2 linear"]["b"] == 1
    # first kernel right after both: a (kept only after) and d (kept by both)
    assert (out["second_turn_keeps"]["tasks"], out["second_turn_keeps"]["b"], out["second_turn_keeps"]["c"]) == (2, 1, 0)
    s = summary(after)
    assert s["solved"] == 3 and s["by_part"]["heldout"] == {"tasks": 3, "solved": 2} and "fast@1" not in s


@pytest.fixture(scope="module")
def packed(tiny_path, tmp_path_factory):
    from drk_lab.rl.packed_model import pack_model

    return pack_model(tiny_path, tmp_path_factory.mktemp("packed") / "tiny.safetensors")


def smoke(packed, run: Path, *more):
    from experiments.rl_arm.run import parse_settings

    return parse_settings(["smoke"], [f"model.packed={str(packed)!r}", f"arm.run={str(run)!r}", *more])


def test_evaluation_records_resume_and_pair_with_sft(packed, tmp_path):
    from drk_lab.rl.checkpoint import save_state
    from experiments.rl_arm.evaluate import due, evaluate, read_records
    from experiments.rl_arm.run import open_arm

    settings = smoke(packed, tmp_path / "run")
    assert due(settings)  # step 0: the SFT model's evaluation
    first = evaluate(settings)
    assert first["label"] == "sft" and first["left"] == 0 and first["records"] == 4
    path = tmp_path / "run" / "eval" / "sft.jsonl"
    records = read_records(path)
    assert [r["part"] for r in records] == ["heldout", "heldout", "fresh", "fresh"]
    assert all(len(r["correct"]) == 2 and r["fast@1"] is None for r in records)
    assert not due(settings)
    # a call cut short: the next evaluates only the tasks not yet there, to the same records (greedy)
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:1]))
    (tmp_path / "run" / "eval" / "sft.json").unlink()
    again = evaluate(settings)
    assert again["left"] == 0 and read_records(path) == records

    # the state at an evaluation's step: paired with the SFT records
    trainer, sampler, _ = open_arm(settings)
    trainer.state.step = 2
    save_state(trainer, tmp_path / "run" / "state", sampler)
    assert due(settings)
    after = evaluate(settings)
    assert after["label"] == "step_000002"
    paired = after["summary"]["paired_with_sft"]
    assert paired["heldout"]["tasks"] == 2 and paired["fresh"]["tasks"] == 2 and 0 <= paired["heldout"]["p_exact"] <= 1
    assert (tmp_path / "run" / "eval" / "step_000002.json").is_file() and not due(settings)


def test_the_control_trains_on_assistant_replies_only(tiny_path):
    from transformers import AutoTokenizer

    from experiments.rl_arm.arm import assistant_tokens

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    messages = [{"role": "user", "content": "write relu"}, {"role": "assistant", "content": "def relu_kernel(x): pass"},
                {"role": "user", "content": "it failed"}, {"role": "assistant", "content": "BUGGY", "train": False},
                {"role": "user", "content": "again"}, {"role": "assistant", "content": "def fixed_kernel(y): pass"}]
    ids, mask = assistant_tokens(tokenizer, messages, 10_000)
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert "relu_kernel" in trained and "fixed_kernel" in trained
    assert "BUGGY" not in trained and "write relu" not in trained and "again" not in trained
    assert "BUGGY" in tokenizer.decode(ids)


def test_continued_sft_control_step_trains_the_adapter_and_resumes(packed, tmp_path):
    from drk_lab.rl.checkpoint import read_manifest
    from experiments.rl_arm.run import open_arm, run_steps

    sets = ("arm.kind='sft'", "arm.eval_every=0", "arm.steps=2")
    settings = smoke(packed, tmp_path / "run", *sets)
    done = run_steps(settings, time_limit_s=1e9, max_steps=1)
    assert (done["from_step"], done["to_step"]) == (0, 1)
    row = json.loads((tmp_path / "run" / "log" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["optimizer_steps"] == 2 and row["sft_loss"] > 0 and len(row["grad_norms"]) == 2
    manifest = read_manifest(tmp_path / "run" / "state")
    assert manifest["sampler"]["kind"] == "sft" and manifest["sampler"]["items"] > 1000
    trainer, _, _ = open_arm(settings)
    assert trainer.state.step == 1
    lora_b = [p for n, p in trainer.accelerator.unwrap_model(trainer.model).named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().sum()) > 0 for p in lora_b)
    assert torch.is_tensor(lora_b[0])
