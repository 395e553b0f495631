"""Optional Nsight Compute metrics for the candidate's kernels: DRAM throughput and achieved occupancy.

ncu runs a small standalone script (written into the evaluation's folder) that loads the candidate,
runs one warm-up forward outside the profiled range, then one forward between cudaProfilerStart and
cudaProfilerStop; ncu profiles only the candidate's kernels inside that range.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

from drk_lab.harness.profiler import candidate_matcher, short_name

NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}

SCRIPT_NAME = "ncu_forward.py"

_SCRIPT = '''\
"""Written by drk_lab.harness.ncu: one profiled forward of ModelNew for Nsight Compute."""
import importlib.util
import sys

import torch


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


device = torch.device({device!r})
ref = load("reference", "reference.py")
cand = load("candidate", "candidate.py")
torch.manual_seed({seed})
with torch.device(device):
    model = cand.ModelNew(*ref.get_init_inputs())
torch.manual_seed({seed})
with torch.device(device):
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
cuda = device.type == "cuda"
with torch.no_grad():
    for _ in range({warmup}):
        model(*inputs)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
    model(*inputs)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
print("ncu_forward: done")
'''


def write_ncu_script(folder, seed: int = 0, warmup: int = 1, device: str = "cuda") -> Path:
    """The script expects reference.py and candidate.py beside it (the worker's folder)."""
    path = Path(folder) / SCRIPT_NAME
    path.write_text(_SCRIPT.format(device=device, seed=int(seed), warmup=int(warmup)))
    return path


def ncu_command(script, kernel_names, ncu: str = "ncu", python: str = sys.executable) -> list[str]:
    names = "|".join(re.escape(n) for n in sorted(kernel_names))
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--kernel-name", f"regex:^({names})(_[0-9][A-Za-z0-9_]*)?$",
            "--metrics", ",".join(NCU_METRICS), "--csv", python, str(script)]


def _number(text: str) -> float | None:
    text = text.strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):  # thousands separators: 1,234.5
        text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str, candidate_names=None) -> dict[str, dict]:
    """ncu --csv output (its own ==PROF== lines and the program's output may be mixed in) ->
    {kernel: {dram_throughput_pct, achieved_occupancy_pct, launches}}, values averaged over the
    profiled launches of that kernel. With candidate_names, names are mapped back to them (a
    suffixed `k_0d1d` counts as `k`) and other kernels are dropped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return {}
    rows = csv.reader(line for line in lines[start:] if line.startswith('"'))
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    need = ("ID", "Kernel Name", "Metric Name", "Metric Value")
    if any(n not in col for n in need):
        return {}
    matcher = candidate_matcher(candidate_names) if candidate_names is not None else None
    values: dict[str, dict[str, list[float]]] = {}
    launches: dict[str, set] = {}
    for row in rows:
        if len(row) < len(header):
            continue
        metric = NCU_METRICS.get(row[col["Metric Name"]])
        value = _number(row[col["Metric Value"]])
        if metric is None or value is None:
            continue
        name = short_name(row[col["Kernel Name"]])
        if candidate_names is not None:
            m = matcher.match(name) if matcher else None
            if not m:
                continue
            name = m.group("name")
        values.setdefault(name, {}).setdefault(metric, []).append(value)
        launches.setdefault(name, set()).add(row[col["ID"]])
    out = {}
    for name, metrics in values.items():
        out[name] = {key: (sum(metrics[key]) / len(metrics[key]) if key in metrics else None)
                     for key in NCU_METRICS.values()}
        out[name]["launches"] = len(launches[name])
    return out


def ncu_metrics(folder, kernel_names, seed: int = 0, timeout_s: float = 600.0, ncu: str | None = None,
                python: str = sys.executable) -> dict:
    """{"kernels": {name: metrics} | None, "reason": why None}. Runs the candidate in a new process
    under ncu; call it while holding the GPU exclusively (ncu replays each kernel several times)."""
    exe = ncu or shutil.which("ncu")
    if not exe:
        return {"kernels": None, "reason": "Nsight Compute (ncu) is not on PATH"}
    if not kernel_names:
        return {"kernels": None, "reason": "no candidate kernel was launched"}
    script = write_ncu_script(folder, seed)
    cmd = ncu_command(script, kernel_names, exe, python)
    try:
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"kernels": None, "reason": f"ncu took longer than {timeout_s:g} s"}
    except OSError as e:
        return {"kernels": None, "reason": f"ncu could not start: {e}"}
    kernels = parse_ncu_csv(proc.stdout, kernel_names)
    if kernels:
        return {"kernels": kernels, "reason": None}
    both = proc.stdout + proc.stderr
    if "ERR_NVGPUCTRPERM" in both:
        reason = "no permission to read GPU performance counters (ERR_NVGPUCTRPERM)"
    else:
        reason = f"ncu exited {proc.returncode} without metrics: {both.strip()[-500:]}"
    return {"kernels": None, "reason": reason}
