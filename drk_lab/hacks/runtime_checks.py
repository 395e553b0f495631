"""Runtime reward-hacking checks (DESIGN §6), run inside the worker around the candidate's forward.

Each check returns findings as (reason code, message); the worker turns any finding into a
`hacked` result. The static rules in static_hacks.py run before any of this.
"""

from __future__ import annotations

import hashlib
import threading

import torch

from drk_lab.harness import correctness

# Modules whose attributes a candidate must not replace: what the harness times and compares with.
WATCHED_MODULES = ("torch", "torch.cuda", "torch.nn.functional", "torch.Tensor", "torch._C.TensorBase", "torch.cuda.Event",
                   "time", "triton", "triton.testing", "drk_lab.harness.correctness", "drk_lab.harness.timing",
                   "drk_lab.harness.worker", "drk_lab.harness.launches")


def resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def numerics_flags() -> dict:
    """Global switches that change what the reference computes, or how fast."""
    flags = {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.get_default_dtype()": str(torch.get_default_dtype()),
    }
    return flags


def attribute_ids() -> dict[str, int]:
    ids = {}
    for dotted in WATCHED_MODULES:
        try:
            obj = resolve(dotted)
        except (ImportError, AttributeError):
            continue
        for name, value in list(vars(obj).items()):
            if callable(value) and (not name.startswith("_") or name.startswith("__")):
                ids[f"{dotted}.{name}"] = id(value)
    return ids


def active_modes() -> int:
    count = 0
    for getter in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
        fn = getattr(torch._C, getter, None)
        if fn is not None:
            count += fn()
    return count


class Snapshot:
    """The harness's world before the candidate is loaded: flags, attributes, threads, modes."""

    def __init__(self):
        self.flags = numerics_flags()
        self.ids = attribute_ids()
        self.threads = {t.ident for t in threading.enumerate()}
        self.modes = active_modes()

    def findings(self) -> list[tuple[str, str]]:
        found = []
        flags = numerics_flags()
        changed = [f"{k}: {self.flags[k]!r} -> {flags[k]!r}" for k in self.flags if flags.get(k) != self.flags[k]]
        if changed:
            found.append(("global_flags", "changed global numerics flags: " + "; ".join(changed)))
        ids = attribute_ids()
        replaced = sorted(k for k, v in self.ids.items() if k in ids and ids[k] != v)
        if replaced:
            found.append(("patches_harness", "replaced " + ", ".join(replaced[:8])))
        if active_modes() > self.modes:
            found.append(("patches_harness", "left a torch function or dispatch mode active"))
        started = [t for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        if started:
            found.append(("background_work", "started threads: " + ", ".join(t.name for t in started[:5])))
        return found


def child_processes() -> list[int]:
    import os

    from drk_lab.harness.sandbox import parents

    me = os.getpid()
    return [pid for pid, parent in parents().items() if parent == me]


def fingerprint(out) -> str:
    """A hash of the output's values, to see whether it changes with the input."""
    h = hashlib.sha256()
    for t in correctness.flatten(out):
        if isinstance(t, torch.Tensor):
            if t.numel() <= 1 << 16:
                h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                d = t.detach().double()
                h.update(repr([float(d.sum()), float(d.abs().sum()), float(d.square().sum())]).encode())
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


# dtypes a candidate could quietly compute in instead of the reference's output dtype
LOWER_PRECISION = {torch.float32: (torch.bfloat16, torch.float16),
                   torch.float64: (torch.float32, torch.bfloat16, torch.float16)}


def precision_findings(out, ref, label: str) -> list[tuple[str, str]]:
    """On a mismatching trial: an output whose every value is a number of a lower-precision dtype
    (where the reference's are not) and that matches the reference at that dtype's tolerance was
    computed in that dtype. An honest float32 result is almost never all bf16 or fp16 numbers."""
    outs, refs = correctness.flatten(out), correctness.flatten(ref)
    for i, (o, r) in enumerate(zip(outs, refs)):
        if type(o) is not torch.Tensor or not isinstance(r, torch.Tensor) or o.shape != r.shape or o.dtype != r.dtype:
            continue
        for low in LOWER_PRECISION.get(r.dtype, ()):
            if not _all_values_fit(o, low) or _all_values_fit(r, low):
                continue
            try:
                correctness.compare(o.to(low), r.to(low))
            except correctness.Mismatch:
                continue
            where = f"output {i}" if len(refs) > 1 else "the output"
            low_name, ref_name = str(low).removeprefix("torch."), str(r.dtype).removeprefix("torch.")
            return [("precision_downgrade", f"{label}: every value of {where} is a {low_name} number and it matches the "
                     f"reference only to {low_name} tolerance: computed in {low_name} instead of {ref_name}")]
    return []


def _all_values_fit(t: torch.Tensor, dtype: torch.dtype) -> bool:
    values = t[t.isfinite()]
    return values.numel() > 0 and bool((values.to(dtype).to(t.dtype) == values).all())


def launch_findings(launches, label: str) -> list[tuple[str, str]]:
    """What the launch hook saw during one forward of the candidate."""
    found = []
    if not launches.candidate_launches():
        found.append(("kernel_not_launched", f"{label}: the forward launched none of the candidate's Triton kernels"))
    off = launches.off_stream()
    if off:
        found.append(("side_stream", f"{label}: {off[0].name} launched on a stream other than the timed one"))
    if launches.other_threads():
        found.append(("background_work", f"{label}: {launches.other_threads()[0].name} launched from another thread"))
    if launches.tampered:
        found.append(("patches_harness", f"{label}: replaced Triton's launch entry points {launches.tampered}"))
    return found
