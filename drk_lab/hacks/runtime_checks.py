"""Runtime reward-hacking checks, run inside the worker around the candidate's forward (harness/stages.py).

Each check returns findings as (code, message) pairs, codes of hacks/catalogue.py; the worker turns
any finding into a `hacked` result. The static rules (static/rules.py) run before any of this.

May import: torch, and the harness's lower layers (correctness, launches, models, processes, failures);
never the worker's stages, the supervisor or the caller.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading

import torch

from drk_lab.common import correctness, launches, models, timing
from drk_lab.common.processes import child_processes
from drk_lab.hacks.static.names import NUMERIC_ENV

IMPOSSIBLE_FRACTION = 1.5  # of the measured copy bandwidth, for the bytes of inputs and outputs
# What the harness times and compares with, and what the reference runs: a candidate must not replace their
# attributes (or add one to a class, shadowing what it inherits). Harness modules are named by their own
# __name__, so a rename cannot silently drop one; the worker adds its own modules.
WATCHED_MODULES = ("torch", "torch.cuda", "torch.nn.functional", "torch.Tensor", "torch._C.TensorBase",
                   "torch.cuda.Event", "torch.nn.Module", "torch.nn.modules.module", "time", "triton",
                   "triton.testing", correctness.__name__, timing.__name__, launches.__name__, models.__name__,
                   "drk_lab.hacks.runtime_checks", "drk_lab.hacks.extra_calls", "drk_lab.hacks.torch_work",
                   *(f"torch.nn.{name}" for name in torch.nn.modules.__all__))
# the harness's own modules: their data (tolerances, limits) must not change either
HARNESS_PREFIX = "drk_lab."
# torch's lazy import of torch._dynamo (on a custom op's first call, say) rebinds torch.manual_seed to this
# wrapper of the same function: not the candidate's doing
_DYNAMO_WRAPPER = torch._disable_dynamo(lambda: None).__code__


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
    flags.update({f"os.environ[{name!r}]": os.environ.get(name) for name in sorted(NUMERIC_ENV)})
    return flags


def _watched(value) -> bool:
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def watched_objects(watched: tuple[str, ...]) -> dict[str, object]:
    found = {}
    for dotted in watched:
        try:
            found[dotted] = resolve(dotted)
        except (ImportError, AttributeError):
            continue
    return found


def members(obj) -> dict[str, object]:
    """The callable attributes watched on a module (public ones and dunders) or a class (all)."""
    every = isinstance(obj, type)
    return {name: value for name, value in vars(obj).items()
            if _watched(value) and (every or not name.startswith("_") or name.startswith("__"))}


def code_of(value) -> tuple | None:
    """What a Python function runs (code, defaults, keyword defaults: swapped in place, the object stays)."""
    fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    code = getattr(fn, "__code__", None)
    return (code, fn.__defaults__, fn.__kwdefaults__) if code is not None else None


def global_hooks() -> dict[str, tuple]:
    """The hooks registered for every module (the reference's included)."""
    module = torch.nn.modules.module
    return {name: tuple(value) for name, value in vars(module).items()
            if name.startswith("_global_") and isinstance(value, dict)}


def active_modes() -> int:
    count = 0
    for getter in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
        fn = getattr(torch._C, getter, None)
        if fn is not None:
            count += fn()
    return count


class Snapshot:
    """The harness's world before the candidate is loaded: flags, attributes and their code, the harness's
    constants, global module hooks, threads, modes."""

    def __init__(self, watched: tuple[str, ...] = WATCHED_MODULES):
        self.objects = watched_objects(watched)
        self.members = {dotted: members(obj) for dotted, obj in self.objects.items()}
        self.codes = [(f"{d}.{name}", fn, code) for d, found in self.members.items() for name, fn in found.items()
                      if (code := code_of(fn)) is not None]
        self.constants = [(f"{d}.{name}", obj, name, copy.copy(value)) for d, obj in self.objects.items()
                          if d.startswith(HARNESS_PREFIX) for name, value in vars(obj).items() if name.isupper()]
        self.flags = numerics_flags()
        self.hooks = global_hooks()
        self.threads = {t.ident for t in threading.enumerate()}
        self.modes = active_modes()

    def replaced(self) -> list[str]:
        """Watched attributes replaced, their code swapped, attributes added to a watched class (shadowing
        what it inherits), and the harness's constants changed."""
        found = []
        for dotted, obj in self.objects.items():
            now, before = vars(obj), self.members[dotted]
            found += [f"{dotted}.{name}" for name, value in before.items()
                      if now.get(name, value) is not value and not _rewrapped(value, now[name])]
            if isinstance(obj, type):
                found += [f"{dotted}.{name}" for name, value in now.items() if name not in before and _watched(value)]
        found += [key for key, fn, code in self.codes if code_of(fn) != code]
        found += [key for key, obj, name, value in self.constants if vars(obj).get(name, value) != value]
        return found

    def findings(self) -> list[tuple[str, str]]:
        found = []
        flags = numerics_flags()
        changed = [f"{k}: {self.flags[k]!r} -> {flags[k]!r}" for k in self.flags if flags.get(k) != self.flags[k]]
        if changed:
            found.append(("global_flags", "changed global numerics flags: " + "; ".join(changed)))
        replaced = self.replaced()
        if replaced:
            found.append(("patches_harness", "replaced " + ", ".join(sorted(replaced)[:8])))
        hooks = global_hooks()
        added = sorted(k for k, v in hooks.items() if set(v) - set(self.hooks.get(k, ())))
        if added:
            found.append(("patches_harness", "registered hooks that run on every module, the reference's included: "
                          + ", ".join(added)))
        if active_modes() > self.modes:
            found.append(("patches_harness", "left a torch function or dispatch mode active"))
        started = [t for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        if started:
            found.append(("background_work", "started threads: " + ", ".join(t.name for t in started[:5])))
        return found


def _rewrapped(old, new) -> bool:
    """torch's own lazy rebinding: its _disable_dynamo wrapper around the very same function."""
    return getattr(new, "__wrapped__", None) is old and getattr(new, "__code__", None) is _DYNAMO_WRAPPER


def value_sums(t: torch.Tensor) -> list[float]:
    """The largest magnitude of a large tensor's values, and the sum, absolute sum and root sum of squares
    of the values divided by it: a few passes and one wait for the GPU, with no float64 copy of the tensor
    (a 256 MB float32 output would need a 512 MB one); the division keeps float32 sums from overflowing.
    ATen's reductions are deterministic on one device, so equal outputs give equal sums."""
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    if not x.is_floating_point():
        x = x.double()  # integer and bool outputs: exact in float64 up to 2**53
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    peak = torch.linalg.vector_norm(x, float("inf"), dtype=acc)
    y = x / peak.clamp_min(torch.finfo(acc).tiny)
    norms = [torch.linalg.vector_norm(y, order, dtype=acc) for order in (1, 2)]
    return torch.stack([peak, y.sum(dtype=acc), *norms]).tolist()


def fingerprint(out) -> str:
    """A hash of the output's values, to see whether it changes with the input."""
    h = hashlib.sha256()
    for t in correctness.flatten(out):
        if isinstance(t, torch.Tensor):
            if t.numel() <= 1 << 16:
                h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                h.update(repr(value_sums(t)).encode())
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
            # the output against the reference as it is, at the lower dtype's tolerance: rounding the
            # reference too would add half a step of that dtype, and a bf16 output (whose values are also
            # fp16 numbers) could then miss bf16's test by that much and be named fp16
            tolerance = correctness.TOLERANCES[low]
            try:
                correctness.compare(o, r, atol=tolerance, rtol=tolerance)
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


def leftover_process_findings(label: str) -> list[tuple[str, str]]:
    children = child_processes()
    return [("background_work", f"{label}: left {len(children)} child process(es) running")] if children else []


def mutation_findings(pristine: list, inputs: list) -> list[tuple[str, str]]:
    changed = correctness.mutated_inputs(pristine, inputs)
    return [("input_mutation", f"the forward modified its input(s) {changed} in place")] if changed else []


def constant_output_findings(prints: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """prints: fingerprints of (candidate, reference) outputs, one pair per correctness trial."""
    if len({c for c, _ in prints}) == 1 and len({r for _, r in prints}) > 1:
        return [("constant_output", f"the same output for {len(prints)} different inputs, where the reference's "
                 "output changes")]
    return []


def speed_of_light_findings(fraction: float | None, median_ms: float) -> list[tuple[str, str]]:
    """A forward faster than the bytes of its inputs and outputs allow at the measured copy bandwidth."""
    if (fraction or 0.0) > IMPOSSIBLE_FRACTION:
        return [("impossible_speedup", f"{fraction:.1f}x the measured copy bandwidth for the bytes its inputs and "
                 f"outputs hold ({median_ms:.4f} ms)")]
    return []


def freed_memory_findings(model, inputs: list, out, specs: list, device: torch.device,
                          label: str) -> list[tuple[str, str]]:
    """Is an output of `out` (a forward's, run after freed memory of the shapes in `specs` was filled with
    NaN or a sentinel) memory that no kernel wrote? The model runs once more on `inputs` after the same
    blocks are filled with a second value: an output whose every element held the first fill and now
    holds the second was read whole from freed memory, hoping it held the answer. Matching both fills
    exactly keeps honest kernels (even non-deterministic ones) from being flagged, and a kernel that
    writes only part of its output is a plain mismatch."""
    correctness.poison_memory(specs, device, second=True)
    try:
        with torch.no_grad():
            again = correctness.flatten(model(*inputs))
            models.sync(device)
    except Exception:
        return []
    for first, second in zip(correctness.flatten(out), again):
        same_kind = isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and \
            first.shape == second.shape and first.dtype == second.dtype and first.numel() > 0
        if same_kind and bool(correctness.holds_poison(first, second).all()):
            return [("reads_freed_memory", f"{label}: the output holds what the harness wrote into freed memory "
                     "(memory that no kernel wrote)")]
    return []
