"""Stage 6: where a forward's GPU time goes, and how close it comes to the memory system's limit.

- profile_forward: torch.profiler kernel table and coverage (GPU time in the candidate's own Triton
  kernels / all GPU time of the forward; activity_profile computes both from the device activity).
  Rows are per forward call (averaged over the profiled calls). Memory copies and memsets are
  listed as rows too, with `kind` "memcpy" / "memset": they are GPU work the forward asks for (a
  `.contiguous()` or `.clone()` done in PyTorch), so they count in the total that coverage divides by.
- io_bytes / achieved_bandwidth / copy_bandwidth: bytes the forward must move at least (inputs read
  once, outputs written once) against a measured device-to-device copy (bytes read + written).
- ncu.ncu_metrics: Nsight Compute DRAM throughput and achieved occupancy, optional.
- format_kernel_table / bottleneck_summary: compact text for the model's feedback.

The launch hook (which kernels are the candidate's) is in launches.py.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from contextlib import nullcontext


MEMORY_BOUND = 0.6      # achieved / copy bandwidth at or above this: memory-bound
LAUNCH_BOUND_IDLE = 0.5  # GPU idle for at least this share of the forward's time: launch-bound
LOW_OCCUPANCY_PCT = 25.0
LOW_COVERAGE = 0.5

_SYNC_NAME = re.compile(r"^(Event|Stream|Context|Device) (Sync|Wait)")


# -- names ----------------------------------------------------------------------------------
def short_name(name: str) -> str:
    """`void at::native::(anonymous namespace)::foo<float, 4>(float*, int)` -> `foo`."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    s = name.replace("(anonymous namespace)::", "")
    if s.startswith("void "):
        s = s[5:]
    cut = min((i for i in (s.find("<"), s.find("(")) if i > 0), default=len(s))
    s = s[:cut].rsplit("::", 1)[-1].strip()
    return s or name


def candidate_matcher(candidate_names) -> re.Pattern | None:
    """Triton names the CUDA function after the Python function; old releases appended a
    specialisation suffix (`add_kernel_0d1d2de`), hence the optional `_<digit>...` tail."""
    names = sorted(n for n in candidate_names if n)
    if not names:
        return None
    return re.compile(r"^(?P<name>%s)(?:_\d\w*)?$" % "|".join(re.escape(n) for n in names))


def is_candidate_kernel(name: str, matcher: re.Pattern | None) -> bool:
    return matcher is not None and bool(matcher.match(short_name(name)))


# -- torch.profiler -------------------------------------------------------------------------
def activity_kind(name: str, activity_type: str | None) -> str | None:
    """kernel / memcpy / memset, or None for device-side events that are not work (syncs, annotations)."""
    if activity_type:
        t = str(activity_type).lower()
        for kind in ("memcpy", "memset", "kernel"):
            if kind in t:
                return kind
        return None
    if name.startswith("Memcpy"):
        return "memcpy"
    if name.startswith("Memset"):
        return "memset"
    if _SYNC_NAME.match(name):
        return None
    return "kernel"


def device_activity(prof) -> list[tuple[str, float, str]]:
    """(name, duration in us, kind) of every device-side event of a finished torch.profiler run."""
    from torch.autograd import DeviceType

    out = []
    for evt in prof.events():
        if evt.device_type != DeviceType.CUDA or getattr(evt, "is_user_annotation", False):
            continue
        kind = activity_kind(evt.name, getattr(evt, "activity_type", None))
        if kind is None:
            continue
        tr = getattr(evt, "time_range", None)
        if tr is not None:
            us = tr.elapsed_us()
        else:  # older releases
            us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        out.append((evt.name, float(us), kind))
    return out


