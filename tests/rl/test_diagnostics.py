"""rl.diagnostics: series, smoothing, the four warning flags on planted logs, a healthy log that raises
none, and the recorded H200 arm whose replies broke."""

import random
from pathlib import Path

import pytest

from drk_lab.rl.diagnostics import (Flag, broken_replies, entropy_collapse, fast_series, flags, grad_norm_spikes, health_keys,
                                    lazy_optimisation, series, smooth, summary, turn_keys)


def healthy_log(n=40, seed=0):
    """Reward and Fast@1.2 rising together, entropy drifting down slowly, grad_norm noisy but steady."""
    rng = random.Random(seed)
    rows = []
    for step in range(1, n + 1):
        progress = step / n
        rows.append({"step": step, "reward_mean": 0.2 + 0.6 * progress + rng.uniform(-0.05, 0.05),
                     "fast@1/turn_1": 0.3 + 0.2 * progress,
                     "fast@1.2/turn_1": 0.1 + 0.2 * progress + rng.uniform(-0.02, 0.02),
                     "fast@1.2/turn_2": 0.15 + 0.25 * progress,
                     "entropy": 1.2 - 0.5 * progress + rng.uniform(-0.05, 0.05),
                     "grad_norm": 1.0 + rng.uniform(-0.3, 0.3), "loss": 0.1})
    return rows


def test_series_skips_missing_none_and_nan():
    rows = [{"step": 1, "x": 1.0}, {"step": 2}, {"step": 3, "x": None}, {"step": 4, "x": float("nan")},
            {"step": 5, "x": 2}, {"x": 3.0}]
    assert series(rows, "x") == ([1, 5, 6], [1.0, 2.0, 3.0])  # a row without "step" counts by position
    assert series(rows, "absent") == ([], [])


def test_smooth_by_hand():
    assert smooth([0.0, 10.0, 10.0], alpha=0.5) == [0.0, 5.0, 7.5]
    assert smooth([4.0, 8.0], alpha=0.75) == [4.0, 5.0]
    assert smooth([1.0, 2.0, 3.0], alpha=0.0) == [1.0, 2.0, 3.0]
    assert smooth([], 0.6) == []
    with pytest.raises(ValueError):
        smooth([1.0], alpha=1.0)


def test_fast_series_mean_or_last_turn():
    rows = [{"step": 1, "fast@1.2/turn_1": 0.2, "fast@1.2/turn_2": 0.4, "fast@1/turn_1": 0.9},
            {"step": 2, "fast@1.2/turn_1": 0.6, "fast@1.2/turn_2": None}]
    steps, values = fast_series(rows, 1.2)
    assert steps == [1, 2] and values == pytest.approx([0.3, 0.6])
    assert fast_series(rows, 1.2, turn="last")[1] == pytest.approx([0.4, 0.6])
    assert fast_series(rows, 1.0)[1] == [0.9]
    assert fast_series(rows, 2.0) == ([], [])


def test_a_healthy_log_raises_no_flag():
    assert flags(healthy_log()) == []


def test_planted_entropy_collapse_is_found_at_its_first_step():
    rows = healthy_log()
    for row in rows[24:]:
        row["entropy"] = 0.05  # 0.05 < 0.2 * ~1.15 from step 25 on
    found = flags(rows)
    assert [f.kind for f in found] == ["entropy_collapse"]
    assert found[0].step == 25 and "stayed there for 16 steps" in found[0].message


def test_a_short_entropy_dip_is_not_a_collapse():
    rows = healthy_log()
    rows[20]["entropy"] = rows[21]["entropy"] = 0.01  # two steps, patience is three
    assert entropy_collapse(rows) is None
    assert entropy_collapse(rows, patience=2).step == 21


def test_planted_grad_norm_spike():
    rows = healthy_log()
    rows[30]["grad_norm"] = 9.0
    found = flags(rows)
    assert [(f.kind, f.step) for f in found] == [("grad_norm_spike", 31)]
    assert isinstance(found[0], Flag) and "running median" in found[0].message
    assert grad_norm_spikes(rows, factor=10.0) == []
    rows[2]["grad_norm"] = 50.0  # before min_history steps are known: no median to compare with yet
    assert [f.step for f in grad_norm_spikes(rows)] == [31]


