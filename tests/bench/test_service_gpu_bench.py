"""bench/service_gpu.py's multi-GPU measurement on the CPU: without Ray (one evaluate_many thread per device,
two threads on one device), through `drk serve --pool ray` on one CPU actor and then two, and its one-line
refusal of an unknown phase. About a minute."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import drk_lab as drk

pytestmark = pytest.mark.slow  # bench scripts run whole

ROOT = Path(__file__).resolve().parents[2]


def test_per_device_threads_without_ray(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))  # eval_speed (imported by service_gpu) makes $OUT at import
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    service_gpu = importlib.import_module("service_gpu")
    tasks = {t.name: t for t in drk.builtin_tasks(level=1)}
    pairs = [(tasks[n].small(), drk.builtin_solution(tasks[n])) for n in ("01_relu", "08_softmax")]
    report = service_gpu.per_device_threads(["cpu", "cpu"], copies=1, in_flight=2, pairs=pairs,
                                            same_kernel_tasks=("08_softmax",))
    assert report["gpus"] == 2 and [d["evaluations"] for d in report["per_gpu"]] == [2, 2]
    assert all(set(d["errors"]) <= {"hacked"} for d in report["per_gpu"])  # every candidate got a verdict
    assert sum(d["correct"] for d in report["per_gpu"]) >= 3  # the solutions pass (fresh variants of them)
    assert report["total"]["evaluations"] == 4 and report["total"]["evaluations_per_s"] > 0
    assert report["same_kernel_each_gpu"]["08_softmax"]["devices"] == ["cpu", "cpu"]


def test_unknown_phase_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "service_gpu.py"), "througput"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")})
    assert proc.returncode == 2 and "unknown phase 'througput'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_ray_service_counts_per_actor_and_scales(tmp_path, monkeypatch):
    """The multi-GPU phase's Ray path on CPU actors: a real `drk serve --pool ray` with one actor, then two,
    each warmed and then given fresh candidates; every result is counted on the actor that ran it."""
    pytest.importorskip("ray")
    pytest.importorskip("fastapi")
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    service_gpu = importlib.import_module("service_gpu")
    relu = drk.builtin_tasks(level=1)[0]
    report = service_gpu.ray_service(2, copies=2, in_flight=1, pairs=[(relu.small(), drk.builtin_solution(relu))],
                                     device="cpu")
    one, two = report["1_gpu"], report["2_gpu"]
    assert one["warm_up"]["correct"] == 1 and one["pass"]["correct"] == two["pass"]["correct"] == 2
    assert list(one["pass"]["per_gpu"]) == ["actor 0"] and len(one["workers"]) == 1
    assert sum(g["evaluations"] for g in two["pass"]["per_gpu"].values()) == 2 and len(two["workers"]) == 2
    assert report["scaling_efficiency"] > 0 and "same_kernel_each_gpu" not in two  # nothing is timed on a CPU
