import math

import pytest

from drk_lab.agent.metrics import (best_over_turns, correct_rate, fast_p, fast_p_table, format_table, geomean_speedup,
                                   level_summary, mean_speedup)
from drk_lab.harness.result import EvalResult


def ok(speedup):
    return EvalResult(compiled=True, correct=True, speedup=speedup)


FAILED = EvalResult(compiled=True, correct=False, error_kind="mismatch", speedup=None)
HACKED = EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["caches_outputs"],
                    error_kind="hacked", speedup=50.0)


def test_fast_p_counts_every_task_in_the_denominator():
    results = [ok(2.0), ok(1.2), ok(0.9), ok(None), FAILED, HACKED, None, ok(1.19)]
    assert fast_p(results, p=1.0) == 3 / 8
    assert fast_p(results, p=1.2) == 2 / 8  # at least p: 1.2 counts, 1.19 does not
    assert fast_p(results, p=1.5) == 1 / 8
    assert fast_p(results, p=0.5) == 4 / 8  # untimed, failed, hacked and missing never count
    assert fast_p(results, p=1.0, n_tasks=16) == 3 / 16
    assert fast_p([], p=1.0) == 0.0
    with pytest.raises(ValueError):
        fast_p(results, n_tasks=3)


def test_dicts_and_results_give_the_same_numbers():
    results = [ok(2.0), ok(0.5), FAILED, HACKED, ok(3.0)]
    dicts = [r.to_dict() for r in results]
    for p in (1.0, 1.2, 2.0):
        assert fast_p(results, p) == fast_p(dicts, p)
    assert geomean_speedup(results) == geomean_speedup(dicts)
    assert correct_rate(dicts) == 3 / 5


def test_geomean_over_correct_ones_or_failures_as_one():
    results = [ok(2.0), ok(0.5), ok(4.0), FAILED, HACKED, ok(None)]
    assert geomean_speedup(results) == pytest.approx((2.0 * 0.5 * 4.0) ** (1 / 3))
    assert geomean_speedup(results, failures="as_one") == pytest.approx((2.0 * 0.5 * 4.0) ** (1 / 6))
    assert mean_speedup(results) == pytest.approx(6.5 / 3)
    assert geomean_speedup([FAILED, HACKED]) is None
    assert geomean_speedup([ok(float("nan")), ok(float("inf")), ok(-1.0)]) is None
    with pytest.raises(ValueError):
        geomean_speedup(results, failures="as_zero")


def test_speedup_against_compile():
    r = EvalResult(correct=True, speedup=2.0, speedup_compile=0.8)
    assert fast_p([r], 1.0) == 1.0
    assert fast_p([r], 1.0, key="speedup_compile") == 0.0


def test_fast_p_table_per_turn_and_best_so_far():
    per_task = {
        "a": [FAILED, ok(1.3), ok(0.7)],  # best so far keeps the 1.3 of turn 2
        "b": [ok(1.0), ok(2.5), HACKED],
        "c": [FAILED],  # a short trajectory counts as failed at the turns it lacks
        "d": [ok(0.5), FAILED, ok(1.6)],
    }
    rows = fast_p_table(per_task, ps=(1.0, 1.5))
    assert [r["turn"] for r in rows] == [1, 2, 3]
    assert all(r["tasks"] == 4 for r in rows)
    assert [r["fast@1"] for r in rows] == [1 / 4, 2 / 4, 1 / 4]
    assert [r["fast@1.5"] for r in rows] == [0, 1 / 4, 1 / 4]
    assert [r["best_fast@1"] for r in rows] == [1 / 4, 2 / 4, 3 / 4]
    assert [r["best_fast@1.5"] for r in rows] == [0, 1 / 4, 2 / 4]
    assert [r["correct"] for r in rows] == [2 / 4, 2 / 4, 2 / 4]
    assert [r["best_correct"] for r in rows] == [2 / 4, 3 / 4, 3 / 4]
    # the same data as a list of lists
    assert fast_p_table(list(per_task.values()), ps=(1.0, 1.5)) == rows
    best = best_over_turns(per_task)
    assert best["a"].speedup == 1.3 and best["b"].speedup == 2.5 and best["c"] is FAILED


def test_level_summary_rows_and_text():
    results = {
        "level1/01_relu": ok(2.0), "level1/08_softmax": ok(1.1), "level1/12_matmul_fp16": FAILED,
        "level2/01_linear_bias_relu": ok(0.8), "level2/07_residual_add_layernorm": HACKED,
        "level3/02_causal_attention": ok(1.25),
    }
    rows = level_summary(results, ps=(1.0, 1.2))
    assert [r["level"] for r in rows] == ["level 1", "level 2", "level 3", "all"]
    one, two, three, everything = rows
    assert one["tasks"] == 3 and one["fast@1"] == 2 / 3 and one["fast@1.2"] == 1 / 3
    assert one["correct"] == 2 / 3 and one["n_correct"] == 2
    assert one["geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 1.1))
    assert one["mean_speedup"] == pytest.approx(1.55)
    assert two["fast@1"] == 0 and two["correct"] == 1 / 2 and two["geomean_speedup"] == pytest.approx(0.8)
    assert three["fast@1.2"] == 1.0
    assert everything["tasks"] == 6 and everything["fast@1"] == 3 / 6 and everything["n_correct"] == 4
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["level", "tasks", "Fast@1", "Fast@1.2", "correct", "%", "n", "correct",
                                "mean", "speedup", "geomean", "speedup"]
    assert lines[2].split()[:6] == ["level", "1", "3", "66.7", "33.3", "66.7"]
    assert lines[-1].split()[:5] == ["all", "6", "50.0", "33.3", "66.7"]
    # levels from a mapping, and (level, result) pairs
    by_map = level_summary({"relu": ok(2.0), "mlp": FAILED}, levels={"relu": 1, "mlp": 3}, ps=(1.0,))
    assert [(r["level"], r["fast@1"]) for r in by_map] == [("level 1", 1.0), ("level 3", 0.0), ("all", 0.5)]
    pairs = level_summary([(2, ok(1.5)), (2, FAILED)], ps=(1.0,))
    assert [(r["level"], r["tasks"], r["fast@1"]) for r in pairs] == [("level 2", 2, 0.5), ("all", 2, 0.5)]


def test_outcome_names_how_an_evaluation_ended():
    from drk_lab.agent.metrics import outcome

    assert outcome({"correct": True, "hacked": False, "error_kind": None}) == "correct"
    assert outcome({"correct": True, "hacked": True, "error_kind": "hacked"}) == "hacked"
    assert outcome({"correct": True, "hacked": True, "error_kind": None}) == "hacked"
    assert outcome({"correct": False, "hacked": False, "error_kind": "syntax"}) == "syntax"
    assert outcome({"correct": False, "hacked": False, "error_kind": None}) == "wrong"