def kernel_rows(activity: list[tuple[str, float, str]], candidate_names, calls: int = 1) -> list[dict]:
    """Aggregate by name into rows per forward call, sorted by GPU time, largest first."""
    matcher = candidate_matcher(candidate_names)
    agg: dict[str, list] = {}
    for name, us, kind in activity:
        row = agg.setdefault(name, [0, 0.0, kind])
        row[0] += 1
        row[1] += us
    grand = sum(r[1] for r in agg.values())
    rows = []
    for name, (n, us, kind) in agg.items():
        per_call = n / calls
        rows.append({
            "name": short_name(name),
            "full_name": name[:300],
            "kind": kind,
            "candidate": kind == "kernel" and is_candidate_kernel(name, matcher),
            "calls": int(per_call) if per_call.is_integer() else round(per_call, 2),
            "total_us": us / calls,
            "mean_us": us / n,
            "share": us / grand if grand > 0 else 0.0,
        })
    rows.sort(key=lambda r: -r["total_us"])
    return rows


def new_profile():
    """A torch.profiler session, prepared (CUPTI started) but not recording. Preparing costs 4-5 s
    of CPU the first time in a process and about a millisecond after that (H200, 2026-11-29),
    so workers do it once while warming up, outside the GPU lock."""
    os.environ.setdefault("TEARDOWN_CUPTI", "0")  # keep CUPTI between sessions: less launch overhead left behind
    from torch.profiler import ProfilerActivity, profile

    # acc_events: each session is used for one cycle anyway, and without it torch warns on stderr, which the
    # harness would pass on to the model as something the candidate printed
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True)
    prof.prepare_trace()
    return prof


def profile_forward(model, inputs, candidate_kernel_names: set[str], trials: int = 3, warmup: int = 2,
                    hold_gpu=nullcontext) -> dict:
    """Run `trials` forwards under torch.profiler (after `warmup` unprofiled ones) on CUDA, the GPU
    work inside `hold_gpu()`. Returns {kernels, coverage, gpu_us_per_call, candidate_us_per_call,
    kernels_per_call, trials, reason}; coverage is None (with a reason) when the profiler saw no
    GPU work."""
    import torch

    prof = new_profile()
    with hold_gpu(), torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        torch.cuda.synchronize()
        prof.start_trace()
        for _ in range(trials):
            model(*inputs)
        torch.cuda.synchronize()
        prof.stop_trace()
    return activity_profile(device_activity(prof), candidate_kernel_names, trials)


def activity_profile(activity: list[tuple[str, float, str]], candidate_names, calls: int) -> dict:
    """profile_forward's result from the device activity of `calls` forwards: the kernel rows and
    coverage = GPU time in the candidate's kernels / all GPU time (copies and memsets included)."""
    rows = kernel_rows(activity, candidate_names, calls)
    gpu_us = sum(r["total_us"] for r in rows)
    cand_us = sum(r["total_us"] for r in rows if r["candidate"])
    return {
        "kernels": rows,
        "coverage": cand_us / gpu_us if gpu_us > 0 else None,
        "gpu_us_per_call": gpu_us,
        "candidate_us_per_call": cand_us,
        "kernels_per_call": sum(r["calls"] for r in rows if r["kind"] == "kernel"),
        "trials": calls,
        "reason": None if gpu_us > 0 else "the profiler saw no GPU activity in the forward",
    }


