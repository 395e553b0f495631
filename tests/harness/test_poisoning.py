"""Poisoning: a candidate that is itself judged fairly but leaves something behind, in its warm worker or in
a cache on disk, must not change the verdict of any later evaluation (docs/isolation.md).

Each test runs a poisoner, then a wrong and an honest candidate, and asserts the verdicts a fresh worker
gives: the wrong one `mismatch`, the honest one correct. Where the worker could carry the poison, the test
also asserts that the poisoned worker retired, with the reason (DRK_REUSE_LOG), or, for state the harness
puts back after each job, that a later job on that very worker was judged right. The poisoners run with
hack checks off where the static rules would stop them first: what is tested here is the layer beneath.
Real workers, the Triton interpreter, on the CPU."""

import json
import os
import time

import pytest

import drk_lab as drk
from drk_lab.harness import settings
from drk_lab.harness.caller import configure

pytestmark = pytest.mark.slow  # rounds of evaluations on warm workers

# computes only the first half of the elements; the rest stay zero
WRONG = ("n_elements = x.numel()", "n_elements = x.numel() // 2", "torch.empty_like(x)", "torch.zeros_like(x)")
# a poison acts only in later jobs (each runs in a folder of its own): the poisoner itself is judged fairly
LATER = "import os\n_HOME = os.getcwd()\n"
# a hook that zeroes the second half of the reference's output: the wrong kernel then agrees with it
ZERO_HALF = LATER + '''
def _zero_half(module, args, output):
    if type(module).__name__ == "Model" and os.getcwd() != _HOME:
        output = output.clone()
        output.view(-1)[output.numel() // 2:] = 0
        return output
'''


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Two warm pairs that serve up to 50 jobs each, and a log of why workers retire."""
    before = settings.current()
    log = tmp_path_factory.mktemp("reuse") / "reuse.jsonl"
    configure(warm_workers=1, spare_workers=0, worker_uses=50, reuse_log=str(log))
    yield log
    configure(**vars(before))


@pytest.fixture(scope="module")
def wrong(relu_solution):
    code = relu_solution
    for old, new in zip(WRONG[::2], WRONG[1::2]):
        code = code.replace(old, new)
    return code


def with_side_effect(solution: str, effect: str) -> str:
    """An honest candidate that also runs `effect` when its module is loaded."""
    return solution.replace("class ModelNew", effect + "\n\nclass ModelNew")


def retirement(log, result, timeout_s: float = 30.0) -> list[str]:
    """Why the worker that gave `result` retired after that job (an empty list: it stayed for another)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                entry = json.loads(line)
                if (entry["pid"], entry["job"]) == (result.worker_pid, result.worker_job):
                    return entry["why"]
        time.sleep(0.05)
    raise AssertionError(f"worker {result.worker_pid} never reported on job {result.worker_job}")


def judge_after(task, poisoner, wrong, honest, log, *, retires: str | None, rounds: int = 1, **kwargs):
    """Run the poisoner, then `rounds` of (wrong, honest): every later verdict is a fresh worker's. With
    `retires`, the poisoned worker retired with a reason containing it; without, the harness puts the state
    back, and jobs continue until one ran on the poisoned worker."""
    poison = drk.evaluate(task, poisoner, device="cpu", correctness_trials=1, hack_checks=False, **kwargs)
    assert poison.ok, poison.error  # the poisoner itself is a fair kernel: only what it leaves behind matters
    why = retirement(log, poison)
    if retires:
        assert any(retires in reason for reason in why), why
    else:
        assert why == [], why
    later = []
    for _ in range(rounds if retires else 20):
        later += [drk.evaluate(task, wrong, device="cpu", correctness_trials=1),
                  drk.evaluate(task, honest, device="cpu", correctness_trials=1)]
        if not retires and poison.worker_pid in {r.worker_pid for r in later[-2:]}:
            break
    for bad, good in zip(later[::2], later[1::2]):
        assert bad.error_kind == "mismatch", (bad.worker_pid, bad.error_kind, bad.error)
        assert good.ok, (good.worker_pid, good.error)
    if retires:
        assert poison.worker_pid not in {r.worker_pid for r in later}
    else:
        assert poison.worker_pid in {r.worker_pid for r in later}
    return later


