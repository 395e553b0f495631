"""experiments/drills/rl.py: the reward reads the chain a completion writes, an RL step moves the model only where
the reward tells samples apart, and the script runs every arm end to end as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # RL arms of the drills script

pytest.importorskip("transformers")
pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "drills" / "rl.py"


@pytest.fixture(scope="module")
def drills():
    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted
    from drk_lab.rl.tiny_model import train_tokenizer
    from experiments.mini.texts import operator_drill

    specs = [s for s, _, _ in read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz", split="heldout")
             if len(chain_wanted(s)) >= 2][:8]
    return specs, train_tokenizer(1024, corpus=[operator_drill(s) for s in specs])


def teacher_reply(tokenizer, spec) -> tuple[list[int], list[int]]:
    from experiments.drills.learnability import drill_prompt
    from experiments.mini.texts import operator_drill

    prompt = drill_prompt(tokenizer, spec)
    whole = tokenizer(operator_drill(spec), add_special_tokens=False)["input_ids"] + [tokenizer.pad_token_id]
    return prompt, whole[len(prompt):]


def test_the_reward_is_the_chain_written_exactly(drills):
    from experiments.drills.rl import chain_right

    specs, tokenizer = drills
    for spec, other in zip(specs, specs[1:] + specs[:1]):
        _, reply = teacher_reply(tokenizer, spec)
        assert chain_right(tokenizer, spec, reply)
        assert not chain_right(tokenizer, other, reply)
        # the chain's last line dropped: the operators are no longer the task's
        text = tokenizer.decode(reply, skip_special_tokens=True)
        lines = text.split("\n")
        last = max(i for i, line in enumerate(lines) if line.strip().startswith("v = ") and "to(" not in line)
        cut = tokenizer("\n".join(lines[:last] + lines[last + 1:]), add_special_tokens=False)["input_ids"]
        assert not chain_right(tokenizer, spec, cut)


def test_token_rows_train_the_reply_tokens_only(drills):
    from experiments.drills.rl import token_rows

    specs, tokenizer = drills
    pairs = [teacher_reply(tokenizer, s) for s in specs[:3]]
    rows, trained = token_rows([p for p, _ in pairs], [r for _, r in pairs], tokenizer.pad_token_id)
    for i, (prompt, reply) in enumerate(pairs):
        assert rows["input_ids"][i, :len(prompt) + len(reply)].tolist() == prompt + reply
        assert trained[i].nonzero().flatten().tolist() == list(range(len(prompt), len(prompt) + len(reply)))
        assert rows["attention_mask"][i].sum() == len(prompt) + len(reply)


def test_an_rl_step_moves_nothing_without_a_reward_that_tells_samples_apart(drills, tmp_path):
    """A random model writes no chain right: every sample's reward is 0, TRLOO's advantages are all 0 and
    the policy loss has no gradient, so the weights stay as they were; the supervised arm, on the same
    prompts, moves them."""
    from transformers import AutoModelForCausalLM

    from experiments.drills.learnability import drill_prompt
    from experiments.drills.rl import rl_step
    from experiments.mini.model import build_model
    from experiments.mini.settings import ModelSettings

    specs, tokenizer = drills
    size = ModelSettings(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32,
                         intermediate_size=192, max_positions=1024)
    path = build_model(tokenizer, size, tmp_path / "init")
    args = Namespace(samples=2, max_new=24, updates=2, temperature=1.0)
    prompts = [drill_prompt(tokenizer, s) for s in specs[:3]]
    for arm, moves in (("trloo", False), ("supervised", True)):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        row = rl_step(model, optimizer, tokenizer, arm, specs[:3], prompts, args, torch.Generator().manual_seed(0))
        assert row["reward"] == 0.0 and row["groups_all_same"] == 3
        changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        assert changed is moves, arm


def test_the_script_runs_every_arm_and_reuses_its_starting_model(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    common = ["--work", str(tmp_path), "--pretrain-steps", "2", "--drills", "40", "--steps", "2", "--prompts", "2",
              "--samples", "2", "--chains", "3", "--max-new", "40", "--score-every", "1"]
    done = subprocess.run([sys.executable, str(SCRIPT), *common], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["arms"]) == {"trloo", "supervised"}
    assert report["chains"] == {"heldout": 3, "train_side": 3}
    for arm in report["arms"].values():
        assert [p["step"] for p in arm["scores"]] == [0, 1, 2]
        assert all(0 <= p["heldout"] <= 3 and 0 <= p["train_side"] <= 3 for p in arm["scores"])
        assert [s["step"] for s in arm["steps"]] == [1, 2] and all(0 <= s["reward"] <= 1 for s in arm["steps"])
    # every arm starts from the same model: the same scores at step 0
    assert len({json.dumps(a["scores"][0]) for a in report["arms"].values()}) == 1
    made = (tmp_path / "start" / "model.safetensors").stat().st_mtime_ns
    again = subprocess.run([sys.executable, str(SCRIPT), *common, "--arms", "trloo", "--report", "again.json"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "start" / "model.safetensors").stat().st_mtime_ns == made
    assert json.loads((tmp_path / "again.json").read_text())["arms"]["trloo"]["scores"][0] == report["arms"]["trloo"]["scores"][0]
    # the run folder's results.json: every report's scores per arm and step, with a schema version
    from experiments.drills.rl import read_reports, scores_figure, write_results

    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "report.json").write_text(json.dumps(report))
    summary = json.loads(write_results(tmp_path, read_reports(tmp_path)).read_text())
    assert summary["schema_version"] == 1 and summary["chains"] == {"heldout": 3, "train_side": 3}
    assert summary["scores"]["seed0/report"]["trloo"] == [[p["step"], p["heldout"], p["train_side"]]
                                                          for p in report["arms"]["trloo"]["scores"]]
    # the figure: per arm, a held-out and a train-side line carrying the report's scores

    fig = scores_figure({"seed0": report, "seed1": report})
    assert len(fig.data) == 2 * 2 * 2
    first = fig.data[0]
    assert first.name == "trloo, seed0" and list(first.y) == [p["heldout"] for p in report["arms"]["trloo"]["scores"]]
    assert list(fig.data[1].y) == [p["train_side"] for p in report["arms"]["trloo"]["scores"]]
    wrong = subprocess.run([sys.executable, str(SCRIPT), "--work", str(tmp_path), "--arms", "ppo"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert wrong.returncode == 1 and wrong.stderr.strip() == "--arms: unknown ppo (choose from trloo, supervised)"


def test_summarize_and_work_flags_fail_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    empty = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(tmp_path)], capture_output=True, text=True,
                           env=env, timeout=120)
    assert empty.returncode == 1 and empty.stderr.strip() == f"--summarize {tmp_path}: no */report*.json there"
    nothing = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert nothing.returncode == 2 and nothing.stderr.strip().endswith("error: --work is needed for a run")
