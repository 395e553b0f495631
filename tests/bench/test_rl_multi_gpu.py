"""bench/rl_multi_gpu.py's CPU smoke test: the comparison driver launches the trainer with two processes
(torchrun on the CPU), each runs its own episodes and evaluations, and the timings come back per process.
A real subprocess tree; about 30 s."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_processes_one_step(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    args = ["--compare", "2", "--steps", "1", "--prompts-per-gpu", "1", "--samples", "2", "--turns", "1",
            "--max-new-tokens", "8", "--force-solutions", "--correctness-trials", "1", "--dtype", "float32"]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "rl_multi_gpu.py"), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "rl_multi_gpu.json").read_text())
    run = report["runs"][0]
    assert run["processes"] == 2 and len(run["per_process_times"]) == 2
    step = run["steps"][0]
    assert step["trajectories"] == run["episodes_per_step"] == 4  # 2 prompts x 2 samples, one prompt per process
    assert step["reward_mean"] == 0.25  # the forced solution (0.5 on the CPU) in one of each prompt's two samples
    assert all(t[0]["time/evaluation_s"] > 0 for t in run["per_process_times"])  # each process evaluated its own
    assert report["summary"][0]["speedup"] == 1.0 and report["summary"][0]["step_s"] > 0
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "rl_multi_gpu.py"), "--compare", "one,two"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--compare" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_two_processes_evaluate_through_a_ray_service(tmp_path):
    """--serve: the run of two processes evaluates through its own `drk serve --pool ray` (two CPU actors)."""
    pytest.importorskip("ray")
    pytest.importorskip("fastapi")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHONPATH": str(ROOT)}  # Ray's sockets: a short TMPDIR
    args = ["--compare", "2", "--serve", "--slots", "1", "--steps", "1", "--prompts-per-gpu", "1", "--samples", "2",
            "--turns", "1", "--max-new-tokens", "8", "--force-solutions", "--correctness-trials", "1",
            "--dtype", "float32"]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "rl_multi_gpu.py"), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "out" / "rl_multi_gpu.json").read_text())["runs"][0]
    assert run["evaluation"] == "drk serve --pool ray, 2 actor(s) x 1 slots"
    assert run["settings"]["backend"].startswith("http://127.0.0.1:")
    assert run["steps"][0]["reward_mean"] == 0.25  # the forced solutions were evaluated, through the service