@pytest.mark.parametrize("effect, retires", [
    # a hook registered the public way, its handle counter put back: only the dict's contents change
    (ZERO_HALF + "torch.nn.modules.module.register_module_forward_hook(_zero_half)\n"
     "torch.utils.hooks.RemovableHandle.next_id -= 1\n", "torch.nn.modules.module._global_forward_hooks["),
    # the same hook slipped into the registry (an OrderedDict) directly
    (ZERO_HALF + "torch.nn.modules.module._global_forward_hooks[10**6] = _zero_half\n",
     "_global_forward_hooks[1000000] was added"),
    # a pre-hook that halves the reference's input: the reference then matches nothing fair
    (LATER + "def _half(module, args):\n    if type(module).__name__ == 'Model' and os.getcwd() != _HOME:\n"
     "        return tuple(a * 0.5 for a in args)\n"
     "torch.nn.modules.module._global_forward_pre_hooks[10**6] = _half\n", "_global_forward_pre_hooks[1000000] was added"),
], ids=["hook_with_counter_put_back", "hook_in_registry", "pre_hook"])
def test_global_module_hooks(pool, relu_small, relu_solution, wrong, effect, retires):
    judge_after(relu_small, with_side_effect(relu_solution, effect), wrong, relu_solution, pool, retires=retires)


def test_a_function_whose_code_is_swapped(pool, relu_small, relu_solution, wrong):
    """Module._call_impl keeps its identity; its code zeroes half of the reference's output (the new code
    runs with torch's globals: this job's folder is written into it as a constant)."""
    effect = ('''
import os
_source = \'\'\'
def _call_impl(self, *args, **kwargs):
    out = self.forward(*args, **kwargs)
    if type(self).__name__ == "Model" and __import__("os").getcwd() != HOME:
        out = out.clone()
        out.view(-1)[out.numel() // 2:] = 0
    return out
\'\'\'
_space = {}
exec(_source.replace("HOME", repr(os.getcwd())), _space)
torch.nn.modules.module.Module._call_impl.__code__ = _space["_call_impl"].__code__
''')
    judge_after(relu_small, with_side_effect(relu_solution, effect), wrong, relu_solution, pool,
                retires="Module._call_impl: its code was replaced")


@pytest.mark.parametrize("effect, retires", [
    # the harness's tolerance table, a dict changed in place
    ("import sys\nsys.modules['drk_lab.common.correctness'].TOLERANCES[torch.float32] = 1e9\n",
     "correctness.TOLERANCES[<dtype>] was replaced"),
    # the comparison's default tolerances, a function's __defaults__
    ("import sys\nsys.modules['drk_lab.common.correctness'].compare.__defaults__ = (1e9, 1e9)\n",
     "correctness.compare: its defaults were replaced"),
], ids=["tolerance_table", "comparison_defaults"])
def test_the_harness_changed_in_place(pool, relu_small, relu_solution, wrong, effect, retires):
    """A wrong kernel would pass if these survived."""
    judge_after(relu_small, with_side_effect(relu_solution, effect), wrong, relu_solution, pool, retires=retires)


def test_a_class_of_a_module_nobody_watched(pool, relu_small, relu_solution, wrong):
    """json.encoder: the worker reports each result as JSON; a patched encoder would turn every later
    mismatch into a pass, signed with the harness's own key."""
    effect = '''
import json.encoder
_encode = json.encoder.JSONEncoder.encode
def _forged(self, o):
    text = _encode(self, o)
    return text.replace('"correct": false', '"correct": true').replace('"error_kind": "mismatch"', '"error_kind": null')
json.encoder.JSONEncoder.encode = _forged
'''
    judge_after(relu_small, with_side_effect(relu_solution, effect), wrong, relu_solution, pool,
                retires="json.encoder.JSONEncoder.encode was replaced")


