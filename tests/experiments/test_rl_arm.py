"""experiments/rl_arm on the CPU with a tiny packed transformer and the real Triton interpreter: N steps straight
equal N/2 steps, the state saved, a fresh process, N/2 more (weights, optimizer and log rows bit for bit); the
arm's settings; the continued-SFT control; the evaluation and its McNemar test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")

import torch  # noqa: E402

pytestmark = pytest.mark.slow  # RL steps of the arm, resumed in a fresh process

REPO = Path(__file__).resolve().parents[2]

# a child process: the arm's steps with sample 0's first reply forced to the teacher's (correct) kernel, so that
# each group carries a reward to compare (the tiny model's own 8 tokens hold no code)
CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.teacher import answer
    from experiments.rl_arm.run import parse_settings, run_steps

    configs, sets, max_steps, forced = json.loads(sys.argv[1])
    settings = parse_settings(configs, sets)
    solutions = {{t.name: answer(s, 1) for s, t, _ in read_rl_tasks(settings.rollouts.prompts)}}

    def force(task, sample, turn):
        return solutions[task.name] if forced and (sample, turn) == (0, 0) else None

    print(json.dumps(run_steps(settings, time_limit_s=1e9, max_steps=max_steps, force_responses=force)))
""")


def child(tmp_path: Path, configs: list[str], sets: list[str], max_steps: int | None = None, forced: bool = True) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, str(script), json.dumps([configs, sets, max_steps, forced])], capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def packed(tiny_path, tmp_path_factory):
    from drk_lab.rl.packed_model import pack_model

    return pack_model(tiny_path, tmp_path_factory.mktemp("packed") / "tiny.safetensors")


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    """Two level-1 activation tasks of data/rl (any task will do: this is about resuming, not freshness)."""
    from drk_lab.data.export import read_rows, write_rows

    rows = [r for r in read_rows(REPO / "data" / "rl" / "prompts.jsonl.gz")
            if r["level"] == 1 and r["ops"][0] in ("relu", "gelu", "sigmoid", "silu", "tanh")][:2]
    assert len(rows) == 2
    return write_rows(rows, tmp_path_factory.mktemp("prompts") / "prompts.jsonl.gz")


def smoke_sets(packed, prompts, run: Path, *more) -> list[str]:
    return [f"model.packed={str(packed)!r}", f"rollouts.prompts={str(prompts)!r}", f"arm.run={str(run)!r}", *more]


def state_tensors(run: Path) -> dict:
    import io

    from drk_lab.rl.checkpoint import read_manifest, read_parts

    manifest = read_manifest(run / "state")
    return torch.load(io.BytesIO(read_parts(run / "state", manifest["parts"])), weights_only=True)


def comparable(row: dict) -> dict:
    """A log row without what measures the machine's speed."""
    return {k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith("per_s"))}


def rows_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(1500)
def test_steps_straight_equal_steps_resumed_in_a_fresh_process(packed, prompts, tmp_path):
    """N = 2 on a shared two-core machine (a step is half a minute of the interpreter); the warm-up spans the
    first step, so the second runs at another learning rate, from the reloaded scheduler."""
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    two = ("arm.eval_every=0", "arm.steps=2")
    done = child(tmp_path, ["smoke"], smoke_sets(packed, prompts, straight, *two))
    assert done["to_step"] == 2
    first = child(tmp_path, ["smoke"], smoke_sets(packed, prompts, halves, *two), max_steps=1)
    assert (first["from_step"], first["to_step"]) == (0, 1)
    second = child(tmp_path, ["smoke"], smoke_sets(packed, prompts, halves, *two), max_steps=1)
    assert (second["from_step"], second["to_step"]) == (1, 2)

    a, b = rows_of(straight), rows_of(halves)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2]
    assert a[0]["lr"] < a[1]["lr"]
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    # the correctness reward: the forced kernel earns 1, the tiny model's replies (no code) 0
    assert a[0]["reward_mean/turn_1"] == 0.5 and a[0]["reward_mean/turn_2"] == 0.0
    # the updates happened: a signal in every step, two shuffled updates each, weights moved
    assert all(r["groups"] == 1 and r["groups_all_alike"] == 0 and r["optimizer_steps"] == 2 for r in a)
    assert all(len(r["grad_norms"]) == 2 and r["grad_norm_max"] > 0 for r in a)
    sa, sb = state_tensors(straight), state_tensors(halves)
    assert sa["step"] == sb["step"] == 2
    assert sa["trainable"].keys() == sb["trainable"].keys()
    assert all(torch.equal(sa["trainable"][k], sb["trainable"][k]) for k in sa["trainable"])
    assert any(float(v.abs().sum()) > 0 for k, v in sa["trainable"].items() if "lora_B" in k)  # B starts at 0
    assert sa["scheduler"] == sb["scheduler"]
    for i, s in sa["optimizer"]["state"].items():
        assert all(torch.equal(s[k], sb["optimizer"]["state"][i][k]) for k in s)
    assert torch.equal(sa["rng"]["torch"], sb["rng"]["torch"]) and sa["rng"]["python"] == sb["rng"]["python"]
    # LoRA on every linear layer of every block, MLP included; the state's files within 16 MiB each
    names = {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in sa["trainable"]}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all(p.stat().st_size <= 16 * 2**20 for p in (halves / "state").iterdir())
    manifest = json.loads((halves / "state" / "manifest.json").read_text())
    assert manifest["step"] == 2 and manifest["sampler"]["items"] == 2 and manifest["sampler"]["kind"] == "rl"


@pytest.mark.timeout(900)
def test_all_alike_groups_are_counted_and_left_out_and_a_changed_prompt_set_will_not_resume(packed, prompts, tmp_path):
    from experiments.rl_arm.run import open_arm, parse_settings

    run = tmp_path / "run"
    child(tmp_path, ["smoke"], smoke_sets(packed, prompts, run), max_steps=1, forced=False)
    (row,) = rows_of(run)  # no reply has code: one group, all alike, so no update at all
    assert (row["groups"], row["groups_all_alike"], row["optimizer_steps"], row["trained_sequences"]) == (1, 1, 0, 0)
    settings = parse_settings(["smoke"], smoke_sets(packed, prompts, run, "rollouts.prompts_per_step=2"))
    with pytest.raises(ValueError, match="sampler"):
        open_arm(settings)
