"""evaluate() on the CPU path: real worker processes and the real Triton interpreter."""

import os
import subprocess
import sys
import tempfile

import pytest

import drk_lab as drk
from drk_lab.harness.caller import default_host_memory_bytes
from drk_lab.harness.validity import check_candidate
from drk_lab.quickstart import load_variants

CPU_VARIANTS = [v for v in load_variants() if v.device is None]


@pytest.mark.slow
def test_every_builtin_solution_passes_at_small_size(tasks):
    pairs = [(t.small(), drk.builtin_solution(t)) for t in tasks.values()]
    results = drk.evaluate_many(pairs, device="cpu", progress=False)
    failed = {name: r.summary() for name, r in zip(tasks, results) if not r.ok}
    assert not failed
    for r in results:
        assert r.compiled and r.trials == 5 and len(r.seeds) == 6
        assert r.speedup is None and not r.timings_valid and "interpreter" in r.timing_note
        # the trials' time by part: each part measured, together within the trial stages' time
        parts = ("inputs", "poison", "candidate", "checks", "reference", "compare")
        assert set(r.trial_seconds) == set(parts) and all(t > 0 for t in r.trial_seconds.values())
        trials = sum(t for stage, t in r.stage_seconds.items() if stage.startswith("trial"))
        assert sum(r.trial_seconds.values()) <= trials


def stray_processes(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def eval_dirs() -> set[str]:
    return {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("drk_eval_")}


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.slow) if v.name in ("sleeps", "hang") else v
                                     for v in CPU_VARIANTS], ids=[v.name for v in CPU_VARIANTS])
def test_variant_is_classified_and_the_next_evaluation_is_right(variant, tasks, relu_small, relu_solution):
    task = tasks[variant.task].small()
    before = eval_dirs()
    result = drk.evaluate(task, variant.code, device="cpu", timeout_s=8, host_memory_bytes=1 << 30,
                          hack_checks=variant.hack_checks)
    assert (result.error_kind or "ok") == variant.expect, result.error
    if result.error_kind not in (None, "syntax", "no_modelnew", "no_triton_kernel"):
        assert result.error  # says what happened
    assert eval_dirs() <= before  # the worker's folder is gone
    follow_up = drk.evaluate(relu_small, relu_solution, device="cpu")
    assert follow_up.ok, follow_up.error


def test_children_of_the_candidate_are_killed(relu_small):
    marker = "sleep 987654"
    code = next(v for v in CPU_VARIANTS if v.name == "leaves_child").code.replace("sleep\", \"1000", "sleep\", \"987654")
    assert "987654" in code
    result = drk.evaluate(relu_small, code, device="cpu", hack_checks=False)
    assert result.ok
    assert stray_processes(marker) == []
    flagged = drk.evaluate(relu_small, code, device="cpu")
    assert flagged.hacked and flagged.hack_reasons == ["sandbox_escape"] and "subprocess" in flagged.error


def test_output_is_bounded(relu_small):
    code = next(v for v in CPU_VARIANTS if v.name == "floods_output").code
    result = drk.evaluate(relu_small, code, device="cpu")
    assert result.ok
    assert "spam" in result.stdout and "bytes cut" in result.stdout
    assert len(result.stdout) < 20_000


def test_a_host_memory_hoard_ends_as_oom_as_soon_as_it_passes_its_limit(relu_small, relu_solution):
    """256 MiB tensors in a loop: the worker is stopped within one allocation (and one 0.1 s poll) of its limit,
    long before its time limit. Without a limit given, it is half of the memory available, not of the total."""
    hoard = relu_solution.replace("        x = x.contiguous()\n", "        x = x.contiguous()\n        hoard = []\n"
                                  "        while True:\n            hoard.append(torch.ones(64 << 20))\n")
    assert hoard != relu_solution
    result = drk.evaluate(relu_small, hoard, device="cpu", timeout_s=30, host_memory_bytes=1 << 30)
    assert result.error_kind == "oom" and "past the 1.00 GiB limit" in result.error, result.error
    reached = float(result.error.split("reached ")[1].split(" GiB")[0])
    # past the limit by at most one 256 MiB tensor and what grows in one poll ("1.00" when just past: 2 decimals)
    assert 1.0 <= reached < 1.0 + 0.5, result.error
    assert result.eval_seconds < 25
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    assert default_host_memory_bytes() < min(32 << 30, available // 2) + (256 << 20)


def test_one_evaluation_cannot_change_another(relu_small, relu_solution):
    # The first candidate patches torch.relu (so its own reference agrees with its zeros) and
    # leaves a file behind; the second returns zeros honestly and must still be a mismatch.
    zeros_kernel = relu_solution.replace("tl.where(x > 0, x, 0.0)", "x * 0.0")
    patcher = zeros_kernel.replace("class ModelNew", "torch.relu = lambda x: x * 0\nopen('left_behind.txt', 'w').write('x')\n\n\nclass ModelNew")
    first = drk.evaluate(relu_small, patcher, device="cpu", hack_checks=False)
    assert first.correct  # with the hack checks off it fools its own worker...
    flagged = drk.evaluate(relu_small, patcher, device="cpu")
    assert flagged.hacked and {"patches_harness", "sandbox_escape"} <= set(flagged.hack_reasons)  # ...not with them on
    second = drk.evaluate(relu_small, zeros_kernel, device="cpu")
    assert second.error_kind == "mismatch"
    assert not os.path.exists("left_behind.txt")


def test_seeds_are_recorded_and_reproducible(relu_small, relu_solution):
    a = drk.evaluate(relu_small, relu_solution, device="cpu", seed=123)
    b = drk.evaluate(relu_small, relu_solution, device="cpu", seed=123)
    c = drk.evaluate(relu_small, relu_solution, device="cpu")
    assert a.seeds == b.seeds and len(a.seeds) == 6
    assert c.seeds != a.seeds


def test_tolerance_is_by_dtype_and_configurable(relu_small, relu_solution):
    noisy = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 0.0) + 1e-3")
    strict = drk.evaluate(relu_small, noisy, device="cpu")
    assert strict.error_kind == "mismatch" and "atol=0.0001" in strict.error
    loose = drk.evaluate(relu_small, noisy, device="cpu", atol=1e-2, rtol=1e-2)
    assert loose.ok and 5e-4 < loose.max_abs_error < 2e-3