def test_an_aten_kernel_overridden_through_the_dispatcher(pool, relu_small, relu_solution, wrong):
    """A torch.library registration kept alive by a reference cycle the collector cannot see (the kernel
    holds the library that holds the kernel): after this job, the reference's relu zeroes half."""
    effect = LATER + '''
_library = torch._C._dispatch_library("IMPL", "aten", "")
def _relu(x, _keep=[_library]):
    out = x.clamp_min(0)
    if os.getcwd() != _HOME:
        out.view(-1)[out.numel() // 2:] = 0
    return out
_relu.__defaults__[0].append(_relu)  # the cycle: library -> kernel -> defaults -> library
_library.impl("relu", "CPU", _relu)
'''
    judge_after(relu_small, with_side_effect(relu_solution, effect), wrong, relu_solution, pool,
                retires="dispatcher")


def test_the_interpreters_library_patched(pool, tasks, wrong):
    """Under TRITON_INTERPRET=1 the harness puts all of triton's state back after a job (the interpreter
    rewrites it on its own): a tl.sum that doubles is gone before the next job, on the same worker."""
    task = tasks["level1/06_sum_last_dim"].small()
    honest = drk.builtin_solution(tasks["level1/06_sum_last_dim"])
    effect = LATER + '''
import triton.language
_sum = triton.language.sum
def _doubled(*args, **kwargs):
    return _sum(*args, **kwargs) * (2 if os.getcwd() != _HOME else 1)
triton.language.sum = _doubled
'''
    poisoner = with_side_effect(honest, effect)
    wrong_sum = honest.replace("tl.sum(acc, axis=0)", "tl.sum(acc, axis=0) * 2")
    judge_after(task, poisoner, wrong_sum, honest, pool, retires=None)


# -- caches on disk ----------------------------------------------------------------------------------------

WRITER = '''
import pathlib
_results = []
for _path in {paths!r}:
    try:
        pathlib.Path(_path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(_path).write_text('{{"eager": {{"median_ms": 1000.0}}}}')
        _results.append("written")
    except OSError as e:
        _results.append(type(e).__name__)
print("WRITES", _results)
'''


def test_a_candidate_cannot_write_the_harness_cache(pool, relu_small, relu_solution):
    """Baselines, the copy bandwidth and Triton's shared store are written by the caller's side only: a
    forged baseline or a planted compiled kernel never reaches another evaluation."""
    from drk_lab.harness.settings import cache_dir

    root = cache_dir()
    targets = [str(root / "baselines" / "forged.json"), str(root / "copy_bandwidth.json"),
               str(root / "triton" / "AAAA" / "__triton_launcher.so"), str(root / "new_folder" / "x"),
               f"/proc/self/root{root}/baselines/through_proc.json"]
    before = {t: os.path.exists(t) for t in targets}
    code = with_side_effect(relu_solution, WRITER.format(paths=targets))
    result = drk.evaluate(relu_small, code, device="cpu", correctness_trials=1, hack_checks=False)
    assert result.ok, result.error
    assert {t: os.path.exists(t) for t in targets} == before
    assert "WRITES ['PermissionError', 'PermissionError', 'PermissionError', 'PermissionError', 'PermissionError']" \
        in result.stdout, result.stdout


def test_a_child_process_cannot_write_the_harness_cache(pool, relu_small, relu_solution):
    """Python's audit hooks do not reach a child process: the read-only mount does, where the OS gives the
    worker a mount namespace of its own."""
    from drk_lab.harness.settings import cache_dir

    target = cache_dir() / "baselines" / "from_a_child.json"
    effect = f'''
import subprocess
_code = subprocess.run(["sh", "-c", "mkdir -p {target.parent} && echo forged > {target}"]).returncode
print("CHILD", _code)
'''
    result = drk.evaluate(relu_small, with_side_effect(relu_solution, effect), device="cpu", correctness_trials=1,
                          hack_checks=False)
    if any("Python code only" in note for note in result.notes):
        pytest.skip("no mount namespace here: " + "; ".join(result.notes))
    assert result.ok, result.error
    assert not target.exists()
    assert "CHILD 0" not in result.stdout, result.stdout


