"""The committed figures, drawn again from the data in the repository (no GPU needed), and their index.

    .venv/bin/python experiments/figures.py            # figures/*.{png,html}, data/runs/*/figures/*, figures/README.md
    .venv/bin/python experiments/figures.py --index    # only the index

Every figure says in its title or subtitle the run it is of, the model, the card, the baseline and n
(drk_lab.viz.plots.about_line); panels with nothing in them (a key never logged, a filter that never fired)
are left out and named in the subtitle. figures/README.md lists each committed figure with the run that made
it. Notebooks write their own figures to runs/figures/ (ignored by git), never here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from drk_lab.agent.cases import load_case  # noqa: E402
from drk_lab.rl import diagnostics  # noqa: E402
from drk_lab.rl.runlog import read_log  # noqa: E402
from drk_lab.viz import plots  # noqa: E402
from drk_lab.viz.about import mini_model, run_header  # noqa: E402

RUNS = REPO / "data" / "runs"
FIGURES = REPO / "figures"
# the mini runs' curves: as notebooks/06_mini_drkernel.ipynb draws them
CURVE_KEYS = ("reward_mean/turn_1", "reward_mean/turn_2", "fast@1/turn_1", "fast@1/turn_2", "cut_off_frac",
              "outcome/syntax", "entropy", "grad_norm", "zero_advantage_frac", "mrs/rejected_frac", "prs/rejected_frac",
              "mrs/log_ratio_abs_max")
DIAGNOSTICS_RUN = "2026-12-04_mini_h200_carried_trloo"  # a real model's RL arm that comes apart at step 30
INSPECTOR_NOTE = ("a screenshot of the turn inspector in JupyterLab (headless Chromium) on the LayerNorm case, "
                  "taken by tests/notebooks/test_jupyterlab.py; the case's turns are hand-written, the numbers "
                  "the H200 measurement (data/cases/layernorm/h200.jsonl)")


def _save(fig, path: Path) -> Path:
    plots.save_figure(fig, str(path))
    return path.with_suffix(".png")


def _rl_n(header_settings: dict, logs: dict) -> str:
    s = header_settings.get("settings", header_settings)
    steps = ", ".join(f"{tag} {len(rows)}" for tag, rows in logs.items())
    return (f"steps per arm: {steps}; each step {s.get('prompts_per_step')} prompts x {s.get('samples')} samples "
            f"x {s.get('turns')} turns")


def mini_run_figures(folder: Path) -> list[dict]:
    """A mini run's outcomes and curves, into its own figures/ (only where it already had them)."""
    from experiments.mini.report import outcome_rows, read_run

    header, run = run_header(folder), read_run(folder)
    settings = run["phases"].get("settings", {})
    model, made = mini_model(settings), []
    base = {"run": header["run"], "model": model, "card": header["card"]}
    if (folder / "figures" / "outcomes.png").exists():
        rows = outcome_rows(run, "heldout")
        n = sum(v for k, v in rows[0].items() if k != "checkpoint") if rows else 0
        fig = plots.outcome_chart(rows, title="Held-out replies: how they ended")
        plots.describe(fig, plots.about_line(**base, baseline="after SFT (the checkpoint RL starts from)",
                                             n=f"{n} replies per checkpoint (held-out tasks x samples x turns)"))
        made.append({**base, "figure": _save(fig, folder / "figures" / "outcomes"),
                     "shows": "how each checkpoint's held-out replies ended (correct, or the harness's error kind)"})
    logs = run["rl_logs"]
    if logs and (folder / "figures" / "curves.png").exists():
        keys = [k for k in CURVE_KEYS if any(k in row for rows in logs.values() for row in rows)]
        fig = plots.compare_runs(logs, keys, title="Mini Dr. Kernel: RL runs")
        plots.describe(fig, plots.about_line(**base, baseline="Fast@1 against eager PyTorch; each arm from the SFT model",
                                             n=_rl_n(settings, logs)))
        made.append({**base, "figure": _save(fig, folder / "figures" / "curves"),
                     "shows": "RL curves per arm: reward and Fast@1 per turn, cut-off and syntax shares, entropy, "
                              "gradient norm, rejection"})
    return made