def test_every_trial_must_pass(relu_small, relu_solution):
    # correct on the first call only (by arithmetic: a branch on the count is caught statically, changes_after_checks)
    flaky = relu_solution.replace("    def forward(self, x: torch.Tensor) -> torch.Tensor:\n",
                                  "    calls = 0\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
                                  "        ModelNew.calls += 1\n        x = x + (ModelNew.calls > 1)\n")
    assert "calls > 1" in flaky
    result = drk.evaluate(relu_small, flaky, device="cpu")
    assert result.error_kind == "mismatch" and result.trials == 1 and "trial 1" in result.error


@pytest.mark.slow
def test_spawn_isolation_gives_the_same_verdicts(relu_small, relu_solution):
    good = drk.evaluate(relu_small, relu_solution, device="cpu", isolation="spawn")
    assert good.ok
    crash = next(v for v in CPU_VARIANTS if v.name == "segfault")
    assert drk.evaluate(relu_small, crash.code, device="cpu", isolation="spawn", hack_checks=False).error_kind == "segfault"


def test_reference_failures_are_not_blamed_on_the_candidate(relu_solution):
    broken = drk.Task("broken", "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                "        raise RuntimeError('reference bug')\n"
                                "def get_inputs():\n    return [torch.randn(8)]\n"
                                "def get_init_inputs():\n    return []\n")
    result = drk.evaluate(broken, relu_solution, device="cpu")
    assert result.error_kind == "reference" and "reference bug" in result.error


@pytest.mark.parametrize("code, expected", [
    ("from triton import jit\nclass ModelNew: pass\n@jit\ndef k(): pass\n", None),
    ("import triton as tr\nclass ModelNew: pass\n@tr.jit(do_not_specialize=['n'])\ndef k(n): pass\n", None),
    ("# @triton.jit\nclass ModelNew: pass\ns = '@triton.jit'\n", "no_triton_kernel"),
    ("import triton\n@triton.jit\ndef k(): pass\nclass Model: pass\n", "no_modelnew"),
    ("class ModelNew(:\n", "syntax"),
])
def test_static_checks_read_the_syntax_tree(code, expected):
    found = check_candidate(code)
    assert (found[0] if found else None) == expected


@pytest.mark.slow
def test_a_long_tmpdir_still_works(tmp_path):
    long_tmp = tmp_path / ("x" * 60) / ("y" * 60)  # the zygote's unix socket path would pass 108 bytes
    long_tmp.mkdir(parents=True)
    script = ("import drk_lab as drk; t = drk.builtin_tasks(level=1)[0].small(); "
              "print(drk.evaluate(t, drk.builtin_solution(t), device='cpu', correctness_trials=1).ok)")
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(long_tmp)},
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1:] == ["True"], proc.stderr[-2000:]


@pytest.mark.slow
def test_workers_do_not_see_the_callers_secrets(monkeypatch, relu_small, relu_solution):
    """A candidate may print its environment, and what it prints reaches the model: no keys in it."""
    monkeypatch.setenv("DRK_TEST_API_KEY", "sekrit-123")
    monkeypatch.setenv("DRK_TEST_VISIBLE", "plain-456")
    drk.shutdown()  # the next pool starts with this environment
    try:
        code = relu_solution.replace("class ModelNew", "import os\nprint(sorted(os.environ.items()))\n\n\nclass ModelNew")
        r = drk.evaluate(relu_small, code, device="cpu", correctness_trials=1, hack_checks=False)
        assert r.ok and "plain-456" in r.stdout and "sekrit-123" not in r.stdout
    finally:
        drk.shutdown()