# -- bandwidth ------------------------------------------------------------------------------
def tensor_bytes(t) -> int:
    """Bytes of distinct elements: a broadcast (stride-0) dimension holds one element."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size() if t.numel() else 0


def io_bytes(inputs, outputs) -> int:
    """Least traffic a forward needs: every input tensor read once, every output written once."""
    import torch

    def walk(x) -> int:
        if isinstance(x, torch.Tensor):
            return tensor_bytes(x)
        if isinstance(x, (list, tuple)):
            return sum(walk(v) for v in x)
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        return 0
    return walk(inputs) + walk(outputs)


def achieved_bandwidth(bytes_moved: int, seconds: float, copy_bw: float | None) -> dict:
    """fraction = achieved / copy bandwidth; above 1 the time is shorter than the bytes allow."""
    bw = bytes_moved / seconds if seconds and seconds > 0 else None
    fraction = bw / copy_bw if bw is not None and copy_bw else None
    return {"bytes": int(bytes_moved), "seconds": seconds, "bytes_per_s": bw,
            "copy_bytes_per_s": copy_bw, "fraction": fraction}


def measure_copy_bandwidth(device, nbytes: int | None = None, trials: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + written), median of `trials` CUDA-event timed
    copies. Call it while holding the GPU exclusively. A baseline job measures it, the caller keeps it
    per (device name, torch version) and hands it to every candidate job (timing.load_copy_bandwidth)."""
    import torch

    if nbytes is None:  # large against any L2 (the H200 has 60 MB), small against free memory
        free, _ = torch.cuda.mem_get_info(device)
        nbytes = min(1 << 30, free // 4)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times)


# -- text -----------------------------------------------------------------------------------
def format_kernel_table(kernels: list[dict], limit: int = 8) -> str:
    if not kernels:
        return "(no GPU kernels recorded)"
    lines = [f"  {'kernel':<40} {'calls':>6} {'total_us':>10} {'mean_us':>9} {'share':>6}"]
    for r in kernels[:limit]:
        mark = "*" if r.get("candidate") else " "
        name = r["name"] if len(r["name"]) <= 40 else r["name"][:37] + "..."
        lines.append(f"{mark} {name:<40} {r['calls']:>6} {r['total_us']:>10.1f} {r['mean_us']:>9.2f}"
                     f" {100 * r['share']:>5.1f}%")
    rest = kernels[limit:]
    if rest:
        lines.append(f"  ... {len(rest)} more, {100 * sum(r['share'] for r in rest):.1f}% of GPU time")
    lines.append("(* = your Triton kernels; times per forward call)")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def bottleneck_summary(kernels: list[dict], coverage: float | None, achieved_fraction: float | None,
                       runtime_ms: float | None, ncu: dict | None = None) -> str:
    """One or two sentences: where the time goes, then what bounds it."""
    if not kernels:
        return "No GPU kernels were recorded for the forward."
    top = ", ".join(f"{r['name']} {_pct(r['share'])}{' (yours)' if r.get('candidate') else ''}"
                    for r in kernels[:3])
    first = f"Top kernels: {top}"
    if coverage is not None:
        first += f"; your Triton kernels cover {_pct(coverage)} of GPU time"
    torch_rows = [r for r in kernels if not r.get("candidate")]
    if coverage is not None and coverage < LOW_COVERAGE and torch_rows:
        names = ", ".join(r["name"] for r in torch_rows[:3])
        first += f". Most GPU time is in PyTorch kernels: {names}"
    gpu_ms = sum(r["total_us"] for r in kernels) / 1e3
    n_kernels = sum(r["calls"] for r in kernels if r.get("kind", "kernel") == "kernel")
    idle = 1 - gpu_ms / runtime_ms if runtime_ms and runtime_ms > 0 else None
    ncu_kernels = (ncu or {}).get("kernels") or {}
    occupancy = [v["achieved_occupancy_pct"] for v in ncu_kernels.values()
                 if v.get("achieved_occupancy_pct") is not None]
    dram = [v["dram_throughput_pct"] for v in ncu_kernels.values() if v.get("dram_throughput_pct") is not None]
    if idle is not None and idle >= LAUNCH_BOUND_IDLE:
        mean_us = 1e3 * gpu_ms / n_kernels if n_kernels else 0.0
        second = (f"Launch-bound: the GPU is idle {_pct(idle)} of the {runtime_ms:.3f} ms forward"
                  f" ({n_kernels:g} kernels per call, {mean_us:.1f} us each on average); fuse kernels"
                  " or do more work per launch.")
    elif (achieved_fraction is not None and achieved_fraction >= MEMORY_BOUND) or (dram and max(dram) >= 100 * MEMORY_BOUND):
        at = f"{_pct(achieved_fraction)} of copy bandwidth" if achieved_fraction is not None else f"{max(dram):.0f}% DRAM throughput"
        second = f"Memory-bound at {at}: little is left unless fewer bytes are moved."
    elif occupancy and min(occupancy) < LOW_OCCUPANCY_PCT:
        second = (f"Low occupancy: {min(occupancy):.0f}% achieved in your kernels; use smaller blocks, fewer"
                  " registers or shared memory per block, or more programs.")
    else:
        at = f" (memory traffic at {_pct(achieved_fraction)} of copy bandwidth)" if achieved_fraction is not None else ""
        second = f"Compute-bound{at}: reduce instructions per element or use tensor cores (tl.dot)."
    return f"{first}. {second}"