def drill_figure(folder: Path) -> list[dict]:
    from experiments.drills.rl import read_reports, scores_figure

    reports = read_reports(folder)
    header, first = run_header(folder), next(iter(reports.values()))
    s = first["settings"]
    base = {"run": header["run"], "model": f"drill model, hidden {s['hidden']}, 0.85M parameters, "
                                              f"{s['pretrain_steps']} pretraining steps", "card": header["card"]}
    fig = scores_figure(reports)
    plots.describe(fig, plots.about_line(**base, baseline="step 0 (the starting model); arms: TRLOO, shuffled, supervised",
                                         n=f"{s['chains']} held-out and {s['chains']} train-side chains per score; "
                                           f"seeds {', '.join(sorted({k.split('/')[0] for k in reports}))}"))
    fig.update_layout(height=520)
    return [{**base, "figure": _save(fig, folder / "figures" / "drill_rl"),
             "shows": "chains written exactly against RL step, per arm and seed"}]


def diagnostics_figure() -> list[dict]:
    folder = RUNS / DIAGNOSTICS_RUN
    header = run_header(folder)
    rows = read_log(folder / "rl_trloo_long" / "log")
    settings = json.loads((folder / "settings.json").read_text())
    flagged = "; ".join(f"{f.kind} at step {f.step}" for f in diagnostics.flags(rows)) or "nothing flagged"
    fig = plots.run_curves(rows, diagnostics.health_keys(rows) + ["outcome/load", "outcome/syntax"])
    fig.update_layout(title_text=fig.layout.title.text.replace("Training curves", "RL health of one TRLOO arm"))
    base = {"run": f"{header['run']}/rl_trloo_long", "model": mini_model(settings), "card": header["card"]}
    plots.describe(fig, plots.about_line(**base, baseline="the arm's first steps (notebook 03's flags)",
                                         n=_rl_n(settings, {"rl_trloo_long": rows})), f"flags: {flagged}")
    return [{**base, "figure": _save(fig, FIGURES / "diagnostics"),
             "shows": f"notebook 03 on a real model's RL arm that comes apart: {flagged}"}]


def layernorm_figure() -> list[dict]:
    traj = load_case("layernorm", "h200")
    fig = plots.turn_chart([traj], metrics=("speedup", "speedup_compile", "bandwidth_fraction", "coverage", "reward"))
    fig.update_layout(title_text=fig.layout.title.text.replace("Per-turn metrics", "LayerNorm case, turn by turn"),
                      showlegend=False)
    base = {"run": "data/cases/layernorm/h200.jsonl (experiments/layernorm_case.py, 2026-12-01, commit 7d6f135)",
            "model": "none: turns 1-3 written by hand after the report's case study", "card": "NVIDIA H200"}
    plots.describe(fig, plots.about_line(**base, baseline="eager PyTorch 58.0 us (speedup), torch.compile 53.2 us "
                                                          "(speedup_compile)",
                                         n="one kernel per turn, 100 timing trials, 8192 x 4096 bf16"))
    return [{**base, "figure": _save(fig, FIGURES / "layernorm_case"),
             "shows": "speedup against eager and torch.compile, share of copy bandwidth and reward per turn"}]


def write_index(made: list[dict]) -> Path:
    lines = ["# Figures", "",
             "Every committed figure, with the run that made it. Drawn again from the data in the repository by",
             "`.venv/bin/python experiments/figures.py` (this index too); notebooks write theirs to `runs/figures/`,",
             "which git ignores. Each figure's subtitle says the same: run, model, card, baseline, n.", "",
             "| figure | run | model | card | what it shows |", "|---|---|---|---|---|"]
    for m in sorted(made, key=lambda m: str(m["figure"])):
        rel = m["figure"].relative_to(REPO)
        link = f"[{rel}]({'../' + str(rel) if not str(rel).startswith('figures/') else rel.name})"
        lines.append(f"| {link} | {m['run']} | {m['model']} | {m['card']} | {m['shows']} |")
    lines.append(f"| [figures/layernorm_inspector.png](layernorm_inspector.png) | data/cases/layernorm/h200.jsonl | "
                 f"none (hand-written turns) | NVIDIA H200 | {INSPECTOR_NOTE} |")
    path = FIGURES / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def all_figures(draw: bool = True) -> list[dict]:
    jobs = [diagnostics_figure, layernorm_figure]
    for folder in sorted(RUNS.iterdir()):
        if (folder / "figures" / "drill_rl.png").exists():
            jobs.append(lambda folder=folder: drill_figure(folder))
        elif (folder / "figures").is_dir():
            jobs.append(lambda folder=folder: mini_run_figures(folder))
    if not draw:
        plots.save_figure = lambda fig, name, folder="figures": []  # the index only: nothing written
    return [m for job in jobs for m in job()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--index", action="store_true", help="only figures/README.md, no figure drawn")
    args = p.parse_args()
    made = all_figures(draw=not args.index)
    print(write_index(made), f"({len(made) + 1} figures)")


if __name__ == "__main__":
    main()
