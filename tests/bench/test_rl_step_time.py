"""bench/rl_step_time.py's CPU smoke: the mini RL step (smoke sizes, the tiny random model, the teacher's reply
in one sample of each group) synchronous and pipelined in one real subprocess, the split and tokens/s of each
step in the JSON, and the same replies with the same rewards in both modes. A few minutes on two cores."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ("generation_s", "evaluation_s", "overlap_s", "training_s", "idle_s", "wall_s")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_both_modes_in_one_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    args = ["--config", "smoke", "--set", "model.max_new_tokens=8", "--modes", "sync:2,pipelined:2", "--steps", "1",
            "--force-teacher", "1", "--out", str(tmp_path)]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "rl_step_time.py"), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sync:2 vs pipelined:2: 8 of 8 identical replies got the same reward" in proc.stdout
    report = json.loads((tmp_path / "rl_step_time.json").read_text())
    assert list(report["modes"]) == ["sync:2", "pipelined:2"] and report["device"].startswith("cpu")
    sync, piped = (report["modes"][name]["steps"][0] for name in ("sync:2", "pipelined:2"))
    for step in (sync, piped):
        assert all(step[key] >= 0 for key in SPLIT) and step["wall_s"] > step["training_s"] > 0
        assert step["generated_tokens"] > 0 and step["generation_tokens_per_s"] > 0
        assert step["evaluations"] == 4  # the teacher's reply in sample 0 of both groups, both turns
    assert sync["overlap_s"] == 0 and piped["overlap_s"] > 0  # wave 1 generated while wave 0's kernels were checked
    # 2 prompts x 2 samples x 2 turns: every reply the same in both modes, and its reward
    assert sorted(map(str, sync["samples"])) == sorted(map(str, piped["samples"])) and len(sync["samples"]) == 8
    assert report["same_rewards"]["sync:2 vs pipelined:2"] == {"identical_replies": 8, "same_reward": 8}
