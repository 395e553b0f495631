"""Reward functions on crafted EvalResults: every failure class, hacks, missing timings, caps."""

import math

import pytest

from drk_lab.agent.rewards import REWARDS, bottleneck, drkernel, get_reward, kevin, tiered
from drk_lab.harness.result import ERROR_KINDS, EvalResult


def timed(speedup, coverage=None, valid=True):
    return EvalResult(compiled=True, correct=True, trials=5, speedup=speedup, timings_valid=valid,
                      coverage=coverage, device="NVIDIA H200")


CPU_OK = EvalResult(compiled=True, correct=True, trials=5, device="cpu", timing_note="no timings")
FAILURES = [EvalResult(error_kind=k, error="x") for k in ERROR_KINDS if k != "hacked"]
HACKS = [
    EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["caches_outputs"], error_kind="hacked",
               speedup=5.0, timings_valid=True, coverage=1.0),
    EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["side_stream"], speedup=5.0,
               timings_valid=True, coverage=1.0),  # flag without error_kind
    EvalResult(error_kind="hacked", error="patches_harness (line 3): ..."),  # error kind without flag
]


def test_drkernel_values():
    assert drkernel(timed(2.0, coverage=0.8)) == pytest.approx(0.5 + 1.0 + 0.4)
    assert drkernel(timed(10.0, coverage=1.0)) == pytest.approx(0.5 + 1.5 + 0.5)  # speedup capped at 3
    assert drkernel(timed(0.5, coverage=None)) == pytest.approx(0.5 + 0.25)  # no profile: coverage 0
    assert drkernel(CPU_OK) == pytest.approx(0.5)  # no timings: speed term 0
    assert drkernel(timed(2.0, coverage=0.5), speed_weight=1.0, speedup_cap=1.5) == pytest.approx(0.5 + 1.5 + 0.25)


def test_kevin_values():
    assert kevin(timed(2.0)) == pytest.approx(2.3)
    assert kevin(timed(50.0)) == pytest.approx(10.3)  # default cap 10
    assert kevin(timed(50.0), speedup_cap=3.0) == pytest.approx(3.3)
    assert kevin(CPU_OK) == pytest.approx(0.3)


def test_tiered_levels():
    expected = {0.5: 0.1, 1.0: 0.2, 1.1: 0.2, 1.2: 0.4, 1.49: 0.4, 1.5: 0.6, 2.0: 0.8, 2.99: 0.8, 3.0: 1.0, 40.0: 1.0}
    for speedup, level in expected.items():
        assert tiered(timed(speedup)) == pytest.approx(level), speedup
    assert tiered(CPU_OK) == pytest.approx(0.1)


def test_tiered_failures_are_negative_and_ordered():
    compile_kinds = ["syntax", "no_modelnew", "no_triton_kernel", "load", "compile"]
    for kind in compile_kinds:
        assert tiered(EvalResult(error_kind=kind)) == -1.0
    for kind in ["runtime", "timeout", "oom", "cuda_illegal_access", "segfault", "exit", "worker_crash"]:
        assert tiered(EvalResult(error_kind=kind)) == -0.5
    assert tiered(EvalResult(compiled=True, error_kind="mismatch")) == -0.25
    for kind in ["reference", "harness"]:  # not the candidate's fault
        assert tiered(EvalResult(error_kind=kind)) == 0.0
    assert tiered(EvalResult(error_kind="mismatch"), mismatch=-0.7) == -0.7


def test_bottleneck_values():
    assert bottleneck(timed(2.0, coverage=0.1)) == pytest.approx(1.0)  # low coverage: 0.5 * speedup
    assert bottleneck(timed(2.0, coverage=None)) == pytest.approx(1.0)
    assert bottleneck(timed(2.0, coverage=0.3)) == pytest.approx(1.0)  # continuous at the threshold
    assert bottleneck(timed(2.0, coverage=0.65)) == pytest.approx(2.0 * 0.75)
    assert bottleneck(timed(2.0, coverage=1.0)) == pytest.approx(2.0)
    assert bottleneck(timed(2.0, coverage=0.29)) < bottleneck(timed(2.0, coverage=0.31))
    assert bottleneck(timed(100.0, coverage=1.0)) == pytest.approx(10.0)  # capped
    assert bottleneck(CPU_OK) == 0.0


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_failures_earn_nothing_and_hacks_exactly_zero(name):
    fn = REWARDS[name]
    for r in FAILURES:
        assert fn(r) <= 0.0, r.error_kind
    for r in HACKS:  # however fast and well covered
        assert fn(r) == 0.0
    assert fn(EvalResult()) == 0.0  # never evaluated


def test_tiered_hack_penalty_is_a_choice():
    for r in HACKS:
        assert tiered(r, hacked=-1.0) == -1.0
        assert get_reward("tiered", hacked=-2.0)(r) == -2.0
    assert tiered(timed(2.0), hacked=-1.0) == pytest.approx(0.8)  # honest results are unaffected


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_speedup_from_invalid_or_broken_timings_is_ignored(name):
    fn = REWARDS[name]
    for bad in [timed(2.0, coverage=1.0, valid=False),
                timed(math.nan, coverage=1.0), timed(math.inf, coverage=1.0), timed(-1.0, coverage=1.0)]:
        assert fn(bad) == fn(EvalResult(correct=True, coverage=1.0)), bad


@pytest.mark.parametrize("name", sorted(set(REWARDS) - {"correct"}))  # "correct" reads no time by design
def test_more_speed_never_earns_less(name):
    fn = REWARDS[name]
    values = [fn(timed(s, coverage=0.9)) for s in [0.2, 0.9, 1.0, 1.3, 1.7, 2.5, 3.5, 8.0, 20.0]]
    assert values == sorted(values)
    assert values[-1] > values[0]


def test_get_reward_binds_weights():
    res = timed(2.0, coverage=0.8)
    assert get_reward("drkernel")(res) == drkernel(res)
    assert get_reward("kevin", speedup_cap=1.5)(res) == pytest.approx(1.8)
    assert get_reward("tiered", levels=(0, 1, 2, 3, 4, 5))(res) == 4
    assert get_reward("bottleneck", coverage_threshold=0.9)(res) == pytest.approx(1.0)
    custom = get_reward(lambda r, bonus=0.0: float(r.correct) + bonus, bonus=2.0)
    assert custom(res) == 3.0


def test_get_reward_rejects_unknown_names_and_weights():
    with pytest.raises(ValueError) as e:
        get_reward("fastest")
    for name in REWARDS:
        assert name in str(e.value)
    with pytest.raises(TypeError):
        get_reward("drkernel", speed_cap=2.0)  # misspelt weight: caught before any call
    with pytest.raises(TypeError):
        get_reward("kevin", 0.3)
    with pytest.raises(ValueError):
        get_reward("tiered", levels=(0.1, 0.2))(timed(1.0))