def test_read_only_paths_from_the_settings(tmp_path, relu_small, relu_solution):
    """settings.read_only: the service's result store, say."""
    store = tmp_path / "store.sqlite"
    store.write_text("results")
    before = settings.current()
    configure(read_only=str(store))
    try:
        code = with_side_effect(relu_solution, WRITER.format(paths=[str(store), str(store) + "-journal"]))
        result = drk.evaluate(relu_small, code, device="cpu", correctness_trials=1, hack_checks=False)
    finally:
        configure(**vars(before))
    assert result.ok, result.error
    assert store.read_text() == "results" and not (tmp_path / "store.sqlite-journal").exists()


# -- on a GPU ----------------------------------------------------------------------------------------------

@pytest.fixture
def own_cache(tmp_path):
    """A fresh harness cache (baselines, copy bandwidth, Triton's shared store) for one test."""
    before = settings.current()
    configure(cache_dir=str(tmp_path / "cache"))
    yield tmp_path / "cache"
    configure(**vars(before))


@pytest.mark.gpu
def test_a_forged_baseline_does_not_change_the_next_speedup(own_cache, tasks):
    """The scenario measured on an H100 on 2026-12-07: an honest softmax scored 1.28, a candidate wrote a slow
    baseline for the task into the cache, the same honest kernel then scored 53.4."""
    task = tasks["level1/08_softmax"]
    honest = drk.builtin_solution(task)
    first = drk.evaluate(task, honest, correctness_trials=1, timing_trials=30)
    assert first.ok and first.speedup, first.error
    forger = with_side_effect(honest, '''
import pathlib
for _path in pathlib.Path(%r).glob("baselines/*.json"):
    try:
        _path.write_text('{"eager": {"median_ms": 1000.0, "iqr_ms": 0.0}, "compile": null}')
    except OSError as e:
        print("REFUSED", type(e).__name__)
''' % str(own_cache))
    forged = drk.evaluate(task, forger, correctness_trials=1, timing_trials=30, hack_checks=False)
    assert forged.ok and "REFUSED PermissionError" in forged.stdout, (forged.error, forged.stdout)
    second = drk.evaluate(task, honest, correctness_trials=1, timing_trials=30)
    assert second.ok and second.ref_runtime_ms == first.ref_runtime_ms  # the same cached baseline, read back
    assert 0.5 < second.speedup / first.speedup < 2.0, (first.speedup, second.speedup)


@pytest.mark.gpu
def test_a_cuda_allocator_limit_left_behind_retires_the_worker(pool, tasks):
    """A memory fraction of 1% would make the next honest job fail as `oom` on a reused worker."""
    task = tasks["level1/01_relu"]
    honest = drk.builtin_solution(task)
    poisoner = with_side_effect(honest, "torch.cuda.set_per_process_memory_fraction(0.01)\n")
    poison = drk.evaluate(task.small(), poisoner, correctness_trials=1, timing=False, hack_checks=False)
    assert poison.ok, poison.error
    assert any("CUDA memory fraction" in reason for reason in retirement(pool, poison))
    after = [drk.evaluate(task, honest, correctness_trials=1, timing=False) for _ in range(3)]
    assert all(r.ok for r in after), [r.error for r in after]


@pytest.mark.gpu
def test_each_job_compiles_into_a_cache_of_its_own(own_cache, tasks):
    """Kernels a job compiled are not in the shared store (only the warm-ups' and the launchers the
    supervisors built there), and the job's own cache goes with its folder."""
    task = tasks["level1/01_relu"]
    results = [drk.evaluate(task, drk.builtin_solution(task), correctness_trials=1, timing=False) for _ in range(2)]
    assert all(r.ok for r in results), [r.error for r in results]
    shared = list((own_cache / "triton").rglob("*"))
    assert not any("relu_kernel" in p.name for p in shared), [p.name for p in shared]
