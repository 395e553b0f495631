"""Tolerances: scale-aware for long reductions, still strict for what the tolerance is for."""

import pytest
import torch

from drk_lab.common.correctness import Mismatch, compare, reference_scale


def test_a_cancelling_sum_keeps_the_rounding_error_of_its_terms():
    torch.manual_seed(0)
    x = 16 * torch.randn(64, 16384)
    x[0, -1] = -x[0, :-1].double().sum().float()  # row 0 sums to about zero; its terms do not
    ref = x.sum(-1)
    other_order = x.cumsum(-1)[:, -1]  # an honest fp32 sum in another order
    scale = float(reference_scale(ref))
    assert scale > 100
    compare(other_order, ref)  # passes: atol is scaled by the reference's RMS
    with pytest.raises(Mismatch, match="first at index \\[0\\]"):
        compare(other_order, ref, atol=1e-4 / scale)  # with a plain 1e-4 the cancelling row fails


def test_scale_does_not_excuse_real_errors():
    torch.manual_seed(0)
    x = torch.randn(64, 16384)
    ref = x.sum(-1)
    with pytest.raises(Mismatch):
        compare(x[:, 1:].sum(-1), ref)  # one term missing
    with pytest.raises(Mismatch):
        compare(x.bfloat16().float().sum(-1), ref)  # inputs rounded to bf16
    small = torch.rand(1000)
    assert float(reference_scale(small)) == 1.0
    with pytest.raises(Mismatch):
        compare(small + 2e-4, small)


# -- the bound, by hand ---------------------------------------------------------------------------
# The reference [8, 0, 0, 0] has RMS sqrt(64 / 4) = 4, so atol counts 4 times and an element passes
# when |out - ref| <= 4 * atol + rtol * |ref|: at the 8, 4 * atol + 8 * rtol; at a 0, 4 * atol.
REF = [8.0, 0.0, 0.0, 0.0]
CASES = [
    # dtype, atol, rtol, index, inside, outside
    (torch.float32, None, None, 0, 8.0011, 8.0013),  # defaults 1e-4: bound 4e-4 + 8e-4 = 1.2e-3
    (torch.float32, None, None, 2, -3.9e-4, 4.1e-4),  # bound 4e-4
    # defaults 1e-2: bound 0.04 + 0.08 = 0.12 at the 8, 0.04 at a 0; each dtype holds its values exactly
    (torch.float16, None, None, 0, 8.109375, 8.125),
    (torch.float16, None, None, 1, 0.0390625, 0.04296875),
    (torch.bfloat16, None, None, 0, 8.0625, 8.125),  # bf16 steps by 1/16 here
    (torch.bfloat16, None, None, 1, 0.0390625, 0.04296875),
    (torch.float32, 0.01, 0.1, 0, 8.83, 8.85),  # bound 0.04 + 0.8 = 0.84
    (torch.float32, 0.01, 0.1, 3, 0.039, -0.041),  # bound 0.04
    (torch.float32, 0.0, 0.1, 0, 7.21, 7.19),  # rtol alone: bound 0.8
    (torch.float32, 0.0, 0.1, 1, 0.0, 1e-30),  # rtol alone: a zero must be exact
]


def with_value(ref: torch.Tensor, index: int, value: float) -> torch.Tensor:
    out = ref.clone()
    out[index] = value
    assert out.double()[index].item() == pytest.approx(value, abs=1e-6)  # the dtype holds it, near enough
    return out


@pytest.mark.parametrize("dtype, atol, rtol, index, inside, outside", CASES,
                         ids=[f"{str(c[0])[6:]}-atol{c[1]}-rtol{c[2]}-at{c[3]}" for c in CASES])
def test_an_error_just_inside_passes_and_just_outside_fails(dtype, atol, rtol, index, inside, outside):
    ref = torch.tensor(REF, dtype=dtype)
    assert float(reference_scale(ref.float())) == 4.0
    err = compare(with_value(ref, index, inside), ref, atol, rtol)
    assert err == pytest.approx(abs(inside - REF[index]), rel=1e-3)  # the largest absolute error
    with pytest.raises(Mismatch, match=rf"output: 1 of 4 elements outside .* first at index \[{index}\]"):
        compare(with_value(ref, index, outside), ref, atol, rtol)


