"""What a figure says it is of: subtitles with run, model, card, baseline and n; panels with nothing in them
left out; the index of the committed figures; the near-uniform entropy flag; the CPU's stand-ins for speedups."""

import subprocess
from pathlib import Path

from drk_lab.agent.trajectory import Trajectory, Turn
from drk_lab.harness.result import EvalResult
from drk_lab.rl.runlog import read_log
from drk_lab.viz import plots, tables
from drk_lab.viz.about import log_about, near_uniform_entropy, run_header

REPO = Path(__file__).resolve().parents[2]


def test_about_line_and_describe_wrap_long_subtitles():
    line = plots.about_line(run="2026-12-04_mini_h200_long_trloo", model="Qwen3-style 8 layers x 512 wide",
                            card="NVIDIA H200", baseline="after SFT", n=128)
    assert line == ("run 2026-12-04_mini_h200_long_trloo · model Qwen3-style 8 layers x 512 wide · card NVIDIA H200 · "
                    "baseline after SFT · n 128")
    fig = plots.describe(plots.outcome_chart([{"checkpoint": "sft", "correct": 1}]), line, width=60)
    subtitles = fig.layout.title.text.split("<br>")[1:]
    assert len(subtitles) == 3 and all(len(s) <= 60 + len("<sup></sup>") for s in subtitles)
    assert "card NVIDIA H200" in fig.layout.title.text and fig.layout.margin.t >= 60 + 3 * 22


def test_flat_and_missing_panels_are_left_out_and_named():
    rows = [{"step": s, "reward_mean": 0.1 * s, "mrs/rejected_frac": 0.0} for s in range(1, 6)]
    fig = plots.compare_runs({"a": rows}, ["reward_mean", "mrs/rejected_frac", "grad_norm"])
    assert [a.text for a in fig.layout.annotations] == ["reward_mean"]
    assert "mrs/rejected_frac (always 0)" in fig.layout.title.text and "grad_norm (not logged)" in fig.layout.title.text


def turn(index, result, reward):
    return Turn(task="ln", index=index, iteration=0, context=[], prompt_tokens=1, prompt_chars=1, response="r",
                finish_reason="stop", extraction="ok", code="c", result=result, reward=reward, feedback="f")


def test_turn_chart_leaves_out_a_constant_coverage():
    results = [EvalResult(compiled=True, correct=True, speedup=s, timings_valid=True, coverage=1.0) for s in (1.5, 1.3)]
    fig = plots.turn_chart([Trajectory("ln", "p", turns=[turn(i, r, 1.0 + i) for i, r in enumerate(results)])])
    assert [a.text for a in fig.layout.annotations] == ["speedup", "reward"]
    assert "coverage 1 in every turn" in fig.layout.title.text


def test_a_random_models_entropy_is_flagged_a_trained_ones_is_not():
    random_model = read_log(REPO / "data" / "runs" / "2026-12-01_h200_rl_short")
    (flag,) = near_uniform_entropy(random_model, vocab_size=704)
    assert flag["kind"] == "entropy_near_uniform" and "log(704)" in flag["message"]
    trained = read_log(REPO / "data" / "runs" / "2026-12-04_mini_h200_long_trloo" / "rl_trloo_long" / "log")
    assert near_uniform_entropy(trained, vocab_size=8192) == []


def test_run_header_and_log_about_read_the_run_folder():
    header = run_header(REPO / "data" / "runs" / "2026-12-06_mini_h100_lr4e5_kl")
    assert header["card"] == "NVIDIA H100" and header["question"] and header["verdict"] and len(header["commit"]) == 7
    about = log_about(REPO / "data" / "runs" / "2026-12-01_h200_rl_short")
    assert about["card"] == "NVIDIA H200" and about["model"].startswith("a random Qwen3-style model")
    mini = log_about(REPO / "data" / "runs" / "2026-12-02_mini_h200_drills" / "rl_trloo" / "log")
    assert mini["run"] == "2026-12-02_mini_h200_drills/rl_trloo" and "8 layers x 512 wide" in mini["model"]


def test_the_cpus_stand_ins_for_speedups():
    ok, bad = EvalResult(compiled=True, correct=True), EvalResult(compiled=True, error_kind="mismatch")
    cheat = EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["timing_hack"])
    rows = [("solution", None, ok, "ok"), ("variant:a", None, bad, "mismatch"), ("variant:b", None, cheat, "hacked")]
    assert tables.candidate_outcomes(rows) == [{"checkpoint": "solutions", "correct": 1},
                                               {"checkpoint": "planted variants", "mismatch": 1},
                                               {"checkpoint": "planted cheats", "hacked": 1}]
    episodes = [Trajectory("a", "p", turns=[turn(0, bad, 0.0), turn(1, ok, 1.0)]),
                Trajectory("b", "p", turns=[turn(0, ok, 1.0), turn(1, bad, 0.0)])]
    per_turn = tables.correct_per_turn(episodes)
    assert per_turn == [{"turn": 1, "episodes": 2, "correct": 0.5, "best_correct": 0.5},
                        {"turn": 2, "episodes": 2, "correct": 0.5, "best_correct": 1.0}]
    fig = plots.correct_chart(per_turn)
    assert list(fig.data[0].y) == [0.5, 0.5] and list(fig.data[1].y) == [0.5, 1.0]


def committed(pattern: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return out.split()


def test_every_committed_figure_is_in_the_index_and_says_what_it_is_of():
    index = (REPO / "figures" / "README.md").read_text()
    pngs = [p for p in committed("*.png") if p.startswith(("figures/", "data/runs/"))]
    assert len(pngs) >= 30
    for png in pngs:
        assert png in index, f"{png} is not in figures/README.md"
        html = REPO / png.replace(".png", ".html")
        if html.exists():  # the inspector's screenshot has none
            text = html.read_text()
            assert all(f"{part} " in text for part in ("run", "model", "card", "baseline", "n")), png
            assert "cdn.plot.ly" not in text
