"""The trainer under torchrun with two processes (accelerate's DDP on the CPU): the same run as one process,
no code change. A real subprocess; about 35 s."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--steps", "1", "--prompts", "2", "--samples", "2", "--turns", "1", "--max-new-tokens", "8", "--dtype", "float32",
        "--force-solutions", "--tasks", "01_relu,03_silu", "--correctness-trials", "1"]


def run(tmp_path: Path, name: str, launcher: list[str]) -> dict:
    env = {**os.environ, "OUT": str(tmp_path / name), "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(ROOT),
           "TMPDIR": str(tmp_path)}
    proc = subprocess.run([*launcher, str(ROOT / "bench" / "rl_run.py"), *ARGS], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / name / "rl_run.json").read_text())


@pytest.mark.slow
def test_two_processes_run_the_same_step_as_one(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    one = run(tmp_path, "one", [sys.executable])
    two = run(tmp_path, "two", [torchrun, "--standalone", "--nproc_per_node", "2"])
    assert one["processes"] == 1 and two["processes"] == 2
    s1, s2 = one["steps"][0], two["steps"][0]
    assert s1["trained_sequences"] == s2["trained_sequences"] == 4  # 2 tasks x 2 samples, split over the processes
    assert s1["reward_mean"] == s2["reward_mean"] == 0.25  # the forced solution in one of each task's two samples
    assert s2["grad_norm"] > 0
    assert (tmp_path / "two" / "rl_log" / "metrics.jsonl").is_file()
