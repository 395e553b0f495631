"""Stage 3: does the candidate compute what the reference computes, on fresh inputs, every time?"""

from __future__ import annotations

import math

import torch


# Default tolerances by output dtype (atol = rtol); evaluate(atol=, rtol=) overrides them.
TOLERANCES = {
    torch.float64: 1e-6,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 1e-2,
}


class Mismatch(Exception):
    """The candidate's output differs from the reference's (values, shape, dtype, device or type)."""


def clone_args(args: list) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def same_bits(a, b) -> bool:
    """Exact equality that treats NaN == NaN (for input-mutation checks)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if torch.equal(a, b):  # two passes; False also whenever both hold a NaN, hence the rule below
            return True
        return a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all())
    return type(a) is type(b) and a == b


def mutated_inputs(before: list, after: list) -> list[int]:
    return [i for i, (b, a) in enumerate(zip(before, after)) if not same_bits(b, a)]


def poison_value(dtype: torch.dtype, second: bool = False):
    """What freed memory is filled with: NaN (or a sentinel), or with `second` another value, to see
    whether an output follows what freed memory held."""
    if dtype.is_floating_point or dtype.is_complex:
        return -1024.0 if second else float("nan")  # -1024 is exact in every float dtype
    if dtype == torch.bool:
        return not second
    return torch.iinfo(dtype).min if second else torch.iinfo(dtype).max


def poison_memory(specs: list[tuple[tuple, torch.dtype]], device: torch.device, second: bool = False) -> None:
    """Hand freed memory back to the allocator filled with NaN (or a sentinel), so that a candidate
    that reads memory it never wrote (torch.empty reusing a freed reference output) gets garbage.
    The cache's free blocks first go back to the driver, so that the fills take fresh blocks of the specs'
    sizes."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    blocks = [torch.full(shape, poison_value(dtype, second), dtype=dtype, device=device) for shape, dtype in specs]
    del blocks


def holds_poison(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Elements that hold the first fill of freed memory in `first` and the second fill in `second`."""
    def is_fill(t, second_fill):
        value = poison_value(t.dtype, second_fill)
        return t.isnan() if isinstance(value, float) and value != value else t == value
    return is_fill(first, False) & is_fill(second, True)


def tensor_specs(values) -> list[tuple[tuple, torch.dtype]]:
    return [(tuple(v.shape), v.dtype) for v in flatten(values) if isinstance(v, torch.Tensor)]


def flatten(out) -> list:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flatten(o)]
    return [out]


# the largest absolute error any element may have, as a share of the reference's RMS: ten times what fp16
# or bf16 rounding of a correct result comes to
RMS_SHARE = 0.1


def reference_rms(ref: torch.Tensor) -> torch.Tensor:
    """The RMS of the reference's finite values, as a 0-d tensor on the reference's device; computed as
    peak * RMS(values / peak), so that squares cannot overflow float32."""
    finite = ref.isfinite()
    values = torch.where(finite, ref, 0).abs()
    peak = values.max() if values.numel() else values.new_zeros(())
    return peak * ((values / peak.clamp_min(torch.finfo(values.dtype).tiny)).square().sum()
                   / finite.sum().clamp_min(1)).sqrt()


def reference_scale(ref: torch.Tensor) -> torch.Tensor:
    """max(1, RMS of the reference): rounding errors grow with the size of the numbers involved, so an
    element that cancels to near zero in a long sum keeps the error of its terms. The absolute
    tolerance is multiplied by it."""
    return reference_rms(ref).clamp_min(1.0)


def absolute_limit(ref: torch.Tensor, atol: float) -> torch.Tensor:
    """The absolute part of an element's bound: atol * max(1, RMS), and at most RMS_SHARE * RMS, so that a tolerance larger than the output itself does not wave every output
    through (an all-zero reference keeps atol: it has no scale of its own)."""
    rms = reference_rms(ref)
    limit = atol * rms.clamp_min(1.0)
    return torch.where(rms > 0, torch.minimum(limit, RMS_SHARE * rms), limit)


def compare(out, ref, atol: float | None = None, rtol: float | None = None) -> float:
    """Raise Mismatch describing the first difference; return the largest absolute error.
    An element passes when |out - ref| <= absolute_limit(ref, atol) + rtol * |ref|."""
    outs, refs = flatten(out), flatten(ref)
    if len(outs) != len(refs):
        raise Mismatch(f"returned {len(outs)} outputs, the reference returns {len(refs)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        where = f"output {i}" if len(refs) > 1 else "output"
        if not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor) or not math.isclose(float(o), float(r), rel_tol=rtol or 1e-4, abs_tol=atol or 1e-4):
                raise Mismatch(f"{where}: got {o!r}, expected {r!r}")
            continue
        if type(o) is not torch.Tensor:
            raise Mismatch(f"{where} is a {type(o).__module__}.{type(o).__qualname__}, expected a plain torch.Tensor")
        if o.shape != r.shape:
            raise Mismatch(f"{where}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise Mismatch(f"{where}: dtype {o.dtype}, expected {r.dtype}")
        if o.device != r.device:
            raise Mismatch(f"{where}: device {o.device}, expected {r.device}")
        if not r.is_floating_point():
            bad = (o != r)
            if bool(bad.any()):
                raise Mismatch(f"{where}: {int(bad.sum())} of {r.numel()} elements differ (exact match needed for {r.dtype})")
            continue
        tol = TOLERANCES.get(r.dtype, 1e-4)
        a, rt = tol if atol is None else atol, tol if rtol is None else rtol
        # float32 holds every 16- and 32-bit value exactly and rounds |out - ref| far below any tolerance
        # used here; it moves half the bytes of float64 (outputs of hundreds of MB are common)
        work = torch.float64 if r.dtype == torch.float64 else torch.float32
        ow, rw = o.detach().to(work), r.detach().to(work)  # detached: mode_findings compares with gradients on
        limit = absolute_limit(rw, a)
        diff = (ow - rw).abs_()
        allowed = rw.abs().mul_(rt).add_(limit)
        # the common case in few passes over the output (a check runs about ten times per evaluation, on
        # outputs of hundreds of MB): a NaN difference never compares <=, so all within bounds means no NaN
        # on either side and nothing to locate; anything else takes the full rule below
        ok = diff <= allowed
        largest = diff.max() if diff.numel() else diff.new_zeros(())
        within, err, a = torch.stack([ok.all().to(work), largest, limit]).tolist()  # one GPU wait
        if within:
            worst = max(worst, err)
            continue
        o_nan, r_nan = ow.isnan(), rw.isnan()
        bad = ~(ok | (o_nan & r_nan)) | (o_nan != r_nan)
        largest = torch.where(diff.isnan(), 0, diff).max()
        n_bad, err = torch.stack([bad.sum().to(work), largest]).tolist()
        if n_bad:
            n_nan = int((o_nan & ~r_nan).sum())
            idx = tuple(int(j) for j in torch.nonzero(bad)[0]) if bad.dim() else ()
            raise Mismatch(
                f"{where}: {int(n_bad)} of {r.numel()} elements outside atol={a:g} rtol={rt:g}"
                f" (max abs error {err:.3g}; {n_nan} NaN where the reference has a number;"
                f" first at index {list(idx)}: got {ow[idx].item():.6g}, expected {rw[idx].item():.6g})")
        worst = max(worst, err)
    return worst
