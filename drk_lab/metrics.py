"""Stays: the public API names this path (`from drk_lab.metrics import fast_p`); code in agent/metrics.py."""

from drk_lab.agent.metrics import (  # noqa: F401
    best_over_turns, best_result, correct_rate, fast_p, fast_p_table, format_table, geomean_speedup, level_summary,
    mean_speedup, valid_speedup)