def test_rtol_is_what_lets_a_large_element_pass():
    ref = torch.tensor(REF)
    out = with_value(ref, 0, 8.5)  # error 0.5: far above 4 * atol = 0.04, within 0.04 + 8 * rtol = 0.84
    compare(out, ref, atol=0.01, rtol=0.1)
    with pytest.raises(Mismatch, match="atol=0.04 rtol=0"):
        compare(out, ref, atol=0.01, rtol=0.0)


@pytest.mark.parametrize("where", [(63, 32), (32, 16), (0, 32), (63, 0)])
def test_a_wrong_value_anywhere_is_found(where):
    ref = torch.arange(64 * 33, dtype=torch.float32).reshape(64, 33) / 1024
    out = ref.clone()
    out[where] += 0.5
    with pytest.raises(Mismatch, match=rf"1 of 2112 elements .* first at index \[{where[0]}, {where[1]}\]"):
        compare(out, ref)


def test_nan_where_the_reference_has_a_number_and_back():
    ref = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    assert compare(ref.clone(), ref) == 0.0  # NaN where the reference has NaN is right
    out = ref.clone()
    out[3] = float("nan")
    with pytest.raises(Mismatch, match=r"1 of 4 elements .*1 NaN where the reference has a number; .* index \[3\]"):
        compare(out, ref)
    out = ref.clone()
    out[2] = 3.0
    with pytest.raises(Mismatch, match=r"1 of 4 elements .*0 NaN where .* first at index \[2\]: got 3, expected nan"):
        compare(out, ref)


def test_shape_dtype_and_count_mismatches_are_named():
    ref = torch.zeros(3, 2)
    with pytest.raises(Mismatch, match=r"^output: shape \(2, 3\), expected \(3, 2\)$"):
        compare(torch.zeros(2, 3), ref)
    with pytest.raises(Mismatch, match=r"^output: dtype torch.float16, expected torch.float32$"):
        compare(torch.zeros(3, 2, dtype=torch.float16), ref)
    with pytest.raises(Mismatch, match=r"^returned 1 outputs, the reference returns 2$"):
        compare(ref, (ref, ref))
    with pytest.raises(Mismatch, match=r"^output 1: shape \(3,\), expected \(3, 2\)$"):
        compare((ref, torch.zeros(3)), (ref, ref))
    with pytest.raises(Mismatch, match=r"^output: 1 of 6 elements differ \(exact match needed for torch.int64\)$"):
        compare(torch.tensor([1, 2, 3, 4, 5, 7]), torch.tensor([1, 2, 3, 4, 5, 6]))


def test_scale_of_huge_and_of_non_finite_references():
    huge = torch.full((1000,), 3e30)  # its squares overflow float32: the scale must not become inf
    assert float(reference_scale(huge)) == pytest.approx(3e30, rel=1e-5)
    with pytest.raises(Mismatch):
        compare(huge * 1.01, huge)
    assert float(reference_scale(torch.tensor([float("nan"), float("inf")]))) == 1.0
    assert float(reference_scale(torch.tensor([float("nan"), 2.0, 2.0]))) == 2.0
    assert compare(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])) == 0.0


