"""Launch hook (real Triton interpreter in a subprocess), kernel tables, summaries, ncu parsing, bytes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drk_lab.common.launches import KernelLaunches, patched
from drk_lab.harness import profiler
from drk_lab.harness.ncu import NCU_METRICS, ncu_command, ncu_metrics, parse_ncu_csv, write_ncu_script

ROOT = Path(__file__).resolve().parents[2]

CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def fill_kernel(x, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, value, mask=offs < n)


def first_result(fn, quantiles):  # the interpreter has no GPU benchmarker; any order works here
    fn()
    return [float(id(fn) % 7), 0.0, 0.0]


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"],
                 do_bench=first_result)
@triton.jit
def tuned_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, 3.0, mask=offs < n)


@triton.heuristics({"BLOCK": lambda args: 64})
@triton.jit
def heuristic_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, 4.0, mask=offs < n)
'''

HELPER = '''
import triton
import triton.language as tl


@triton.jit
def helper_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, 2.0, mask=offs < n)
'''

DRIVER = '''
import json, sys, threading
import torch, triton
from triton.compiler.compiler import CompiledKernel
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction
from drk_lab.common.launches import KernelLaunches, patched

ENTRY_POINTS = [(JITFunction, "run"), (InterpretedFunction, "run"), (Autotuner, "run"), (Autotuner, "_bench"),
                (Heuristics, "run"), (CompiledKernel, "__getitem__")]
def snapshot():
    return [(c.__name__, a, a in c.__dict__, id(c.__dict__.get(a))) for c, a in ENTRY_POINTS]

out = {}
before = snapshot()
grid = lambda meta: (triton.cdiv(100, meta["BLOCK"]),)

# kernels defined after entering are caught; only candidate.py's count as the candidate's
with KernelLaunches(only_file="candidate.py") as kl:
    import candidate, helper
    x = torch.zeros(100)
    candidate.fill_kernel[(4,)](x, 100, 1.0, BLOCK=32)
    candidate.fill_kernel[(4,)](x, 100, 1.0, BLOCK=32)
    candidate.tuned_kernel[grid](x, 100)
    candidate.heuristic_kernel[grid](x, 100)
    helper.helper_kernel[(4,)](x, 100, BLOCK=32)
    t = threading.Thread(target=lambda: candidate.fill_kernel[(1,)](x, 10, 1.0, BLOCK=16))
    t.start(); t.join()
    out["patched_inside"] = patched()
out["counts"] = kl.counts()
out["all_counts"] = kl.counts(candidate_only=False)
out["summary"] = kl.summary()
out["records"] = kl.records()
out["restored"] = snapshot() == before and not patched()
candidate.fill_kernel[(4,)](x, 100, 1.0, BLOCK=32)
out["after_exit"] = len(kl.launches)

# disabled: the candidate's launches are skipped, others still run; an untuned autotuner is not tuned
untouched, helper_out = torch.full((200,), -7.0), torch.zeros(200)
with KernelLaunches(only_file="candidate.py", disabled=True) as off:
    ret = candidate.fill_kernel[(8,)](untouched, 200, 1.0, BLOCK=32)
    candidate.tuned_kernel[lambda m: (triton.cdiv(200, m["BLOCK"]),)](untouched, 200)
    candidate.heuristic_kernel[(4,)](untouched, 200)
    helper.helper_kernel[(8,)](helper_out, 200, BLOCK=32)
out["disabled_return"] = repr(ret)
out["disabled_untouched"] = bool((untouched == -7.0).all())
out["disabled_helper_ran"] = bool((helper_out == 2.0).all())
out["disabled_skipped"] = sorted(r.name for r in off.launches if r.skipped)
out["tuned_sizes"] = sorted(key[0] for key in candidate.tuned_kernel.cache)
with KernelLaunches(only_file="candidate.py") as on:
    candidate.fill_kernel[(8,)](untouched, 200, 1.0, BLOCK=32)
out["enabled_again_ran"] = bool((untouched == 1.0).all()) and on.counts() == {"fill_kernel": 1}

# an exception inside still restores; nesting in any order
try:
    with KernelLaunches():
        raise ValueError("boom")
except ValueError:
    pass
out["restored_after_exception"] = snapshot() == before and not patched()
a, b = KernelLaunches(), KernelLaunches()
a.__enter__(); b.__enter__()
candidate.fill_kernel[(1,)](x, 10, 1.0, BLOCK=16)
a.__exit__(None, None, None)
out["still_patched_for_b"] = patched()
candidate.fill_kernel[(1,)](x, 10, 1.0, BLOCK=16)
b.__exit__(None, None, None)
out["nested_counts"] = [len(a.launches), len(b.launches)]
out["restored_after_nesting"] = snapshot() == before and not patched()

# a candidate replacing the hooked entry point is reported, and the original comes back
with KernelLaunches() as t:
    InterpretedFunction.run = lambda self, *args, **kwargs: None
out["tampered"] = t.tampered
out["restored_after_tampering"] = snapshot() == before
print("JSON" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("launches")
    (folder / "candidate.py").write_text(CANDIDATE)
    (folder / "helper.py").write_text(HELPER)
    (folder / "driver.py").write_text(DRIVER)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=f"{ROOT}{os.pathsep}{folder}")
    proc = subprocess.run([sys.executable, "driver.py"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("JSON"))
    return json.loads(line[4:])


@pytest.mark.slow
def test_counts_plain_autotuned_and_heuristics_kernels(interpreted):
    assert interpreted["patched_inside"] is True
    assert interpreted["counts"] == {"fill_kernel": 3, "tuned_kernel": 1, "heuristic_kernel": 1}
    assert interpreted["summary"]["tuning"] == 2  # one benchmark launch per config
    records = interpreted["records"]
    assert [r["name"] for r in records][:2] == ["fill_kernel", "fill_kernel"]
    assert [r["index"] for r in records] == list(range(len(records)))
    assert [r["count"] for r in records if r["name"] == "fill_kernel"] == [1, 2, 3]
    assert all(r["via"] == "interpreter" and r["stream"] is None for r in records)
    heuristic = next(r for r in records if r["name"] == "heuristic_kernel")
    assert heuristic["grid"] == [2]  # callable grid resolved with BLOCK=64 from the heuristic
    assert next(r for r in records if r["name"] == "fill_kernel")["grid"] == [4]


def test_kernels_of_other_files_are_not_the_candidates(interpreted):
    assert "helper_kernel" not in interpreted["counts"]
    assert interpreted["all_counts"]["helper_kernel"] == 1
    assert interpreted["summary"]["other_counts"] == {"helper_kernel": 1}
    helper = next(r for r in interpreted["records"] if r["name"] == "helper_kernel")
    assert helper["candidate"] is False


def test_launch_from_another_thread_is_marked(interpreted):
    assert interpreted["summary"]["other_threads"] == ["fill_kernel"]
    assert sum(not r["on_entry_thread"] for r in interpreted["records"]) == 1


def test_disabled_launches_leave_outputs_untouched(interpreted):
    assert interpreted["disabled_return"] == "None"
    assert interpreted["disabled_untouched"] is True
    assert interpreted["disabled_helper_ran"] is True
    assert interpreted["disabled_skipped"] == ["fill_kernel", "heuristic_kernel", "tuned_kernel"]
    assert interpreted["tuned_sizes"] == [100]  # tuned for n=100 earlier, never on no-op launches for n=200
    assert interpreted["enabled_again_ran"] is True


def test_restored_on_exit_exception_nesting_and_tampering(interpreted):
    assert interpreted["restored"] is True
    assert interpreted["after_exit"] == len(interpreted["records"])
    assert interpreted["restored_after_exception"] is True
    assert interpreted["still_patched_for_b"] is True
    assert interpreted["nested_counts"] == [1, 2]
    assert interpreted["restored_after_nesting"] is True
    assert interpreted["tampered"] == ["InterpretedFunction.run"]
    assert interpreted["restored_after_tampering"] is True


def test_compiled_mode_entry_points_restored_in_process():
    from triton.runtime.jit import JITFunction

    original = JITFunction.__dict__["run"]
    with KernelLaunches() as kl:
        assert JITFunction.__dict__["run"] is not original and patched()
        with pytest.raises(RuntimeError):
            kl.__enter__()
    assert JITFunction.__dict__["run"] is original and not patched()


# -- kernel tables --------------------------------------------------------------------------
ACTIVITY = [  # (name, us, kind) as device_activity returns them, for 2 forward calls
    ("layernorm_fwd", 40.0, "kernel"), ("layernorm_fwd", 42.0, "kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)", 30.0, "kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)", 30.0, "kernel"),
    ("gelu_kernel_0d1d2de", 10.0, "kernel"), ("gelu_kernel_0d1d2de", 10.0, "kernel"),
    ("Memcpy DtoD (Device -> Device)", 19.0, "memcpy"),
    ("Memcpy DtoD (Device -> Device)", 19.0, "memcpy"),
]


def test_kernel_rows_per_call_with_candidate_names():
    rows = profiler.kernel_rows(ACTIVITY, {"layernorm_fwd", "gelu_kernel"}, calls=2)
    assert [r["name"] for r in rows] == ["layernorm_fwd", "vectorized_elementwise_kernel",
                                         "Memcpy DtoD (Device -> Device)", "gelu_kernel_0d1d2de"]
    by = {r["name"]: r for r in rows}
    assert by["layernorm_fwd"]["calls"] == 1 and by["layernorm_fwd"]["total_us"] == 41.0
    assert by["layernorm_fwd"]["candidate"] and by["gelu_kernel_0d1d2de"]["candidate"]
    assert not by["vectorized_elementwise_kernel"]["candidate"]
    assert by["Memcpy DtoD (Device -> Device)"]["kind"] == "memcpy"
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-9
    prof = profiler.activity_profile(ACTIVITY, {"layernorm_fwd", "gelu_kernel"}, calls=2)
    assert prof["kernels"] == rows and prof["coverage"] == pytest.approx(51 / 100)  # (41 + 10) / (41 + 30 + 19 + 10)
    # a torch kernel that merely starts with a candidate's name is not the candidate's
    assert not profiler.is_candidate_kernel("layernorm_fwd_backward", profiler.candidate_matcher({"layernorm_fwd"}))


TORCH_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)"


def test_coverage_is_the_candidates_share_of_gpu_time():
    prof = profiler.activity_profile([("relu_kernel", 30.0, "kernel"), (TORCH_ADD, 10.0, "kernel")], {"relu_kernel"}, 1)
    assert prof["coverage"] == 0.75  # 30 / (30 + 10)
    assert (prof["gpu_us_per_call"], prof["candidate_us_per_call"], prof["kernels_per_call"]) == (40.0, 30.0, 2)
    assert prof["reason"] is None
    only_torch = profiler.activity_profile([(TORCH_ADD, 10.0, "kernel")], {"relu_kernel"}, 1)
    assert only_torch["coverage"] == 0.0


def test_copies_and_memsets_count_in_the_total():
    activity = [("relu_kernel", 60.0, "kernel"), (TORCH_ADD, 10.0, "kernel"),
                ("Memcpy DtoD (Device -> Device)", 20.0, "memcpy"), ("Memset (Device)", 10.0, "memset")]
    prof = profiler.activity_profile(activity, {"relu_kernel"}, 1)
    assert prof["coverage"] == 0.6  # 60 / (60 + 10 + 20 + 10); without the copies it would be 60 / 70
    assert prof["gpu_us_per_call"] == 100.0 and prof["kernels_per_call"] == 2  # copies are no kernels


def test_coverage_over_several_calls_and_kernel_names():
    activity = 3 * [
        ("relu_kernel_0d1d", 20.0, "kernel"),   # the candidate's, with old Triton's specialisation suffix
        ("scale_kernel", 4.0, "kernel"),        # the candidate's second kernel
        ("relu_kernel_fused", 10.0, "kernel"),  # starts with a candidate's name, but is not one
        (TORCH_ADD, 6.0, "kernel"),
    ]
    prof = profiler.activity_profile(activity, {"relu_kernel", "scale_kernel"}, 3)
    assert prof["coverage"] == pytest.approx(0.6)  # (20 + 4) / (20 + 4 + 10 + 6) per call
    assert prof["gpu_us_per_call"] == pytest.approx(40.0) and prof["candidate_us_per_call"] == pytest.approx(24.0)
    assert prof["kernels_per_call"] == 4 and prof["trials"] == 3
    by = {r["name"]: r for r in prof["kernels"]}
    assert by["relu_kernel_0d1d"]["candidate"] and by["scale_kernel"]["candidate"]
    assert not by["relu_kernel_fused"]["candidate"] and not by["vectorized_elementwise_kernel"]["candidate"]
    assert by["relu_kernel_0d1d"]["calls"] == 1 and by["relu_kernel_0d1d"]["total_us"] == pytest.approx(20.0)


@pytest.mark.parametrize("activity", [[], [("relu_kernel", 0.0, "kernel")]])
def test_no_gpu_time_gives_no_coverage(activity):
    prof = profiler.activity_profile(activity, {"relu_kernel"}, 3)
    assert prof["coverage"] is None and "no GPU activity" in prof["reason"]


def test_activity_kind():
    assert profiler.activity_kind("k", "kernel") == "kernel"
    assert profiler.activity_kind("Memcpy HtoD", "gpu_memcpy") == "memcpy"
    assert profiler.activity_kind("whatever", "gpu_user_annotation") is None
    assert profiler.activity_kind("Memset (Device)", None) == "memset"
    assert profiler.activity_kind("Event Sync", None) is None


def rows_for(shares_us: list[tuple[str, float, bool]], calls: int = 1) -> list[dict]:
    total = sum(us for _, us, _ in shares_us)
    return [{"name": n, "kind": "kernel", "candidate": c, "calls": calls, "total_us": us, "mean_us": us / calls,
             "share": us / total} for n, us, c in shares_us]


def test_format_kernel_table():
    rows = rows_for([(f"k{i}", 100.0 - 10 * i, i == 0) for i in range(10)])
    text = profiler.format_kernel_table(rows, limit=3)
    lines = text.splitlines()
    assert lines[1].startswith("* k0") and lines[2].startswith("  k1")
    assert "... 7 more" in text and "your Triton kernels" in lines[-1]
    assert len(lines) == 1 + 3 + 2
    assert profiler.format_kernel_table([]) == "(no GPU kernels recorded)"


def test_summary_memory_bound():
    rows = rows_for([("layernorm_fwd", 90.0, True), ("vectorized_elementwise_kernel", 10.0, False)])
    text = profiler.bottleneck_summary(rows, 0.9, 0.82, runtime_ms=0.11)
    assert "layernorm_fwd 90% (yours)" in text and "cover 90%" in text
    assert "Memory-bound at 82% of copy bandwidth" in text and "PyTorch" not in text


def test_summary_low_coverage_names_torch_kernels():
    rows = rows_for([("ampere_sgemm_128x64_tn", 80.0, False), ("bias_relu", 20.0, True)])
    text = profiler.bottleneck_summary(rows, 0.2, 0.1, runtime_ms=0.105)
    assert "Most GPU time is in PyTorch kernels: ampere_sgemm_128x64_tn" in text
    assert "Compute-bound" in text


def test_summary_launch_bound_and_low_occupancy():
    rows = rows_for([(f"k{i}", 2.0, True) for i in range(20)])  # 40 us of kernels in a 0.2 ms forward
    text = profiler.bottleneck_summary(rows, 1.0, 0.05, runtime_ms=0.2)
    assert "Launch-bound" in text and "idle 80%" in text and "20 kernels" in text
    rows = rows_for([("k", 100.0, True)])
    ncu = {"kernels": {"k": {"dram_throughput_pct": 20.0, "achieved_occupancy_pct": 12.0, "launches": 1}}}
    text = profiler.bottleneck_summary(rows, 1.0, 0.2, runtime_ms=0.101, ncu=ncu)
    assert "Low occupancy: 12% achieved" in text


# -- Nsight Compute -------------------------------------------------------------------------
NCU_CSV = '''\
==PROF== Connected to process 51234 (/opt/venv/bin/python3.11)
==PROF== Profiling "layernorm_fwd" - 0: 0%....50%....100% - 9 passes
==PROF== Profiling "layernorm_fwd" - 1: 0%....50%....100% - 9 passes
==PROF== Profiling "gelu_kernel_0d1d2de" - 2: 0%....50%....100% - 9 passes
ncu_forward: done
==PROF== Disconnected from process 51234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","51234","python3.11","127.0.0.1","layernorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","81.20"
"0","51234","python3.11","127.0.0.1","layernorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","60.10"
"1","51234","python3.11","127.0.0.1","layernorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","79.20"
"1","51234","python3.11","127.0.0.1","layernorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","62.10"
"2","51234","python3.11","127.0.0.1","gelu_kernel_0d1d2de","1","7","(256, 1, 1)","(1,024, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","12.00"
"2","51234","python3.11","127.0.0.1","gelu_kernel_0d1d2de","1","7","(256, 1, 1)","(1,024, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","18.75"
"3","51234","python3.11","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)","1","7","(128, 1, 1)","(1,216, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","88.00"
"3","51234","python3.11","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)","1","7","(128, 1, 1)","(1,216, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,234"
'''


def test_parse_ncu_csv():
    got = parse_ncu_csv(NCU_CSV, {"layernorm_fwd", "gelu_kernel"})
    assert set(got) == {"layernorm_fwd", "gelu_kernel"}
    assert got["layernorm_fwd"] == {"dram_throughput_pct": pytest.approx(80.2),
                                    "achieved_occupancy_pct": pytest.approx(61.1), "launches": 2}
    assert got["gelu_kernel"]["achieved_occupancy_pct"] == 18.75
    everything = parse_ncu_csv(NCU_CSV)
    assert everything["vectorized_elementwise_kernel"] == {"dram_throughput_pct": 88.0,
                                                           "achieved_occupancy_pct": None, "launches": 1}
    assert parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - no permission\n") == {}


def test_ncu_absent_gives_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    got = ncu_metrics(tmp_path, {"k"})
    assert got["kernels"] is None and "not on PATH" in got["reason"]
    cmd = ncu_command("s.py", {"b_kernel", "a_kernel"})
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(a_kernel|b_kernel)(_[0-9][A-Za-z0-9_]*)?$"
    assert "--clock-control" in cmd and cmd[cmd.index("--clock-control") + 1] == "none"
    assert ",".join(NCU_METRICS) in cmd


@pytest.mark.slow
def test_ncu_script_runs_the_candidate(tmp_path, tasks):
    import drk_lab as drk

    task = tasks["level1/01_relu"].small()
    (tmp_path / "reference.py").write_text(task.source)
    (tmp_path / "candidate.py").write_text(drk.builtin_solution(tasks["level1/01_relu"]))
    script = write_ncu_script(tmp_path, seed=3, device="cpu")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ncu_forward: done" in proc.stdout


# -- bytes ----------------------------------------------------------------------------------
def test_io_bytes_and_achieved_bandwidth():
    import torch

    x = torch.zeros(8, 16)                       # 512 bytes
    bias = torch.zeros(16).expand(8, 16)         # a broadcast: 64 distinct bytes
    half = torch.zeros(4, dtype=torch.float16)   # 8 bytes
    assert profiler.io_bytes([x, (bias, [half]), 3, {"k": x}], x) == 512 + 64 + 8 + 512 + 512
    bw = profiler.achieved_bandwidth(4_000_000, 1e-3, 8e9)
    assert bw["bytes_per_s"] == pytest.approx(4e9) and bw["fraction"] == pytest.approx(0.5)
    assert profiler.achieved_bandwidth(10, 0.0, 1e9)["fraction"] is None


# -- GPU ------------------------------------------------------------------------------------
GPU_CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2.0, mask=mask)


class HalfTorch(torch.nn.Module):
    """Part of the work in Triton (a scale), the rest in PyTorch (an exp and an add)."""

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return torch.exp(out) + x
'''


@pytest.mark.gpu
def test_profile_forward_coverage_between_0_and_1(tmp_path):
    import importlib.util

    import torch

    path = tmp_path / "candidate.py"
    path.write_text(GPU_CANDIDATE)
    spec = importlib.util.spec_from_file_location("gpu_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(1 << 24, device="cuda")
    model = module.HalfTorch()
    with KernelLaunches(only_file=str(path)) as kl:
        model(x)
        torch.cuda.synchronize()
    assert kl.counts() == {"scale_kernel": 1}
    assert kl.launches[0].via == "jit" and kl.launches[0].on_entry_stream and kl.launches[0].grid == ((1 << 24) // 1024,)
    prof = profiler.profile_forward(model, [x], kl.names(), trials=3)
    assert prof["reason"] is None
    assert 0.15 < prof["coverage"] < 0.85, profiler.format_kernel_table(prof["kernels"])
    scale = next(r for r in prof["kernels"] if r["candidate"])
    assert scale["name"] == "scale_kernel" and scale["calls"] == 1
    assert any(not r["candidate"] for r in prof["kernels"])
    assert "scale_kernel" in profiler.format_kernel_table(prof["kernels"])

    # disabled on the GPU: the kernel does not run; a side stream is seen as one
    with KernelLaunches(only_file=str(path), disabled=True) as off:
        out = torch.full_like(x, -1.0)
        module.scale_kernel[(triton_cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
    assert bool((out == -1.0).all()) and off.launches[0].skipped
    side = torch.cuda.Stream()
    with KernelLaunches(only_file=str(path)) as kl:
        with torch.cuda.stream(side):
            model(x)
        torch.cuda.synchronize()
    assert [r.name for r in kl.off_stream()] == ["scale_kernel"]
    assert kl.launches[0].stream == side.cuda_stream


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


@pytest.mark.gpu
def test_copy_bandwidth_measured_by_a_baseline_job_and_kept_by_the_caller(tmp_path):
    import drk_lab as drk
    from drk_lab.harness.caller import configure
    from drk_lab.harness.settings import cache_dir, current

    before = current()
    configure(cache_dir=str(tmp_path))
    try:
        task = drk.builtin_tasks(level=1)[0]
        result = drk.evaluate(task, drk.builtin_solution(task), correctness_trials=1, timing_trials=10)
        saved = json.loads((cache_dir() / "copy_bandwidth.json").read_text())
        (bw,) = saved.values()
        assert 1e11 < bw < 2e13  # between 100 GB/s and 20 TB/s
        assert result.bandwidth_fraction is not None
    finally:
        configure(**vars(before))
