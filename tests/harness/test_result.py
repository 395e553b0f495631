"""EvalResult (drk_lab/harness/result.py): exact round trips, the fixed set of error kinds, summary()."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from drk_lab.harness.result import ERROR_KINDS, EvalResult

# The kinds the project's design names explicitly.
NAMED_KINDS = {"syntax", "no_modelnew", "no_triton_kernel", "compile", "runtime", "cuda_illegal_access",
                "timeout", "oom", "mismatch", "hacked", "worker_crash"}

# The fields others rely on.
RELIED_ON_FIELDS = ["compiled", "correct", "hacked", "hack_reasons", "error_kind", "error", "speedup",
                 "speedup_compile", "runtime_ms", "runtime_iqr_ms", "ref_runtime_ms", "ref_compile_runtime_ms",
                 "coverage", "kernels", "trials", "seeds", "device", "versions", "timings_valid"]


def full_result() -> EvalResult:
    """A result with a non-default value in every field."""
    return EvalResult(
        compiled=True,
        correct=True,
        hacked=True,
        hack_reasons=["timing_patch", "output_reuse"],
        error_kind="hacked",
        error="hack check fired\nsecond line with unicode: é ✓",
        speedup=1.2345678901234567,
        speedup_compile=0.875,
        runtime_ms=0.0123,
        runtime_iqr_ms=1e-6,
        ref_runtime_ms=12.5,
        ref_compile_runtime_ms=3.25e2,
        coverage=0.9375,
        kernels=[
            {"name": "relu_kernel", "calls": 3, "gpu_ms": 0.5, "own": True, "extra": None},
            {"name": "aten::copy_", "calls": 1, "gpu_ms": 0.01, "own": False, "shape": [4, 5]},
        ],
        trials=5,
        timing_trials=75,
        seeds=[0, 12345, 2**31 - 1, 2**40],
        device="NVIDIA H200",
        versions={"torch": "2.13.0", "triton": "3.5.0", "cuda": "12.8"},
        timings_valid=True,
        timing_note="L2 flushed; 100 trials",
        gpu_clock={"candidate": {"sm_clock_mhz": [1980, 1500], "slowdown": ["power cap"]}},
        bandwidth_fraction=0.91,
        bottleneck="memory-bound at 91% of the copy bandwidth",
        max_abs_error=3.0517578125e-05,
        stage_seconds={"static": 0.001, "load": 1.5, "correctness": 2.25, "timing": 10.0},
        trial_seconds={"inputs": 0.01, "poison": 0.02, "candidate": 1.5, "reference": 0.5, "compare": 0.125},
        eval_seconds=14.0,
        worker_pid=4242,
        worker_job=3,
        stdout="hello\nworld\n",
        notes=["extra-shape check skipped: no other valid shape"],
    )


def test_every_field_is_non_default_in_full_result():
    default, full = EvalResult(), full_result()
    for f in fields(EvalResult):
        assert getattr(full, f.name) != getattr(default, f.name), f.name


def test_design_fields_present():
    names = {f.name for f in fields(EvalResult)}
    assert set(RELIED_ON_FIELDS) <= names


@pytest.mark.parametrize("result", [full_result(), EvalResult(),
                                    EvalResult(error_kind="mismatch", error="shape", max_abs_error=None,
                                               speedup=None, trials=0)],
                         ids=["full", "default", "mismatch"])
def test_dict_round_trip(result):
    d = result.to_dict()
    assert set(d) == {f.name for f in fields(EvalResult)}
    back = EvalResult.from_dict(d)
    assert back == result
    assert back.to_dict() == d


@pytest.mark.parametrize("result", [full_result(), EvalResult()], ids=["full", "default"])
def test_json_round_trip(result):
    text = json.dumps(result.to_dict())
    back = EvalResult.from_dict(json.loads(text))
    assert back == result
    assert EvalResult.from_json(result.to_json()) == result
    assert json.loads(result.to_json()) == result.to_dict()
    # Every field survives with the same type (no tuples, no stringified numbers).
    for f in fields(EvalResult):
        assert type(getattr(back, f.name)) is type(getattr(result, f.name)), f.name


def test_json_keeps_none_and_floats_exactly():
    r = full_result()
    back = EvalResult.from_json(r.to_json())
    assert back.speedup == 1.2345678901234567
    assert back.runtime_iqr_ms == 1e-6
    assert back.kernels[0]["extra"] is None
    assert back.seeds[-1] == 2**40
    r2 = EvalResult(speedup=None, coverage=None, device=None)
    back2 = EvalResult.from_json(r2.to_json())
    assert back2.speedup is None and back2.coverage is None and back2.device is None


def test_to_dict_is_a_copy():
    r = full_result()
    d = r.to_dict()
    d["hack_reasons"].append("x")
    d["kernels"][0]["calls"] = 99
    d["versions"]["torch"] = "0"
    assert r == full_result()


def test_from_dict_missing_and_unknown_keys():
    back = EvalResult.from_dict({"correct": True, "speedup": 2.0, "some_future_field": 1})
    assert back == EvalResult(correct=True, speedup=2.0)


def test_equality_sees_every_field():
    base = full_result()
    for f in fields(EvalResult):
        other = EvalResult.from_dict({**base.to_dict(), f.name: getattr(EvalResult(), f.name)})
        assert other != base, f.name


def test_error_kinds_fixed_set():
    assert isinstance(ERROR_KINDS, tuple)
    assert len(set(ERROR_KINDS)) == len(ERROR_KINDS)
    assert NAMED_KINDS <= set(ERROR_KINDS)
    assert all(isinstance(k, str) and k for k in ERROR_KINDS)


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_every_error_kind_accepted(kind):
    r = EvalResult(error_kind=kind, error="x")
    assert r.error_kind == kind
    assert not r.ok
    assert EvalResult.from_json(r.to_json()) == r


@pytest.mark.parametrize("kind", ["bogus", "", "Syntax", "SYNTAX", "mismatch ", "runtime_error"])
def test_unknown_error_kind_raises(kind):
    with pytest.raises(ValueError, match="error_kind"):
        EvalResult(error_kind=kind)
    with pytest.raises(ValueError, match="error_kind"):
        EvalResult.from_dict({"error_kind": kind})
    with pytest.raises(ValueError, match="error_kind"):
        EvalResult.from_json(json.dumps({"error_kind": kind}))


def test_ok():
    assert EvalResult(compiled=True, correct=True).ok
    assert not EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["x"]).ok
    assert not EvalResult(correct=True, error_kind="timeout").ok
    assert not EvalResult().ok


def test_summary_correct_with_speedup():
    s = EvalResult(compiled=True, correct=True, speedup=1.2345).summary()
    assert "correct" in s
    assert "1.23" in s
    s = EvalResult(compiled=True, correct=True, speedup=2.5, speedup_compile=0.75).summary()
    assert "correct" in s and "2.50" in s and "0.75" in s


def test_summary_correct_without_speedup():
    s = EvalResult(compiled=True, correct=True).summary()
    assert "correct" in s
    assert "speedup" not in s


@pytest.mark.parametrize("kind", [k for k in ERROR_KINDS if k != "hacked"])
def test_summary_names_error_kind(kind):
    s = EvalResult(error_kind=kind, error="first line of error\nsecond line").summary()
    assert kind in s
    assert "first line of error" in s
    assert "second line" not in s
    assert "\n" not in s
    assert not s.startswith("correct")


def test_summary_error_without_message():
    assert "timeout" in EvalResult(error_kind="timeout").summary()
    assert "timeout" in EvalResult(error_kind="timeout", error="").summary()


def test_summary_long_error_is_bounded():
    s = EvalResult(error_kind="runtime", error="x" * 10_000).summary()
    assert "runtime" in s
    assert len(s) < 300


def test_summary_error_with_speedup():
    s = EvalResult(error_kind="mismatch", error="wrong values", speedup=3.0).summary()
    assert "mismatch" in s and "3.00" in s


def test_summary_hacked():
    s = EvalResult(compiled=True, correct=True, hacked=True, error_kind="hacked",
                   hack_reasons=["timing_patch", "output_reuse"], speedup=9.0).summary()
    assert "hacked" in s.lower()
    assert "timing_patch" in s and "output_reuse" in s
    assert "9.00" in s
    assert "correct" not in s


def test_summary_full_result_is_one_line():
    s = full_result().summary()
    assert "\n" not in s
    assert "hacked" in s.lower() and "1.23" in s