def rule(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> tuple[int, float]:
    """The element rule written out in float64, one element at a time: (elements outside, largest error)."""
    o, r = out.double().flatten().tolist(), ref.double().flatten().tolist()
    limit = atol * float(reference_scale(ref.float()))
    bad, largest = 0, 0.0
    for x, y in zip(o, r):
        if x != x and y != y:  # NaN where the reference has NaN
            continue
        diff = abs(x - y)
        if diff != diff or diff > limit + rtol * abs(y):
            bad += 1
        if diff == diff:
            largest = max(largest, diff)
    return bad, largest


@pytest.mark.parametrize("seed", range(6))
def test_the_quick_verdict_and_the_full_one_agree_with_the_rule(seed):
    """compare() decides most outputs in a few passes and falls back to the full check otherwise: on
    outputs with NaN, infinities, near-misses and clear errors, its verdict and largest error are the
    rule's."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(512, generator=g) * 3
    out = ref + torch.randn(512, generator=g) * 1e-5  # within 1e-4 * scale everywhere
    special = torch.randint(0, 512, (8,), generator=g)
    kind = seed % 3
    if kind == 1:  # NaN on both sides at the same places, and one infinity on each side
        ref[special[:4]] = float("nan")
        out[special[:4]] = float("nan")
        ref[special[4]], out[special[4]] = float("inf"), float("inf")
    elif kind == 2:  # a few real errors and a NaN where the reference has a number
        out[special[:3]] += 0.5
        out[special[3]] = float("nan")
    if seed >= 3:
        ref, out = ref.bfloat16(), out.bfloat16()
    atol = rtol = 1e-2 if seed >= 3 else 1e-4
    bad, largest = rule(out, ref, atol, rtol)
    if bad:
        with pytest.raises(Mismatch, match=rf"output: {bad} of 512 elements outside"):
            compare(out, ref, atol, rtol)
    else:
        assert compare(out, ref, atol, rtol) == pytest.approx(largest, rel=1e-6, abs=1e-12)
    assert kind == 0 or bad  # the specials make it fail: matching infinities count as wrong (inf - inf is NaN)


def test_same_bits_treats_nan_as_equal_and_tells_signed_zeros_apart_only_by_value():
    from drk_lab.common.correctness import same_bits

    a = torch.tensor([1.0, float("nan"), 0.0])
    assert same_bits(a, a.clone()) and same_bits(a, torch.tensor([1.0, float("nan"), -0.0]))
    assert not same_bits(a, torch.tensor([1.0, 2.0, 0.0])) and not same_bits(a, a.double())
    assert same_bits(torch.arange(4), torch.arange(4)) and not same_bits(torch.arange(4), torch.arange(1, 5))


def test_fingerprints_follow_the_values_without_overflowing():
    from drk_lab.hacks.runtime_checks import fingerprint

    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.bool):
        x = (torch.randn(1 << 17) * 5).to(dtype)
        assert fingerprint(x) == fingerprint(x.clone())
        y = x.clone()
        y[7] = 0 if x[7] != 0 else 1
        assert fingerprint(x) != fingerprint(y), dtype
    huge = torch.full((1 << 17,), 3e30)  # squares overflow float32; their fingerprint must still move
    other = huge.clone()
    other[0] = 1e30
    assert fingerprint(huge) != fingerprint(other)


# -- outputs smaller than the tolerance -----------------------------------------------------------
# A softmax over 4,096 fp16 columns is about 2.4e-4 everywhere, far below fp16's atol of 1e-2: under
# atol * max(1, RMS) alone any output near zero passed. The cap keeps the absolute part of the bound
# under a tenth of the reference's RMS.

def fp16_softmax_rows():
    torch.manual_seed(0)
    logits = torch.randn(32, 4096) * 0.5  # every value below 0.01
    return logits.softmax(-1).half(), logits.double().softmax(-1)


@pytest.mark.parametrize("out", ["zeros", "scaled", "flipped"])
def test_the_cap_fails_what_the_uncapped_bound_waved_through(out):
    ref, _ = fp16_softmax_rows()
    out = {"zeros": torch.zeros_like(ref), "scaled": (ref.float() * 1.3).half(), "flipped": ref.flip(-1)}[out]
    with pytest.raises(Mismatch):
        compare(out, ref)


def test_correct_low_precision_results_still_pass_under_the_cap():
    ref, exact = fp16_softmax_rows()
    compare(exact.half(), ref)  # rounded once from float64, against PyTorch's fp16 softmax
    compare(exact.bfloat16().float().half(), ref, atol=1e-2, rtol=1e-2)  # bf16's rounding, in fp16 clothes
    bf16_ref = (torch.randn(64, 4096) * 0.01).softmax(-1).bfloat16()  # near-uniform, near-equal values
    compare((bf16_ref.double() * (1 + 3e-3)).bfloat16(), bf16_ref)  # within one bf16 step


def test_the_cap_by_hand():
    # RMS of [0.004, 0, 0, 0] is 0.002: the absolute part is min(1e-2 * 1, 0.1 * 0.002) = 2e-4
    ref = torch.tensor([0.004, 0.0, 0.0, 0.0])
    compare(torch.tensor([0.004, 1.9e-4, 0.0, 0.0]), ref, atol=1e-2, rtol=0.0)
    with pytest.raises(Mismatch, match="atol=0.0002 rtol=0"):
        compare(torch.tensor([0.004, 2.1e-4, 0.0, 0.0]), ref, atol=1e-2, rtol=0.0)
    # an all-zero reference has no scale of its own and keeps atol; above RMS 0.1 (fp16) nothing changes
    compare(torch.full((4,), 9e-3), torch.zeros(4), atol=1e-2, rtol=0.0)
    assert compare(with_value(torch.tensor(REF), 1, 0.039), torch.tensor(REF), 0.01, 0.0) == pytest.approx(0.039)