def test_lazy_optimisation_reward_up_fast_down():
    rows = healthy_log()
    for i, row in enumerate(rows):  # reward keeps rising; Fast@1.2 slides from 0.4 to 0.1
        row["fast@1.2/turn_1"] = row["fast@1.2/turn_2"] = 0.4 - 0.3 * i / (len(rows) - 1)
    found = flags(rows)
    assert [f.kind for f in found] == ["lazy_optimisation"]
    assert found[0].step == 40 and "Fast@1.2" in found[0].message
    assert lazy_optimisation(rows, fast_drop=0.5) is None  # the drop (about 0.2) is under this threshold


def test_lazy_optimisation_falls_back_to_fast_at_1_and_needs_both_series():
    rows = [{"step": s, "reward_mean": 0.1 * s, "fast@1/turn_1": 0.5 - 0.03 * s} for s in range(1, 13)]
    flag = lazy_optimisation(rows)
    assert flag is not None and "Fast@1 " in flag.message
    assert lazy_optimisation(rows, fast_ps=(1.2,)) is None  # no fast@1.2 keys: nothing to judge
    assert lazy_optimisation(rows[:6]) is None  # too few steps
    flat_reward = [{**row, "reward_mean": 0.5} for row in rows]
    assert lazy_optimisation(flat_reward) is None


def test_broken_replies_on_a_planted_log_and_on_the_recorded_h200_arm():
    rows = healthy_log()
    for i, row in enumerate(rows):
        row["outcome/syntax"], row["outcome/load"] = 0.08, 0.01
        if i >= 20:
            row["outcome/syntax"] = 0.4 if i != 21 else 0.1  # one step back under the ceiling
    assert broken_replies(rows).step == 23  # step 21 broke, 22 did not, 23 on did
    assert broken_replies(rows, patience=1).step == 21 and broken_replies(rows[:11]) is None
    assert broken_replies(healthy_log()) is None  # no outcome keys logged
    assert [f.kind for f in flags(rows)] == ["broken_replies"]

    # the carried TRLOO arm: its conv replies repeated an argument from step 29 on; its first continuation
    # of steps 17-28 on another machine did not
    from drk_lab.rl.runlog import read_log

    run = Path(__file__).parents[2] / "data/runs/2026-12-04_mini_h200_carried_trloo/rl_trloo_long"
    flag = broken_replies(read_log(run / "log"))
    assert flag.step == 30 and "36%" in flag.message
    assert broken_replies(read_log(run / "log_first_machine")) is None

    # the KL arm on the same prompts: no break to step 31, but an excursion at steps 18-19 whose replies
    # still loaded (they failed at another shape), so it shows as gradient spikes, not as broken replies
    kl_log = read_log(Path(__file__).parents[2] / "data/runs/2026-12-04_mini_h200_kl_trloo/rl_trloo_kl/log")
    assert len(kl_log) == 31
    assert [(f.kind, f.step) for f in flags(kl_log)] == [("grad_norm_spike", 18), ("grad_norm_spike", 19)]


def test_flags_come_in_step_order():
    rows = healthy_log()
    rows[10]["grad_norm"] = 20.0
    for row in rows[30:]:
        row["entropy"] = 0.0
    for i, row in enumerate(rows):
        row["fast@1.2/turn_1"] = row["fast@1.2/turn_2"] = 0.5 - 0.01 * i
    assert [(f.kind, f.step) for f in flags(rows)] == [("grad_norm_spike", 11), ("entropy_collapse", 31),
                                                      ("lazy_optimisation", 40)]


def test_summary_is_one_flat_row():
    rows = [{"step": 1, "reward_mean": 1.0, "entropy": None}, {"step": 2, "reward_mean": 3.0, "entropy": 0.5}]
    out = summary(rows)
    assert out["steps"] == 2 and out["last_step"] == 2
    assert out["reward_mean/last"] == 3.0 and out["reward_mean/mean"] == 2.0
    assert out["entropy/mean"] == 0.5 and "grad_norm/last" not in out
    assert summary([]) == {"steps": 0, "last_step": None}


def test_health_and_turn_keys_list_what_the_log_has():
    rows = [{"step": 1, "entropy": 1.0, "grad_norm": None, "fast@1/turn_2": 0.1, "reward_mean/turn_10": 0.0,
             "reward_mean/turn_2": 0.5, "fast@1/turn_1": 0.2, "correct/turn_1": None},
            {"step": 2, "reward_mean": 0.3, "clip_high": 0.01, "reward_mean/turn_1": 0.4}]
    assert health_keys(rows) == ["reward_mean", "entropy", "clip_high"]  # grad_norm only ever None
    assert turn_keys(rows) == ["fast@1/turn_1", "fast@1/turn_2", "reward_mean/turn_1", "reward_mean/turn_2",
                               "reward_mean/turn_10"]
